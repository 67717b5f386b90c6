"""Seams of networks whose tiles cannot be exact (``sst_cli.seams``), measured on a probe; and the Upscaler
choosing the context they need, or saying the measured figure when the tiles asked for fall short.

The toy network adds a global channel statistic to a local convolution (as squeeze-and-excitation or
channel attention do), so every output pixel depends a little on the whole image."""

from __future__ import annotations

import math
import re
import threading

import pytest
import torch
from torch import nn

from sst_cli import Upscaler
from sst_cli.archs import ModelDescriptor, SRNetwork
from sst_cli.errors import OutOfMemory
from sst_cli.files import TEMP_SUFFIX
from sst_cli.options import UpscaleOptions
from sst_cli.seamcache import PROBE_VERSION, SeamCache
from sst_cli.seams import CONTEXTS, MAX_PROBE, MIN_PROBE, TARGET_DB, SeamGuide, SeamProbe, probe_picture, probe_side

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster on shared cores


class GlobalMix(SRNetwork):
    """x2 nearest upscale of a 3x3 convolution plus ``strength`` times the image's mean per channel; counts its
    forward passes."""

    def __init__(self, strength: float, exact: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.register_buffer("strength", torch.tensor(strength))  # in the state dict: part of the weights
        self.exact = exact
        self.calls = 0

    def describe(self) -> ModelDescriptor:
        return ModelDescriptor("GlobalMix", 2, exact_context=self.exact, default_context=4)

    def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
        return 64 * height * width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = self.conv(x) + self.strength * x.mean((2, 3), keepdim=True)
        return nn.functional.interpolate(y, scale_factor=2, mode="nearest")


def _forward(model: nn.Module):  # type: ignore[no-untyped-def]
    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    return run


def test_probe_picture_is_fixed_and_spans_the_range() -> None:
    a, b = probe_picture(64), probe_picture(64)
    assert torch.equal(a, b) and a.shape == (3, 64, 64)
    assert float(a.min()) == 0.0 and float(a.max()) == 1.0
    # large shapes: the two halves' means differ well beyond what pixel noise would give
    assert float((a[:, :, :32].mean() - a[:, :, 32:].mean()).abs()) > 0.01


def test_more_context_and_less_global_dependence_measure_closer_to_the_whole() -> None:
    local = SeamProbe(_forward(GlobalMix(0.0)), 2, side=64)
    mixed = SeamProbe(_forward(GlobalMix(0.5)), 2, side=64)
    figures = [mixed.measure(16, c).psnr for c in (0, 8, 16)]
    assert all(math.isfinite(f) for f in figures)
    assert figures[0] < figures[1] < figures[2], "more context sees more of the image: closer to the whole"
    assert local.measure(16, 8).psnr > figures[1] + 10


def test_guide_takes_the_smallest_context_that_reaches_the_target() -> None:
    guide = SeamGuide(_forward(GlobalMix(0.002)), 2, 1, default_context=4)
    assert guide.contexts[0] == 4 and guide.contexts[1:] == sorted(c for c in CONTEXTS if c > 4)
    needed = guide.needed
    assert guide.reachable and needed.psnr >= TARGET_DB
    smaller = [c for c in guide.contexts if c < needed.context]
    assert all(guide.probe.measure(guide.tile, c).psnr < needed.psnr for c in smaller)


def test_guide_says_when_no_context_reaches_the_target() -> None:
    guide = SeamGuide(_forward(GlobalMix(1.0)), 2, 1, default_context=4)
    assert not guide.reachable
    text = guide.advice(32, 8)
    assert "below 60 dB, and no context up to 64 px reaches it" in text and "--tile auto" in text


def test_upscaler_tiles_with_the_learned_context() -> None:
    model = GlobalMix(0.002)
    image = probe_picture(128, seed=3)
    messages: list[str] = []
    up = Upscaler(model, device="cpu", precision="fp32", tile=32, on_message=messages.append)
    plan = up.plan(128, 128)
    assert plan.blend and plan.overlap == up.seams.needed.context > model.describe().default_context
    got = up.run(image).image
    with torch.inference_mode():
        whole = model(image[None])[0]
    mse = float(((got.clamp(0, 1) - whole.clamp(0, 1)).double() ** 2).mean())
    assert 10 * math.log10(1 / mse) >= TARGET_DB
    assert any("GlobalMix: its tiles cannot equal the whole image; 32 px tiles" in m for m in messages), messages


def test_forced_small_tiles_say_their_measured_bound() -> None:
    messages: list[str] = []
    up = Upscaler(GlobalMix(0.002), device="cpu", precision="fp32", tile=8, tile_overlap=2, on_message=messages.append)
    assert up.plan(96, 96).overlap == 2, "a context the user gave is kept"
    up.run(probe_picture(96, seed=3))
    said = [m for m in messages if "px of context measured" in m]
    assert len(said) == 1, messages
    match = re.search(
        r"8 px tiles with 2 px of context measured ([\d.]+) dB .* below 60 dB, which needs tiles of at "
        r"least 32 px with (\d+) px of context",
        said[0],
    )
    assert match, said[0]
    assert float(match[1]) == pytest.approx(up.seams.probe.measure(8, 2).psnr, abs=0.05)
    assert int(match[2]) == up.seams.needed.context


def test_whole_images_and_exact_networks_never_probe() -> None:
    model = GlobalMix(0.05)
    up = Upscaler(model, device="cpu", precision="fp32", tile="auto")
    assert up.plan(64, 64).tile == 0 and model.calls == 0
    exact_model = GlobalMix(0.0, exact=1)
    exact = Upscaler(exact_model, device="cpu", precision="fp32", tile=16)
    assert not exact.plan(64, 64).blend and exact_model.calls == 0


def _limited(up: Upscaler, pixels: int) -> list[int]:
    """Make ``up``'s forward run out of memory above ``pixels`` per pass; the passes that ran are listed."""
    real, ran = up._forward, []

    def forward(x: torch.Tensor, origins: object = None) -> torch.Tensor:
        if x.shape[0] * x.shape[-2] * x.shape[-1] > pixels:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        ran.append(x.shape[-2] * x.shape[-1])
        return real(x)

    up._forward = forward  # type: ignore[method-assign]
    return ran


def test_exact_does_not_tile_a_network_no_context_makes_exact() -> None:
    """--exact on such a network (DAT, spandrel's HAT) runs the whole image; out of memory there cut it into tiles
    with no overlap at all, hard seams, and the run succeeded. Now it is an error that says what to do."""
    messages: list[str] = []
    up = Upscaler(GlobalMix(0.05), device="cpu", precision="fp32", exact=True, on_message=messages.append)
    picture = probe_picture(64, seed=3)
    with torch.inference_mode():
        whole = up.model(picture[None])[0]
    assert torch.equal(up.run(picture).image, whole), "the whole image, where it fits"
    ran = _limited(up, 32 * 32)
    with pytest.raises(OutOfMemory) as info:
        up.run(picture)
    assert str(info.value) == (
        "out of memory on cpu running the whole image (a single allocation of 2.00 GiB): exact=True needs the whole "
        "image in memory at once, since no context makes GlobalMix's tiles equal it; drop exact=True to run it in "
        "tiles (with the context measured to keep them within 60 dB of the whole image), or use a device with more "
        "memory"
    )
    assert ran == [] and messages == [], "no tiles, no retries"
    command_line = UpscaleOptions(device="cpu", precision="fp32", exact=True, cli=True)  # as sst upscale makes it
    cli_up = Upscaler(GlobalMix(0.05), options=command_line)
    _limited(cli_up, 32 * 32)
    with pytest.raises(OutOfMemory, match=r": --exact needs the whole image .*; drop --exact to run it in tiles"):
        cli_up.run(picture)
    exact = Upscaler(GlobalMix(0.0, exact=2), device="cpu", precision="fp32", exact=True, tile=0)
    with torch.inference_mode():
        whole = exact.model(picture[None])[0]
    ran = _limited(exact, 40 * 40)
    got = exact.run(picture).image  # tiles with the exact context keep the promise, to float rounding
    assert ran and max(ran) <= 40 * 40 and torch.allclose(got, whole, rtol=0, atol=1e-6)


class Hungry(GlobalMix):
    """GlobalMix that runs out of memory above ``pixels`` per pass (over the batch); lists the passes' shapes."""

    def __init__(self, strength: float, pixels: int) -> None:
        super().__init__(strength)
        self.pixels = pixels
        self.shapes: list[tuple[int, ...]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.shapes.append(tuple(x.shape))
        if x.shape[0] * x.shape[-2] * x.shape[-1] > self.pixels:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return super().forward(x)


def test_a_probe_that_runs_out_of_memory_falls_back_to_a_smaller_one_once() -> None:
    """The probe runs before the out-of-memory handling of the run: a raw torch.OutOfMemoryError failed each file.
    Now the probe's tiles take one per pass, then a smaller probe measures, and later pictures start there."""
    model = Hungry(0.002, 256 * 256)
    messages: list[str] = []
    up = Upscaler(model, device="cpu", precision="fp32", tile=32, batch=16, on_message=messages.append)
    picture = probe_picture(300, seed=3)
    up.run(picture)
    assert up.seams.probe.side == 256 and up.seams.needed.measured and up.seams.probe.batch == 1
    measuring = "measuring how far tiles of this network stray from the whole image, on a {} px probe (once: the "
    assert messages[:4] == [
        measuring.format(384) + "figures are kept for later runs)",  # said before it runs: minutes on a CPU
        "the 384 px seams probe ran out of memory: measuring on a smaller one, so tiles of pictures that large may "
        "stray more than measured",
        measuring.format(256) + "figures are kept for later runs)",
        "the seams probe ran out of memory: its tiles run one per pass",  # 16 tiles with 32 px of context
    ]
    assert any("on a 256 px probe" in m for m in messages), messages
    model.shapes.clear()
    said = len(messages)
    up.run(probe_picture(300, seed=4))
    assert max(h for *_, h, _ in model.shapes) <= 160, "no probe ran again"
    assert not any("probe ran out" in m for m in messages[said:])


def test_no_probe_fitting_in_memory_takes_the_largest_context_unmeasured() -> None:
    model = Hungry(0.002, 100 * 100)  # not even the 128 px probe, but the picture's 32 px tiles with 64 px around
    messages: list[str] = []
    up = Upscaler(model, device="cpu", precision="fp32", tile=32, on_message=messages.append)
    plan = up.plan(96, 97)  # one column more than 32 px tiles with 64 px of context cover
    assert plan.tile == 32 and plan.overlap == max(CONTEXTS) and not up.seams.needed.measured
    up.run(torch.rand(3, 96, 97))
    assert [m for m in messages if "probe" in m and not m.startswith("measuring how far")] == [
        "the 192 px seams probe ran out of memory: measuring on a smaller one, so tiles of pictures that large may "
        "stray more than measured",
        "the 128 px seams probe ran out of memory: measuring on a smaller one, so tiles of pictures that large may "
        "stray more than measured",
        "the seams probe ran out of memory even at 128 px: tiles get the largest context tried (64 px) unless "
        "--tile-overlap is given, unmeasured",
        "GlobalMix: its tiles cannot equal the whole image; 32 px tiles with 64 px of context are not measured (the "
        "128 px seams probe ran out of memory): how far they stray from the whole image is unknown",
    ]
    model.shapes.clear()
    said = len(messages)
    assert up.plan(96, 97) == plan and up.plan(300, 300).overlap == max(CONTEXTS)
    assert model.shapes == [] and messages[said:] == [], "remembered: no probe runs again"


def test_a_figure_that_runs_out_of_memory_to_measure_is_said_unmeasured(monkeypatch: pytest.MonkeyPatch) -> None:
    """The figure of tiles below the learned ones is measured when the run says it, outside the run's handling."""
    messages: list[str] = []
    up = Upscaler(GlobalMix(0.002), device="cpu", precision="fp32", tile=8, tile_overlap=2, on_message=messages.append)
    up.plan(96, 96)

    def out_of_memory(tile: int, context: int) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(up.seams.probe, "measure", out_of_memory)
    up.run(probe_picture(96, seed=3))
    assert [m for m in messages if m.startswith("GlobalMix")] == [
        "GlobalMix: its tiles cannot equal the whole image; 8 px tiles with 2 px of context are not measured (the 192 "
        "px seams probe ran out of memory): how far they stray from the whole image is unknown"
    ]


def test_auto_tiles_get_the_learned_context_when_the_image_does_not_fit() -> None:
    up = Upscaler(GlobalMix(0.002), device="cpu", precision="fp32", tile="auto", max_memory=64 * 96 * 96 // 2)
    plan = up.plan(96, 96)
    assert plan.tile != 0 and plan.overlap == up.seams.needed.context


def test_probe_side_follows_the_picture_within_its_bounds() -> None:
    assert probe_side(100, 60) == MIN_PROBE == 192
    assert probe_side(224, 200) == 256 and probe_side(300, 385) == 512
    assert probe_side(4000, 3000) == MAX_PROBE == 512
    assert probe_side(4000, 3000, largest=256) == 256, "no larger than runs whole in memory"
    assert probe_side(224, 200, align=48) == 240


def _psnr(got: torch.Tensor, whole: torch.Tensor) -> float:
    mse = float(((got.clamp(0, 1) - whole.clamp(0, 1)).double() ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def test_the_bound_holds_on_a_picture_larger_than_the_smallest_probe() -> None:
    """A tile strays by how far its context box's mean differs from the whole picture's, so a larger picture
    strays more: the probe grows with the picture, and what it learns holds on the picture itself."""
    strength, side = 0.013, 384  # the 192 px probe: 32 px of context (63.2 dB there, 59.3 on this picture)
    small = SeamGuide(_forward(GlobalMix(strength)), 2, 1, default_context=4, batch=16, side=MIN_PROBE).needed
    image = probe_picture(side, seed=5)
    model = GlobalMix(strength)
    messages: list[str] = []
    up = Upscaler(model, device="cpu", precision="fp32", tile=32, batch=16, on_message=messages.append)
    with torch.inference_mode():
        whole = model(image[None])[0]
    old = Upscaler(GlobalMix(strength), device="cpu", precision="fp32", tile=32, batch=16, tile_overlap=small.context)
    assert _psnr(old.run(image).image, whole) < TARGET_DB, "the smallest probe's context falls short here"
    assert up.plan(side, side).overlap > small.context and up.seams.probe.side == side
    assert _psnr(up.run(image).image, whole) >= TARGET_DB
    assert any(f"on a {side} px probe" in m for m in messages), messages


def test_a_second_upscaler_on_the_same_weights_reads_the_probe_from_disk(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SST_SEAMS_CACHE", str(tmp_path / "cache"))
    first = GlobalMix(0.002)
    plan = Upscaler(first, device="cpu", precision="fp32", tile=32, batch=16).plan(128, 128)
    assert first.calls > 0, "the first upscaler measures"
    second = GlobalMix(0.002)
    up = Upscaler(second, device="cpu", precision="fp32", tile=32, batch=16)
    assert up.plan(128, 128) == plan and up.seams.needed == Upscaler(first, tile=32, device="cpu").seams.needed
    assert second.calls == 0, "the same weights: the figures come from the cache"
    other = GlobalMix(0.004)
    Upscaler(other, device="cpu", precision="fp32", tile=32, batch=16).plan(128, 128)
    assert other.calls > 0, "other weights are measured"
    files = list((tmp_path / "cache").glob("*.json"))
    leftovers = [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(TEMP_SUFFIX)]
    assert len(files) == 2 and not leftovers, "one file per network, atomic"


def test_a_chosen_tile_is_learned_at_its_own_size() -> None:
    """Larger tiles stray less: --tile 64 gets the context 64 px tiles need (16 here), not the 32 that MIN_TILE
    (32 px) tiles need; the bound still holds at the chosen size."""
    plans = {}
    for tile in (32, 64):
        up = Upscaler(GlobalMix(0.005), device="cpu", precision="fp32", tile=tile, batch=16)
        plans[tile] = up.plan(192, 192)
        assert up.seams.needed.tile == tile and up.seams.needed.psnr >= TARGET_DB + 3
    assert (plans[32].overlap, plans[64].overlap) == (32, 16)
    whole = Upscaler(GlobalMix(0.005), device="cpu", precision="fp32", tile=0)
    picture = probe_picture(192, seed=3)
    tiled = Upscaler(GlobalMix(0.005), device="cpu", precision="fp32", tile=64, batch=16)
    error = (tiled.run(picture).image - whole.run(picture).image).double().pow(2).mean()
    assert 10 * math.log10(1 / float(error)) >= TARGET_DB


def test_auto_tiles_are_learned_at_their_own_size() -> None:
    """Room for 128 px context boxes: auto's 112 px tiles are measured (at 64 px, half the 128 px probe that fits
    memory) and need 16 px of context, where 32 px tiles would need 32; when the context learned makes the tiles
    smaller than those measured, they are measured again (room for 96 px: 32 px tiles, 32 px of context)."""
    roomy = Upscaler(GlobalMix(0.005), device="cpu", precision="fp32", tile="auto", max_memory=64 * 128 * 128)
    plan = roomy.plan(192, 192)
    assert (plan.tile, plan.overlap, roomy.seams.needed.tile, roomy.seams.needed.context) == (112, 16, 64, 16)
    assert roomy.seams.needed.psnr >= TARGET_DB + 3
    assert Upscaler(GlobalMix(0.005), device="cpu", precision="fp32", tile=32).plan(192, 192).overlap == 32
    tight = Upscaler(GlobalMix(0.02), device="cpu", precision="fp32", tile="auto", max_memory=64 * 96 * 96)
    plan = tight.plan(192, 192)
    assert (plan.tile, plan.overlap) == (32, 32) and tight.seams.needed.tile == 32
    assert {tile for tile, _ in tight.seams.probe._measured} == {32, 64}, "64 px first, then 32 px"


def test_processes_measuring_the_same_figure_measure_it_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The second measurer (another process's SeamCache: its own lock file handle) waits, then reads the figure."""
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow() -> float:
        calls.append("first")
        started.set()
        assert release.wait(30)
        return 61.5

    def fails() -> float:
        calls.append("second")
        return 0.0

    first = threading.Thread(target=lambda: SeamCache("k", tmp_path).get_or_measure(256, 32, 16, slow))
    first.start()
    assert started.wait(30)
    got: list[float] = []
    second = threading.Thread(target=lambda: got.append(SeamCache("k", tmp_path).get_or_measure(256, 32, 16, fails)))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "it waits for the first measurer"
    release.set()
    first.join(30), second.join(30)
    assert calls == ["first"] and got == [61.5]
    assert SeamCache("k", tmp_path).get_or_measure(256, 64, 16, lambda: 70.0) == 70.0  # a new figure is measured


def test_a_corrupt_or_unwritable_cache_is_ignored(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SST_SEAMS_CACHE", str(tmp_path / "cache"))
    expected = Upscaler(GlobalMix(0.002), device="cpu", precision="fp32", tile=32, batch=16).plan(128, 128)
    (stored,) = (tmp_path / "cache").glob("*.json")
    for text in ("{not json", f'{{"version": {PROBE_VERSION}, "psnr": [1, 2]}}', '{"psnr": {"192/32/4": "x"}}'):
        stored.write_text(text)
        model = GlobalMix(0.002)
        assert Upscaler(model, device="cpu", precision="fp32", tile=32, batch=16).plan(128, 128) == expected
        assert model.calls > 0, "measured again"
        assert SeamCache(stored.stem, stored.parent).get(MIN_PROBE, 32, expected.overlap) is not None, "rewritten"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SST_SEAMS_CACHE", str(blocker / "cache"))  # a folder that cannot be made
    assert Upscaler(GlobalMix(0.002), device="cpu", precision="fp32", tile=32, batch=16).plan(128, 128) == expected


def test_tiles_whose_context_is_the_whole_image_run_it_once_without_a_probe() -> None:
    """32 px tiles of a 37x53 picture, each with 64 px of context, all computed the whole picture: the seams
    probe ran first (minutes on a CPU for real networks), then warned of seams below 60 dB where there were
    none, and the picture was computed 4 times."""
    model = GlobalMix(0.002)
    messages: list[str] = []
    up = Upscaler(model, device="cpu", precision="fp32", tile=32, tile_overlap=64, on_message=messages.append)
    image = torch.rand(3, 37, 53)
    assert up.plan(37, 53).tile == 0 and messages == []
    whole = Upscaler(model, device="cpu", precision="fp32", tile=0).run(image).image
    model.calls = 0
    assert torch.equal(up.run(image).image, whole) and model.calls == 1

    class WideContext(GlobalMix):  # DAT's default context is its 32 px alignment
        def describe(self) -> ModelDescriptor:
            return ModelDescriptor("GlobalMix", 2, exact_context=None, default_context=32)

    wide = WideContext(0.002)
    probed = Upscaler(wide, device="cpu", precision="fp32", tile=32, on_message=messages.append)
    assert probed.plan(37, 53).tile == 0 and wide.calls == 0 and messages == []  # no probe: the default covers it
    mixed = GlobalMix(0.2)  # default context 4: the probe would learn more, and 32 px tiles with 64 px cover 90x90
    assert Upscaler(mixed, device="cpu", precision="fp32", tile=32).plan(90, 90).tile == 0 and mixed.calls == 0


def test_auto_tiles_that_would_each_see_the_whole_picture_run_it_once_without_a_probe() -> None:
    """--tile auto under a small memory budget planned 16 px tiles of a 19x25 picture for DAT, ran a seams probe of
    six minutes first, and then computed the picture whole anyway (each tile's context was all of it)."""
    model = GlobalMix(0.002)
    messages: list[str] = []
    up = Upscaler(model, device="cpu", precision="fp32", tile="auto", max_memory=64 * 8 * 8, on_message=messages.append)
    plan = up.plan(19, 25)
    assert plan.tile == 0 and model.calls == 0 and messages == []
    image = torch.rand(3, 19, 25)
    whole = Upscaler(model, device="cpu", precision="fp32", tile=0).run(image).image
    model.calls = 0
    assert torch.equal(up.run(image).image, whole) and model.calls == 1 and messages == []
