"""Stage what a GPU session needs from ``../shared`` into the ignored folder ``.gpu/`` of the checkout.

The device tool sends the working tree and the ignored paths named in ``carry`` (64 MiB per call in all);
``../shared`` beside the checkout does not travel. This copies the pieces each kind of call needs:

* ``check``: ``.gpu/shared/`` with the authors' benchmark (``bench/``), the SST golden vectors (weights as
  safetensors, what the GPU scripts read) and Set5 / Set14 (PNG, as they are), laid out like ``../shared``
  so that the tests find them through a ``../shared`` link on the device (``benchmarks/gpu_check.sh`` makes it).
* ``tests``: the golden weights in the authors' ``.pth`` format too, which only the test suite reads
  (``gpu_check.sh``'s ``cudatests`` and ``tests`` steps); 6 MiB that the first session call cannot spare.
* ``train``: ``.gpu/train291/`` as lossless WebP (the same pixels, about two thirds of the PNG size).
* ``video``: ``.gpu/wheels/video/`` with a PyAV wheel for the machine's Python 3.12 (about 35 MB; the image has
  no PyAV), which ``benchmarks/gpu_prelude.sh`` installs, for ``gpu_check.sh``'s ``video`` step.
* ``eval``: ``.gpu/eval/B100/HR`` as lossless WebP (its LR is then made by the MATLAB-compatible bicubic;
  the datasets' README puts the difference from the SelfExSR LR files at <= 0.001 dB). Set5 and Set14
  come with ``check``.

    python benchmarks/gpu_stage.py check train eval video tests      # then: du -sh .gpu/*
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
STAGE = ROOT / ".gpu"
GOLDEN_FILES = ("README.md", "manifest.json", "keys")
GOLDEN_CASES = ("light_x2", "mini_x3")  # each: .json, _io.safetensors, .safetensors, .pth


def _webp(pair: tuple[Path, Path]) -> int:
    src, dst = pair
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(src) as image:
            image.save(dst, lossless=True, quality=100, method=4)
        with Image.open(src) as a, Image.open(dst) as b:  # lossless means the same pixels
            if a.convert("RGB").tobytes() != b.convert("RGB").tobytes():
                raise SystemExit(f"{dst}: WebP pixels differ from {src}")
    return dst.stat().st_size


def _to_webp(src_root: Path, dst_root: Path, pattern: str = "*.png") -> None:
    pairs = [(p, dst_root / p.relative_to(src_root).with_suffix(".webp")) for p in sorted(src_root.rglob(pattern))]
    with ProcessPoolExecutor() as pool:
        total = sum(pool.map(_webp, pairs))
    print(f"{dst_root}: {len(pairs)} images, {total / 2**20:.1f} MiB")


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _golden(pth: bool) -> None:
    """The golden files of the SST cases: the ``.pth`` weights when ``pth``, everything else otherwise."""
    for path in (SHARED / "golden").iterdir():
        if path.name.startswith(GOLDEN_CASES):
            wanted = (path.suffix == ".pth") == pth
        else:
            wanted = path.name in GOLDEN_FILES and not pth
        if wanted:
            _copy(path, STAGE / "shared" / "golden" / path.name)


def stage_check() -> None:
    _copy(SHARED / "bench", STAGE / "shared" / "bench")
    _golden(pth=False)
    for name in ("Set5", "Set14"):  # PNG as they are: Set14's bridge is grayscale, which the protocol keeps
        _copy(SHARED / "datasets" / name, STAGE / "shared" / "datasets" / name)


def stage_tests() -> None:
    _golden(pth=True)


def stage_train() -> None:
    _to_webp(SHARED / "datasets" / "train291", STAGE / "train291")


def stage_eval() -> None:
    _to_webp(SHARED / "datasets" / "B100" / "HR", STAGE / "eval" / "B100" / "HR")


def stage_video() -> None:
    """PyAV for CPython 3.12 on manylinux x86_64, as the device tool's README says to fetch wheels."""
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")]
    fetch = ["download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    command = [sys.executable, "-m", "pip", *fetch, *platforms, "-d", str(STAGE / "wheels" / "video"), "av>=18"]
    subprocess.run(command, check=True)


def main() -> None:
    stages = {
        "check": stage_check,
        "tests": stage_tests,
        "train": stage_train,
        "eval": stage_eval,
        "video": stage_video,
    }
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="+", choices=tuple(stages))
    args = parser.parse_args()
    if not SHARED.is_dir():
        raise SystemExit(f"{SHARED} not found: this stages files from ../shared beside the checkout")
    for part in args.parts:
        stages[part]()
    for path in sorted(STAGE.iterdir()):
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        print(f".gpu/{path.name}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
