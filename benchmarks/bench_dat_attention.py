#!/usr/bin/env python3
"""CPU benchmark of DAT's spatial window attention: PyTorch SDPA (bias as an additive mask) vs matmul-softmax.

Three levels, each timed both ways with random weights (timing does not depend on the values), medians
of ``--runs`` interleaved runs after a warm-up, and the largest difference between the two outputs:

* ``kernel``: one branch's windows, q/k/v of shape (windows, heads, N, d) and a (1, heads, N, N) bias:
  ``scaled_dot_product_attention(q, k, v, attn_mask=bias)`` against ``softmax(q k^T * scale + bias) v``.
* ``layer``: one ``SpatialAttention`` (both branches, zero padding, roll, shifted-window masks, the
  convolution branch and the interaction module), unshifted and shifted: the fast path against the
  authors' formulation (``plain``, the path ``sst bench --reference`` swaps in).
* ``model``: a whole forward pass of a zoo variant, ``model(x)`` against ``with model.reference_path()``.

Shapes are those of the official variants: DAT / DAT-2 (embed_dim 180, 6 heads: 3 per branch of 30
channels, 8x32 windows = 256 tokens), DAT-S (8x16 windows = 128 tokens), DAT-light (embed_dim 60: heads of
10 channels, and a one-channel position-bias MLP, so its bias is constant along the keys and SDPA runs
without a mask). Inputs are LR sizes: 64x64 is DAT's training patch, larger ones are tiles.

    PYTHONPATH=. python3 benchmarks/bench_dat_attention.py --threads 1
    PYTHONPATH=. python3 benchmarks/bench_dat_attention.py --threads 2 --sizes 64 128 --runs 5 --markdown
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import torch
import torch.nn.functional as F

from sst_cli.archs.dat.blocks import SpatialAttention
from sst_cli.archs.dat.window import relative_index
from sst_cli.zoo import create_model, get_variant

VARIANTS = {"dat": (180, 6, (8, 32)), "dat-s": (180, 6, (8, 16)), "dat-light": (60, 6, (8, 32))}


@dataclass
class Row:
    level: str
    what: str
    fast_ms: float
    plain_ms: float
    max_diff: float

    @property
    def ratio(self) -> float:
        return self.plain_ms / self.fast_ms


CLOCK = time.perf_counter  # or time.process_time (--cpu-time): CPU seconds of this process, all threads


def timed(fast: Callable[[], torch.Tensor], plain: Callable[[], torch.Tensor], runs: int) -> tuple[float, float, float]:
    """Median ms of each (interleaved, after one warm-up each) and the max |difference| of their outputs."""
    with torch.inference_mode():
        a, b = fast(), plain()
        diff = (a.float() - b.float()).abs().max().item()
        times: dict[str, list[float]] = {"fast": [], "plain": []}
        for _ in range(runs):
            for name, f in (("fast", fast), ("plain", plain)):
                t0 = CLOCK()
                f()
                times[name].append((CLOCK() - t0) * 1e3)
    return statistics.median(times["fast"]), statistics.median(times["plain"]), diff


def kernel_rows(sizes: list[int], runs: int) -> list[Row]:
    rows = []
    for name, (dim, heads, (s0, s1)) in VARIANTS.items():
        h, d, n = heads // 2, dim // 2 // (heads // 2), s0 * s1
        for side in sizes:
            windows = (side // s0) * (side // s1)
            q, k, v = (torch.randn(windows, h, n, d) for _ in range(3))
            constant = name == "dat-light"  # its one-channel bias MLP gives one value per head
            table = torch.randn(1 if constant else (2 * s0 - 1) * (2 * s1 - 1), h)
            index = torch.zeros(n * n, dtype=torch.long) if constant else relative_index(s0, s1).view(-1)
            bias = table[index].view(n, n, h).permute(2, 0, 1)[None].contiguous()
            scale = d**-0.5
            mask = None if constant else bias  # as the network does: a bias constant along the keys is dropped

            def sdpa(q=q, k=k, v=v, mask=mask, scale=scale) -> torch.Tensor:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

            def plain(q=q, k=k, v=v, bias=bias, scale=scale) -> torch.Tensor:
                return ((q * scale) @ k.transpose(-2, -1) + bias).softmax(dim=-1) @ v

            what = (
                f"{name}: {windows} windows x {h} heads, N={n}, d={d}{', no mask' if constant else ''} ({side}x{side})"
            )
            rows.append(Row("kernel", what, *timed(sdpa, plain, runs)))
    return rows


def layer_rows(sizes: list[int], runs: int) -> list[Row]:
    rows = []
    for name, (dim, heads, split) in VARIANTS.items():
        for shift in (False, True):
            torch.manual_seed(0)
            layer = SpatialAttention(dim, heads, split, True, None, 64, shift).eval()
            for side in sizes:
                x = torch.randn(1, side, side, dim)

                def fast(layer=layer, x=x) -> torch.Tensor:
                    layer.plain = False
                    return layer(x)

                def plain(layer=layer, x=x) -> torch.Tensor:
                    layer.plain = True
                    return layer(x)

                what = f"{name}: SpatialAttention {'shifted' if shift else 'unshifted'}, {side}x{side}"
                rows.append(Row("layer", what, *timed(fast, plain, runs)))
    return rows


def model_rows(models: list[str], side: int, runs: int) -> list[Row]:
    rows = []
    for name in models:
        torch.manual_seed(0)
        model = create_model(name, 4).eval()
        x = torch.rand(1, 3, side, side)

        def fast(model=model, x=x) -> torch.Tensor:
            return model(x)

        def plain(model=model, x=x) -> torch.Tensor:
            with model.reference_path():
                return model(x)

        what = f"{get_variant(name).title} x4, whole forward pass, {side}x{side}"
        rows.append(Row("model", what, *timed(fast, plain, runs)))
    return rows


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256], help="LR sides for kernel/layer")
    parser.add_argument("--models", nargs="*", default=["dat-light", "dat-s"], help="zoo names for whole passes")
    parser.add_argument("--model-size", type=int, default=64, help="LR side of the whole forward passes")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--levels", nargs="+", default=["kernel", "layer", "model"], help="what to measure")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with the process's CPU time instead of the wall clock (steadier on shared cores; 1 thread)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
    clock = "process CPU time" if args.cpu_time else "wall clock"
    print(f"CPU: {cpu_model()}; torch {torch.__version__}; {torch.get_num_threads()} thread(s); "
          f"{datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; median of {args.runs} interleaved runs, "
          f"{clock}")  # fmt: skip
    rows = kernel_rows(args.sizes, args.runs) if "kernel" in args.levels else []
    rows += layer_rows(args.sizes, args.runs) if "layer" in args.levels else []
    rows += model_rows(args.models, args.model_size, args.runs) if "model" in args.levels else []
    if args.markdown:
        print("\n| level | shape | SDPA ms | matmul-softmax ms | ratio | max diff |\n|---|---|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r.level} | {r.what} | {r.fast_ms:.1f} | {r.plain_ms:.1f} | {r.ratio:.2f}x | {r.max_diff:.1e} |")
        return
    for r in rows:
        print(f"{r.level:6} {r.what:62} SDPA {r.fast_ms:9.1f} ms  matmul-softmax {r.plain_ms:9.1f} ms  "
              f"{r.ratio:5.2f}x  max diff {r.max_diff:.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
