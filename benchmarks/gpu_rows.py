"""Does leaving out the queries a layer crops away (``run_plan_rows``) pay on CUDA too? Prints figures, asserts nothing.

On the CPU each SST layer computes attention only for the query rows its crop keeps (``AttentionPlan.drops_rows``,
2026-11-26): 1.07-1.57x on padded sizes. On CUDA it is off, unmeasured: the fused path writes q, k, v straight
into the attention's buffers, and the rows path gathers each group's copies for every kernel but the CPU's own.
This times the whole network with the rows path forced on and off, alternating, on the sizes that pad most:
Table S4's x3 input (427x240: every 64 px layer pads 240 to 256 rows) and its x2 input (640x360 -> 384).

    python benchmarks/gpu_rows.py [--device cuda] [--runs 10] [--json OUT/rows.json]
    python benchmarks/gpu_rows.py --device cpu --cases sst-light:4:64x48 --runs 1     # a rehearsal, no GPU

Median ms of ``--runs`` after one warm-up per side; the largest difference between the two outputs (the rows
path is exact: it only skips outputs nobody reads). Random weights: the speed does not depend on them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import torch

from sst_cli import create_model
from sst_cli.archs.attention import AttentionPlan

CASES = ("sst-l:3:427x240", "sst:3:427x240", "sst-l:2:640x360", "sst-light:4:320x180")


@contextmanager
def rows_path(on: bool):
    """Every layer takes (or skips) the rows path, whatever the device."""
    with mock.patch.object(AttentionPlan, "drops_rows", property(lambda _: on)):
        yield


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def case(spec: str, device: torch.device, dtype: torch.dtype, runs: int) -> dict:
    name, scale, size = spec.split(":")
    w, h = (int(n) for n in size.split("x"))
    torch.manual_seed(0)
    model = create_model(name, int(scale)).eval().to(device, dtype)
    x = torch.rand(1, 3, h, w, device=device, dtype=dtype)
    times: dict[bool, list[float]] = {True: [], False: []}
    outs = {}
    with torch.inference_mode():
        for on in (True, False):  # warm-up: plans, RIB caches, kernel choice
            with rows_path(on):
                outs[on] = model(x).float()
        for _ in range(runs):
            for on in (True, False):
                with rows_path(on):
                    _sync(device)
                    start = time.perf_counter()
                    model(x)
                    _sync(device)
                    times[on].append(1000 * (time.perf_counter() - start))
    on_ms, off_ms = statistics.median(times[True]), statistics.median(times[False])
    return dict(case=spec, dtype=str(dtype).removeprefix("torch."), rows_ms=round(on_ms, 2), all_ms=round(off_ms, 2),
                speedup=round(off_ms / on_ms, 3), max_diff=(outs[True] - outs[False]).abs().max().item())  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cases", nargs="+", default=list(CASES), help="MODEL:SCALE:WxH of the input")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    for spec in args.cases:
        for dtype in args.dtypes:
            row = case(spec, device, getattr(torch, dtype), args.runs)
            print(f"{row['case']:>18} {row['dtype']:>8}: rows path {row['rows_ms']:9.2f} ms, every row "
                  f"{row['all_ms']:9.2f} ms, {row['speedup']:.3f}x, max|diff| {row['max_diff']:.1e}")  # fmt: skip
            rows.append(row)
    if args.json:
        meta = dict(device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu", torch=torch.__version__)
        args.json.write_text(json.dumps(dict(meta=meta, rows=rows), indent=2) + "\n")


if __name__ == "__main__":
    main()
