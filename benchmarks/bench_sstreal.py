"""SSTReal-X4 on the CPU: time and peak memory for one LR input, whole image and tiled; tiled-vs-whole PSNR.

The released architecture (``sst-real``: 54,986,502 parameters, the authors' option file) with seeded random
weights (layer scales U(0.5, 1.5) and adaLN weights N(0, 1/fan_in), as in the golden files, so that every
block does work); fp32. Each configuration runs in a fresh subprocess so that its peak RSS (``ru_maxrss``)
is its own. The input is a ``--size`` square cut from ``examples/rocket.jpg`` (a real JPEG photo), resized to cover.

    PYTHONPATH=. python3 benchmarks/bench_sstreal.py --size 256 --tiles 0 128 --threads 2

Prints one markdown table (stdout); progress on stderr. Outputs land in ``--workdir`` (a temporary folder by
default) as ``.npy`` for the PSNR against the whole-image run (raw float outputs in [0, 1], peak 1.0).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tiling import _current_rss_kib, _peak_rss_kib, cpu_model  # noqa: E402 (the script's own folder)


def build_model():  # type: ignore[no-untyped-def]
    import torch

    from sst_cli import create_model

    torch.manual_seed(0)
    model = create_model("sst-real", 4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.uniform_(0.5, 1.5)
            elif "adaLN" in name and name.endswith("weight"):
                p.normal_(0, p.shape[1] ** -0.5)
    return model.eval()


def build_input(size: int):  # type: ignore[no-untyped-def]
    import torch
    from PIL import Image

    photo = Image.open(ROOT / "examples" / "rocket.jpg").convert("RGB")
    ratio = size / min(photo.size)
    photo = photo.resize((max(size, round(photo.width * ratio)), max(size, round(photo.height * ratio))), Image.LANCZOS)
    left, top = (photo.width - size) // 2, (photo.height - size) // 2
    array = np.asarray(photo.crop((left, top, left + size, top + size)), dtype=np.float32) / 255.0
    return torch.from_numpy(array.transpose(2, 0, 1).copy())


def child(spec: dict) -> None:
    import torch

    from sst_cli.tiling import plan_tiles
    from sst_cli.upscaler import Upscaler

    torch.set_num_threads(spec["threads"])
    model = build_model()
    image = build_input(spec["size"])
    upscaler = Upscaler(model, device="cpu", precision="fp32", tile=spec["tile"], tile_overlap=spec["overlap"])
    plan = upscaler.plan(spec["size"], spec["size"])
    base = _current_rss_kib()
    start = time.perf_counter()
    out = upscaler.run(image).image
    seconds = time.perf_counter() - start
    np.save(spec["out"], out.numpy())
    tiles = len(plan_tiles(spec["size"], spec["size"], plan.tile, plan.overlap, plan.align))
    print(json.dumps({"seconds": seconds, "peak_kib": _peak_rss_kib(), "base_kib": base, "tile": plan.tile,
                      "overlap": plan.overlap, "tiles": tiles}))  # fmt: skip


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256, help="LR side in pixels (default 256)")
    parser.add_argument("--tiles", type=int, nargs="+", default=[0, 128], help="tile sides, 0 = whole (first)")
    parser.add_argument("--overlap", type=int, default=None, help="context pixels (default: the model's, 64)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_sstreal_"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    rows, whole = [], None
    for tile in args.tiles:
        spec = {"size": args.size, "tile": tile, "overlap": args.overlap, "threads": args.threads,
                "out": str(workdir / f"tile{tile}.npy")}  # fmt: skip
        print(f"running tile {tile} ...", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                              env=env, check=False)  # fmt: skip
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            return 1
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        out = np.load(spec["out"])
        if whole is None:
            whole = out
        result["psnr"] = psnr(out, whole)
        result["max_abs"] = float(np.abs(out - whole).max())
        rows.append(result)
        print(f"  {result}", file=sys.stderr, flush=True)
    import torch

    print(f"- **CPU**: {cpu_model()}, {args.threads} torch threads; torch {torch.__version__}; "
          f"date {datetime.date.today().isoformat()}")  # fmt: skip
    side = f"{args.size}x{args.size}"
    print(f"- **input**: {side} LR (output {4 * args.size}x{4 * args.size}), sst-real, random weights, fp32")
    print()
    print("| tile | overlap | tiles | time s | peak MiB | act MiB | PSNR vs whole dB | max abs diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        act = (r["peak_kib"] - r["base_kib"]) / 1024 if r["base_kib"] else float("nan")
        print(f"| {r['tile'] or 'whole'} | {r['overlap'] if r['tile'] else '-'} | {r['tiles']} | {r['seconds']:.1f} | "
              f"{r['peak_kib'] / 1024:.0f} | {act:.0f} | {r['psnr']:.1f} | {r['max_abs']:.2e} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
