#!/usr/bin/env python3
"""Seams of tiled spandrel models: PSNR of tiled output against the whole image, per tile and context, and
the context sst-cli learns on its probe (``sst_cli.seams``) per probe side, with the time the probe took.

Models are the tiny random-weight checkpoints of ``tests/test_spandrel.py`` (spandrel's own classes), or
real checkpoints given with ``--weights``. Tiles run as the engine runs them for models whose tiles cannot be
exact (feathered, aligned to the model's windows); exact models are cropped. The picture is the tests' ramp,
the probe picture itself (another seed), or a photo (a centre crop of any image file). Needs the extra
(``pip install 'sst-cli[spandrel]'``). Nothing is read from or written to the seams cache.

    PYTHONPATH=. python benchmarks/bench_seams.py --models HAT DAT OmniSR --size 192 256 --threads 1
    PYTHONPATH=. python benchmarks/bench_seams.py --models DAT --size 512 512 --picture photo \
        --photo ../shared/datasets/Set14/HR/monarch.png --tiles 32 --contexts 64 --probe-sides 192 512
    PYTHONPATH=. python benchmarks/bench_seams.py --weights HAT_SRx4.pth --device cuda --size 512 512
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from sst_cli import Upscaler
from sst_cli.seams import MIN_PROBE, SeamGuide, probe_picture
from sst_cli.tiling import align_overlap, align_tile_size, plan_tiles, run_tiles

TESTS = Path(__file__).resolve().parents[1] / "tests"


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.clamp(0, 1).double() - b.clamp(0, 1).double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def checkpoints(args: argparse.Namespace, folder: Path) -> list[tuple[str, Path]]:
    if args.weights:
        return [(Path(w).name, Path(w)) for w in args.weights]
    sys.path.insert(0, str(TESTS))
    from test_spandrel import _checkpoint  # the tests' tiny random-weight models

    return [(name, _checkpoint(folder, name)) for name in args.models]


def picture(kind: str, height: int, width: int, photo: str | None = None) -> torch.Tensor:
    if kind == "probe":
        return probe_picture(max(height, width), seed=7)[:, :height, :width].contiguous()
    if kind == "photo":
        import numpy as np
        from PIL import Image

        if photo is None:
            raise SystemExit("--picture photo needs --photo FILE")
        rgb = np.asarray(Image.open(photo).convert("RGB"), dtype=np.float32) / 255
        h, w = rgb.shape[:2]
        if h < height or w < width:
            raise SystemExit(f"{photo} is {w}x{h}, smaller than --size {height} {width}")
        y0, x0 = (h - height) // 2, (w - width) // 2
        return torch.from_numpy(rgb[y0 : y0 + height, x0 : x0 + width].copy()).permute(2, 0, 1).contiguous()
    sys.path.insert(0, str(TESTS))
    from test_spandrel import _image  # a smooth ramp with texture

    return _image(height, width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["HAT", "DAT", "OmniSR", "SwinIR", "ESRGAN"])
    parser.add_argument("--weights", nargs="+", help="real checkpoints instead of the tests' tiny models")
    parser.add_argument("--size", type=int, nargs=2, default=[192, 256], metavar=("H", "W"))
    parser.add_argument("--picture", choices=("ramp", "probe", "photo"), default="ramp")
    parser.add_argument("--photo", help="the image file --picture photo crops (centre)")
    parser.add_argument("--probe-sides", type=int, nargs="*", default=None, help="probe sides to learn on")
    parser.add_argument("--tiles", type=int, nargs="*", default=[32, 64, 128])
    parser.add_argument("--contexts", type=int, nargs="+", default=[16, 32, 48, 64])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    height, width = args.size
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} "
        f"threads, {args.device} {args.precision}; {args.picture} picture {height}x{width}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name, path in checkpoints(args, Path(folder)):
            up = Upscaler(weights=path, device=args.device, precision=args.precision, tile=0)
            d = up.descriptor
            image = picture(args.picture, height, width, args.photo)
            whole = up.run(image).image
            blend = d.exact_context is None
            print(
                f"\n## {name} ({d.architecture}, x{d.scale}, align {d.size_multiple}, "
                f"exact context {d.exact_context}, default {d.default_context})"
            )
            for side in args.probe_sides if args.probe_sides is not None else [MIN_PROBE] if blend else []:
                guide = SeamGuide(up._forward, d.scale, d.size_multiple, d.default_context, batch=4, side=side)
                start = time.perf_counter()
                needed = guide.needed
                print(
                    f"learned on the {guide.probe.side} px probe in {time.perf_counter() - start:.1f} s: "
                    f"{needed.text()}{'' if guide.reachable else ' (target not reached)'}",
                    flush=True,
                )
            print("| tile | " + " | ".join(f"context {c}" for c in args.contexts) + " |")
            print("|---|" + "---|" * len(args.contexts))
            for tile in args.tiles:
                t = align_tile_size(tile, d.size_multiple)
                cells = []
                for context in args.contexts:
                    c = align_overlap(context, d.size_multiple)
                    tiles = plan_tiles(height, width, t, c, d.size_multiple)
                    out = run_tiles(up._forward, image, d.scale, tiles, batch=4, blend=blend)
                    cells.append(f"{psnr(out, whole):.1f}" + ("" if c == context else f" ({c})"))
                print(f"| {t} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
