"""A report as a person sees it: rendered by a real headless Chromium, checked on what is visible.

The numbers of the tables are on the screen, every image loads (none broken, the full-size ones behind the
sliders included, and a missing file is flagged), dragging the slider moves it, clicking a column sorts the
images, and a screenshot is taken. Skipped, saying why, where no Chromium is installed (``.ci/run`` installs
Debian's ``chromium``; ``SST_CHROMIUM`` may name another binary).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from browser import Browser, find_chromium
from PIL import Image
from test_report import pattern, tiny_weights
from typer.testing import CliRunner

from sst_cli.cli import app

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium to render the report in (install Debian's chromium: apt-get install chromium; "
    "or set SST_CHROMIUM)",
)
runner = CliRunner()

ALL_IMAGES_SETTLED = "Array.from(document.images).every(i => !i.getAttribute('src') || i.complete)"
LOAD_EVERYTHING = """(() => {
  document.querySelectorAll('details.slider').forEach(d => { d.open = true; });
  document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; });
  return document.querySelectorAll('img').length;
})()"""
BROKEN = "Array.from(document.images).filter(i => i.naturalWidth === 0).map(i => i.getAttribute('src'))"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with Browser(CHROMIUM, width=1280, height=900) as b:
        yield b


@pytest.fixture(scope="module")
def eval_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    a, b = tiny_weights(root / "tiny_a.safetensors", 1), tiny_weights(root / "tiny_b.safetensors", 2)
    for i in range(3):
        (root / "mine" / "HR").mkdir(parents=True, exist_ok=True)
        Image.fromarray(pattern(40 + 4 * i, 48, i)).save(root / "mine" / "HR" / f"img{i}.png")
    args = ["eval", "-d", str(root / "mine"), "--weights", str(a), "--weights", str(b), "--device", "cpu", "-q"]
    result = runner.invoke(app, [*args, "--report", str(root / "report")])
    assert result.exit_code == 0, result.output
    return root / "report"


def _center(browser: Browser, selector: str) -> tuple[float, float, float, float]:
    """Scroll the element into view; its box (left, top, width, height) in viewport pixels."""
    return tuple(
        browser.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left, r.top, r.width, r.height]; })()"
        )
    )


def test_numbers_images_slider_sorting_and_screenshot(browser: Browser, eval_report: Path, tmp_path: Path) -> None:
    data = json.loads((eval_report / "report.json").read_text())
    browser.open((eval_report / "index.html").as_uri())
    browser.wait_for("document.body.getAttribute('data-ready') === '1'")

    # The numbers: summary means and every per-image PSNR, as the eye reads them.
    text = browser.evaluate("document.body.innerText")
    for row in data["summary"]:
        assert f"{row['psnr_y']:.2f}" in text and f"{row['ssim_y']:.4f}" in text
    for image in data["images"]:
        for value in image["psnr_y"].values():
            assert f"{value:.2f}" in text
        for value in image["crop_psnr_y"].values():
            assert f"{value:.2f} dB" in text
    assert "tiny_a\ngain" in text or "tiny_a gain" in text

    # Every image loads: thumbnails, crops and, once the sliders are opened, the full-size images.
    assert browser.evaluate(LOAD_EVERYTHING) == 3 * (1 + 5 + 2)
    browser.wait_for(ALL_IMAGES_SETTLED)
    assert browser.evaluate(BROKEN) == [] and browser.evaluate("document.body.getAttribute('data-broken')") == "0"
    sizes = browser.evaluate("Array.from(document.querySelectorAll('.stage img')).map(i => i.naturalWidth)")
    assert sizes == [48] * 6  # the HR size: eval shrinks the HR to make the input

    # The slider follows a drag across the picture.
    left, top, width, height = _center(browser, "#images tbody .stage")
    browser.drag((left + width / 2, top + height / 2), (left + 0.2 * width, top + height / 2))
    first = "document.querySelector('#images tbody details.slider')"
    position = float(browser.evaluate(f"{first}.getAttribute('data-position')"))
    assert position == pytest.approx(20, abs=2)
    clip = browser.evaluate(f"{first}.querySelector('img.over').style.clipPath")
    assert clip.startswith("inset(0") and f"{position:.0f}" in clip.replace(".", " ").split()[-1].rstrip("%)")
    # ... and the range under it (the keyboard's way) moves it too.
    browser.evaluate(
        f"(() => {{ const r = {first}.querySelector('input.position'); r.value = '75';"
        " r.dispatchEvent(new Event('input')); })()"
    )
    assert browser.evaluate(f"{first}.getAttribute('data-position')") == "75.0"

    # Sorting by the gain of tiny_b (a click on its header): largest gain first, then reversed.
    left, top, width, height = _center(browser, "button[data-key='gain-m1']")
    browser.mouse("mousePressed", left + width / 2, top + height / 2)
    browser.mouse("mouseReleased", left + width / 2, top + height / 2, buttons=0)
    order = browser.evaluate("Array.from(document.querySelectorAll('#images tbody')).map(t => t.id)")
    gains = {f"img-{Path(i['folder']).name}": i["psnr_y"]["tiny_b"] - i["psnr_y"]["bicubic"] for i in data["images"]}
    assert order == sorted(gains, key=gains.__getitem__, reverse=True)
    browser.evaluate("document.querySelector(\"button[data-key='gain-m1']\").click()")
    assert browser.evaluate("Array.from(document.querySelectorAll('#images tbody')).map(t => t.id)") == order[::-1]

    # A screenshot of the whole page shows a page, not a blank.
    browser.evaluate("window.scrollTo(0, 0)")
    shot = np.asarray(Image.open(browser.screenshot(tmp_path / "report.png", full_page=True)).convert("L"))
    assert shot.shape[1] == 1280 and shot.shape[0] > 900 and shot.std() > 20


def test_a_missing_image_is_flagged(browser: Browser, eval_report: Path, tmp_path: Path) -> None:
    """The check above is not vacuous: a report with a file missing shows it, and the test would see it."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(eval_report, copy)
    victim = next(copy.glob("images/*/crop-m0.png"))
    victim.unlink()
    browser.open((copy / "index.html").as_uri())
    browser.evaluate(LOAD_EVERYTHING)
    browser.wait_for(ALL_IMAGES_SETTLED)
    broken = browser.evaluate(BROKEN)
    assert broken == [victim.relative_to(copy).as_posix()]
    browser.wait_for("document.body.getAttribute('data-broken') === '1'")
    assert browser.evaluate("document.querySelectorAll('img.broken').length") == 1


def test_compare_page_with_alpha_shows_a_checkerboard(browser: Browser, tmp_path: Path) -> None:
    rgba = np.concatenate([pattern(24, 32, 5), np.full((24, 32, 1), 255, np.uint8)], axis=2)
    rgba[:, :12, 3] = 0  # the left part transparent
    Image.fromarray(rgba).save(tmp_path / "logo.png")
    weights = tiny_weights(tmp_path / "tiny_a.safetensors", 1)
    args = ["compare", str(tmp_path / "logo.png"), "--weights", str(weights), "--device", "cpu", "-q"]
    result = runner.invoke(app, [*args, "--crop", "0,0,32,24", "-o", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    browser.open((tmp_path / "rep" / "index.html").as_uri())
    browser.evaluate(LOAD_EVERYTHING)
    browser.wait_for(ALL_IMAGES_SETTLED)
    assert browser.evaluate(BROKEN) == []
    text = browser.evaluate("document.body.innerText")
    assert "alpha" in text and "tiny_a" in text and "bicubic" in text
    # The transparent left part of the bicubic crop shows the checkerboard: two grays alternating.
    left, top, width, height = _center(browser, "figure.crop[data-method='bicubic'] img")
    shot = np.asarray(Image.open(browser.screenshot(tmp_path / "compare.png")).convert("L")).astype(int)
    strip = shot[int(top) + 2 : int(top + height) - 2, int(left) + 2 : int(left + width * 0.3)]
    assert set(np.unique(strip)) >= {207, 255} or (strip.max() - strip.min() > 30 and strip.min() > 180)


def test_a_phone_wide_page_never_scrolls_sideways_and_sliders_keep_whole_pixels(
    browser: Browser, eval_report: Path
) -> None:
    """At 400 px the tables overflowed the page and an opened slider widened it; the slider's border took two
    pixels from the image, so no view was ever 1:1."""
    metrics = {"width": 400, "height": 800, "deviceScaleFactor": 1, "mobile": False}
    browser.call("Emulation.setDeviceMetricsOverride", metrics)
    try:
        browser.open((eval_report / "index.html").as_uri())
        browser.wait_for("document.body.getAttribute('data-ready') === '1'")
        browser.evaluate(LOAD_EVERYTHING)
        browser.wait_for(ALL_IMAGES_SETTLED)
        assert browser.evaluate("document.documentElement.scrollWidth") <= 400
        drawn = browser.evaluate(
            "Array.from(document.querySelectorAll('.stage img')).map(i => [i.getBoundingClientRect().width,"
            " i.naturalWidth, i.closest('.stage').getAttribute('data-enlarged')])"
        )
        for width, natural, enlarged in drawn:  # 48 px pictures, shown 7x: 336 px, whole pixels
            assert enlarged == "1" and width == 7 * natural
        first = "document.querySelector('#images tbody details.slider input.position')"
        browser.evaluate(f"{first}.focus()")
        for key in ("ArrowRight", "PageUp"):
            browser.call("Input.dispatchKeyEvent", {"type": "keyDown", "key": key, "code": key})
            browser.call("Input.dispatchKeyEvent", {"type": "keyUp", "key": key, "code": key})
        assert float(browser.evaluate(f"{first}.value")) == pytest.approx(62)  # 50 + 2 + 10
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")


def test_at_a_laptop_width_the_crops_stay_in_one_row_and_the_header_sticks(browser: Browser, eval_report: Path) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", {"width": 1024, "height": 700, "deviceScaleFactor": 1,
                                                        "mobile": False})  # fmt: skip
    try:
        browser.open((eval_report / "index.html").as_uri())
        browser.wait_for("document.body.getAttribute('data-ready') === '1'")
        assert browser.evaluate("document.documentElement.scrollWidth") <= 1024
        tops = browser.evaluate(
            "Array.from(document.querySelector('#images tbody .crops').children).map(f => f.offsetTop)"
        )
        assert len(set(tops)) == 1  # LR, bicubic, the models and HR side by side
        browser.evaluate("window.scrollTo(0, document.body.scrollHeight / 2)")
        assert browser.evaluate("document.querySelector('#images thead th').getBoundingClientRect().top") == 0
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")


def test_an_exact_match_sorts_as_the_best_score_not_as_a_missing_one(browser: Browser, tmp_path: Path) -> None:
    hr = tmp_path / "flat" / "HR"
    hr.mkdir(parents=True)
    Image.new("RGB", (32, 32), (90, 120, 150)).save(hr / "a_flat.png")  # bicubic is exact: PSNR infinite
    for i in range(2):
        Image.fromarray(pattern(32, 32, i)).save(hr / f"b_real{i}.png")
    args = ["eval", "-d", str(tmp_path / "flat"), "-m", "bicubic", "-s", "2", "-q", "--report", str(tmp_path / "r")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    browser.open((tmp_path / "r" / "index.html").as_uri())
    browser.wait_for("document.body.getAttribute('data-ready') === '1'")
    order = "Array.from(document.querySelectorAll('#images tbody')).map(t => t.id)"
    browser.evaluate("document.querySelector(\"button[data-key='psnr-bicubic']\").click()")
    assert browser.evaluate(order)[0] == "img-flat-x2-a_flat"  # descending: the exact match first (it was last)
    browser.evaluate("document.querySelector(\"button[data-key='psnr-bicubic']\").click()")
    assert browser.evaluate(order)[-1] == "img-flat-x2-a_flat"
    assert "inf" not in browser.evaluate("document.querySelector('table.summary').innerText")  # "∞", as the rows
