#!/usr/bin/env python3
"""sst-cli's DAT against spandrel's DAT: the same golden checkpoint, the same input, interleaved runs.

Needs the extra (``pip install 'sst-cli[spandrel]'``) and ``../shared/golden/dat``. Both networks run in
float32 on the CPU, one forward pass per run under ``torch.inference_mode``, alternating run by run so that a
shared machine slows both alike; the table gives medians of process CPU time (``--clock cpu``, steadier on a
shared machine with one thread) or wall time, and the largest difference between the two outputs.

    PYTHONPATH=. python benchmarks/bench_dat_spandrel.py --size 64 --runs 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden" / "dat"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", default="dat_light_x4", help="golden case (dat_light_x4, dat_mini_x3)")
    parser.add_argument("--size", type=int, nargs="+", default=[64], help="LR side(s) in pixels")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from spandrel.architectures.DAT.__arch.DAT import DAT

    from sst_cli import load_model

    kwargs = json.loads((GOLDEN / f"{args.case}.json").read_text())
    state = torch.load(GOLDEN / f"{args.case}.pth", weights_only=True)
    theirs = DAT(**kwargs).eval()
    theirs.load_state_dict(state.get("params", state.get("params_ema", state)))
    ours = load_model(GOLDEN / f"{args.case}.pth").eval()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s), "
        f"{args.clock} clock, {args.case}, median of {args.runs}"
    )
    print("| LR size | sst-cli DAT | spandrel DAT | spandrel / sst-cli | max abs diff |")
    print("|---|---|---|---|---|")
    for side in args.size:
        x = torch.rand(1, 3, side, side, generator=torch.Generator().manual_seed(0))
        times: dict[str, list[float]] = {"ours": [], "theirs": []}
        with torch.inference_mode():
            diff = float((ours(x) - theirs(x)).abs().max())  # also the warm-up
            for _ in range(args.runs):
                for name, model in (("ours", ours), ("theirs", theirs)):
                    start = clock()
                    model(x)
                    times[name].append(clock() - start)
        a, b = statistics.median(times["ours"]), statistics.median(times["theirs"])
        print(f"| {side}x{side} | {a * 1000:.0f} ms | {b * 1000:.0f} ms | {b / a:.2f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
