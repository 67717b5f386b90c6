#!/usr/bin/env python3
"""One attention call on the CPU, per kernel: sst-cli's native kernel against padded SDPA, on SST's layer shapes.

``softmax(q k^T + p_q p_k^T) v`` with q/k content of D channels, RIB factors of rank R shared by the windows and
v of D channels, as SST's window attention calls it. Variants, interleaved run by run (medians of ``--runs``):

* ``native``: ``--attention native`` (the factors' product computed once per group of windows);
* ``appended``: the same C kernel given q/k with the factors appended (no sharing across windows);
* ``sdpa``: ``--attention sdpa`` (factors appended, v zero-padded to q/k's width, PyTorch's fused CPU kernel).

    PYTHONPATH=. python benchmarks/bench_cpu_attention.py --threads 2 1 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from sst_cli.archs.attention import attend
from sst_cli.archs.cpu_kernel import cpu_attention, kernel_description, kernel_problem

# (windows, heads, tokens, D, R, what): SST-light's and SST's layers at a 128x128 input, and one lone window.
SHAPES = [
    (256, 3, 64, 16, 16, "SST-light, 8-px windows"),
    (16, 3, 1024, 16, 16, "SST-light, 32 px"),
    (4, 3, 4096, 16, 24, "SST-light+, 64 px"),
    (1, 3, 9216, 16, 24, "SST-light+, 96 px, one window"),
    (4, 6, 4096, 30, 34, "SST, 64 px"),
    (16, 6, 1024, 30, 18, "SST, 32 px"),
    (64, 6, 256, 30, 18, "SST, 16 px"),
]


def _appended(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: tuple) -> torch.Tensor:
    n = q.shape[0]
    q = torch.cat([q, bias[0].expand(n, -1, -1, -1)], -1)
    k = torch.cat([k, bias[1].expand(n, -1, -1, -1)], -1)
    return cpu_attention(q, k, v)


def _median_ms(windows: int, heads: int, tokens: int, d: int, rank: int, runs: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(windows, heads, tokens, d, generator=gen) for _ in range(3))
    q = q * 0.3  # logits of order one, as in the network
    bias = (torch.randn(heads, tokens, rank, generator=gen) * 0.3, torch.randn(heads, tokens, rank, generator=gen))
    variants: dict[str, Callable[[], object]] = {
        "native": lambda: attend(q, k, v, "native", bias=bias),
        "appended": lambda: _appended(q, k, v, bias),
        "sdpa": lambda: attend(q, k, v, "sdpa", bias=bias),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.inference_mode():
        for f in variants.values():
            f()  # warm-up
        for _ in range(runs):
            for name, f in variants.items():
                start = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if kernel_problem() is not None:
        raise SystemExit(f"the native kernel is unavailable here: {kernel_problem()}")
    print(f"# torch {torch.__version__}, kernel built by {kernel_description()}, wall time, medians of {args.runs}")
    print("| windows x heads x tokens, D/R | threads | native | appended | padded SDPA | SDPA / native |")
    print("|---|---|---|---|---|---|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for windows, heads, tokens, d, rank, what in SHAPES:
            ms = _median_ms(windows, heads, tokens, d, rank, args.runs)
            per_score = 1e6 * threads / (windows * heads * tokens * tokens)  # ns per score per thread, from ms
            cells = " | ".join(f"{ms[n]:.1f} ms ({ms[n] * per_score:.2f} ns)" for n in ("native", "appended", "sdpa"))
            print(
                f"| {windows} x {heads} x {tokens}, {d}/{rank} ({what}) | {threads} | {cells} | "
                f"{ms['sdpa'] / ms['native']:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
