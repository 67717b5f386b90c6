#!/usr/bin/env python3
"""One attention call on the CPU, per kernel: sst-cli's native kernel against padded SDPA, on SST's layer shapes.

``softmax(q k^T + p_q p_k^T) v`` with q/k content of D channels, RIB factors of rank R shared by the windows and
v of D channels, as SST's window attention calls it. Variants, interleaved run by run (medians of ``--runs``):

* ``native``: ``--attention native`` (the factors' product computed once per group of windows);
* ``appended``: the same C kernel given q/k with the factors appended (no sharing across windows);
* ``sdpa``: ``--attention sdpa`` (factors appended, v zero-padded to q/k's width, PyTorch's fused CPU kernel);
* ``8-wide`` (``--narrow``, x86 machines with AVX-512): ``native`` built with ``-mno-avx512f``, as AVX2 machines
  run it, to measure what the 16-float build gains on the same cores.

    PYTHONPATH=. python benchmarks/bench_cpu_attention.py --threads 2 1 --runs 3
    PYTHONPATH=. python benchmarks/bench_cpu_attention.py --threads 1 --runs 3 --narrow
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from sst_cli.archs import cpu_kernel
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


def _narrow_build(folder: Path) -> cpu_kernel._Library:
    """The kernel as an AVX2 machine builds it (8-float vectors), for a side-by-side run on an AVX-512 one."""
    compiler = cpu_kernel._compiler()
    if compiler is None:
        raise SystemExit("--narrow needs a C compiler")
    target = folder / "narrow.so"
    error = cpu_kernel._compile(compiler, cpu_kernel.SOURCE, target, extra=["-mno-avx512f"])
    if error is not None:
        raise SystemExit(f"--narrow: the 8-float build failed: {error}")
    handle = ctypes.CDLL(str(target))
    cpu_kernel._declare(handle)
    return cpu_kernel._Library(handle, "narrow", handle.sst_attention_vector(), handle.sst_attention_key_tile())


def _median_ms(
    windows: int, heads: int, tokens: int, d: int, rank: int, runs: int, narrow: cpu_kernel._Library | None
) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(windows, heads, tokens, d, generator=gen) for _ in range(3))
    q = q * 0.3  # logits of order one, as in the network
    bias = (torch.randn(heads, tokens, rank, generator=gen) * 0.3, torch.randn(heads, tokens, rank, generator=gen))
    variants: dict[str, Callable[[], object]] = {
        "native": lambda: attend(q, k, v, "native", bias=bias),
        "appended": lambda: _appended(q, k, v, bias),
        "sdpa": lambda: attend(q, k, v, "sdpa", bias=bias),
    }
    if narrow is not None:
        variants["8-wide"] = lambda: cpu_kernel._run(narrow, q, k, v, bias)
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
    parser.add_argument("--narrow", action="store_true", help="also time the 8-float build (AVX-512 machines)")
    args = parser.parse_args()
    if kernel_problem() is not None:
        raise SystemExit(f"the native kernel is unavailable here: {kernel_problem()}")
    with tempfile.TemporaryDirectory() as folder:
        narrow = _narrow_build(Path(folder)) if args.narrow else None
        names = ["native", "appended", "sdpa", *(["8-wide"] if narrow else [])]
        print(f"# torch {torch.__version__}, kernel built by {kernel_description()} "
              f"({cpu_kernel.kernel_vector()}-float vectors), wall time, medians of {args.runs}")  # fmt: skip
        extra = " | 8-wide | 8-wide / native" if narrow else ""
        print(f"| windows x heads x tokens, D/R | threads | native | appended | padded SDPA | SDPA / native{extra} |")
        print("|---" * (6 + 2 * bool(narrow)) + "|")
        for threads in args.threads:
            torch.set_num_threads(threads)
            for windows, heads, tokens, d, rank, what in SHAPES:
                ms = _median_ms(windows, heads, tokens, d, rank, args.runs, narrow)
                per_score = 1e6 * threads / (windows * heads * tokens * tokens)  # ns per score per thread, from ms
                cells = " | ".join(f"{ms[n]:.1f} ms ({ms[n] * per_score:.2f} ns)" for n in names[:3])
                tail = f" | {ms['8-wide']:.1f} ms | {ms['8-wide'] / ms['native']:.2f}x" if narrow else ""
                print(
                    f"| {windows} x {heads} x {tokens}, {d}/{rank} ({what}) | {threads} | {cells} | "
                    f"{ms['sdpa'] / ms['native']:.2f}x{tail} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
