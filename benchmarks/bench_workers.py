"""Throughput of one process against ``--workers N`` (and, with ``--ray``, a local Ray) on the same files.

Each configuration runs ``sst upscale`` as a fresh subprocess on the same synthetic photo-like inputs
(smooth gradients plus noise, so that nothing is trivially compressible) into a fresh folder. Printed per
run: wall time of the whole command (start-up, model loads and worker spawns included) and the batch
time the command reports itself (``summary.seconds``: from the first file planned to the last written).

    PYTHONPATH=. python benchmarks/bench_workers.py --files 8 --size 96 --workers 1 2 --ray \
        --weights ../shared/golden/mini_x3.pth --config ../shared/golden/mini_x3.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


def make_inputs(folder: Path, files: int, size: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    y, x = np.mgrid[0:size, 0:size] / size
    for i in range(files):
        base = np.stack([np.sin(3 * x + i), np.cos(4 * y - i), x * y], axis=-1) * 90 + 128
        noisy = base + rng.normal(0, 12, base.shape)
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(folder / f"img{i:03d}.png")


def run(folder: Path, out: Path, extra: list[str], model: list[str]) -> tuple[float, float]:
    command = [sys.executable, "-m", "sst_cli", "upscale", str(folder), "-o", str(out), "--json-log", *model, *extra]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ}, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    summary = next(json.loads(line) for line in done.stdout.splitlines() if '"summary"' in line)
    return wall, float(summary["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--size", type=int, default=128, help="side of each square LR input, pixels")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ray", action="store_true", help="also run --ray local")
    parser.add_argument("--weights", help="weights file (default: the bundled model)")
    parser.add_argument("--config", help="constructor JSON for --weights")
    args = parser.parse_args()
    cpu = platform.processor() or platform.machine()
    print(f"# {args.files} files of {args.size}x{args.size}, {os.cpu_count()} cores ({cpu}), load {os.getloadavg()}")
    print("| run | wall s | batch s | files/s (batch) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "in")
        make_inputs(folder, args.files, args.size)
        configs = [(f"--workers {n}", ["--workers", str(n)]) for n in args.workers]
        if args.ray:
            configs.append(("--ray local", ["--ray", "local"]))
        for number, (label, extra) in enumerate(configs):
            model = ["--device", "cpu"] + (["--weights", args.weights] if args.weights else [])
            model += ["--config", args.config] if args.config else []
            wall, batch = run(folder, Path(tmp, f"out{number}"), extra, model)
            print(f"| {label} | {wall:.1f} | {batch:.1f} | {args.files / batch:.3f} |", flush=True)


if __name__ == "__main__":
    main()
