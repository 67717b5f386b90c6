#!/usr/bin/env python3
"""CPU speed of SST: our attention plan against padded SDPA and the reference path, fp32 against bf16, and
how time grows with pixels.

Everything runs in one process on one set of random weights (seeded), and the variants are interleaved run
by run, so that a shared or throttled machine slows all of them alike; the table gives medians. Variants:

* ``auto``: what ``sst upscale`` runs on the CPU (``--attention auto``: the native C kernel where it can be built);
* ``sdpa``: the same network with every layer on padded SDPA (q/k = content + RIB factors, v zero-padded);
* ``reference``: the reference path of ``sst bench --reference`` (the authors' way, step by step);
* ``bf16``: ``auto`` with the network in bfloat16 (PSNR against the fp32 output is reported);
* ``all-rows``: ``auto`` computing every query, also those each layer crops after padding to its window
  (before 2026-11-26); ``bf16-all-rows`` the same in bfloat16.

``--clock cpu`` (the default with ``--threads 1``) times process CPU time rather than wall time: on a machine
shared with other jobs it is far steadier, and with one thread it is the time the forward pass needed.

    PYTHONPATH=. python benchmarks/bench_cpu.py -m sst-light -s 4 --size 128 --threads 1 --runs 3
    PYTHONPATH=. python benchmarks/bench_cpu.py -m sst-light --sizes 64 128 --variants auto --threads 1
    PYTHONPATH=. python benchmarks/bench_cpu.py -m sst-light+ --sizes 128 180x320 --variants auto all-rows --runs 2
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import torch

from sst_cli import SST
from sst_cli.archs.attention import describe_attention
from sst_cli.archs.sst import layers

COMMON = dict(attn_type="RIB", rib_hidden_dim=32, rib_n_freqs=10, gate_type="DWC")
LIGHT = dict(dim=48, n_blocks=5, num_heads=[3] * 6, ranks=[16, 16, 16, 24, 24, 24], exp_ratio=1.5,
             upsampler_type="pixelshuffle_direct")  # fmt: skip
MID = dict(dim=180, n_blocks=6, num_heads=[6] * 6, ranks=[18, 18, 18, 34, 34, 34], exp_ratio=1.25,
           upsampler_type="pixelshuffle", intermediate_dim=64)  # fmt: skip
MODELS = {
    "sst-light": dict(LIGHT, window_sizes=[8, 16, 32, 16, 32, 64]),
    "sst-light+": dict(LIGHT, window_sizes=[16, 32, 48, 32, 48, 96]),
    "sst": dict(MID, window_sizes=[16, 32, 64, 16, 32, 64]),
}
VARIANTS = ("auto", "sdpa", "reference", "bf16", "all-rows", "bf16-all-rows")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.clamp(0, 1) - b.clamp(0, 1)).double().square().mean().item()
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def run_case(name: str, scale: int, size: tuple[int, int], variants: list[str], runs: int, clock) -> dict:
    torch.manual_seed(0)
    model = SST(**dict(COMMON, **MODELS[name], upscaling_factor=scale)).eval()
    bf16 = None
    if any(v.startswith("bf16") for v in variants):
        bf16 = SST(**dict(COMMON, **MODELS[name], upscaling_factor=scale)).eval()
        bf16.load_state_dict(model.state_dict())
        bf16 = bf16.to(torch.bfloat16)
    x = torch.rand(1, 3, *size, generator=torch.Generator().manual_seed(1))

    def forward(variant: str) -> torch.Tensor:
        every_row = "all-rows" in variant
        with mock.patch.object(layers, "kept_queries", lambda *_: None) if every_row else nullcontext():
            return run(variant.removesuffix("-all-rows").replace("all-rows", "auto"))

    def run(variant: str) -> torch.Tensor:
        if variant == "bf16":
            assert bf16 is not None
            return bf16(x.bfloat16()).float()
        model.set_attention_backend("sdpa" if variant == "sdpa" else "auto")
        if variant == "reference":
            with model.reference_path():
                return model(x)
        return model(x)

    times: dict[str, list[float]] = {v: [] for v in variants}
    with torch.inference_mode():
        outs = {v: forward(v) for v in variants}  # also the warm-up (plans, RIB caches)
        for _ in range(runs):
            for v in variants:
                t0 = clock()
                forward(v)
                times[v].append(clock() - t0)
    base = outs[variants[0]]
    row = dict(model=name, scale=scale, lr=f"{size[0]}x{size[1]}", pixels=size[0] * size[1])
    for v in variants:
        row[f"{v}_ms"] = 1000 * statistics.median(times[v])
        if v != variants[0]:
            row[f"{v}_diff"] = (outs[v] - base).abs().max().item()
    if "bf16" in variants and "auto" in variants:
        row["bf16_psnr_db"] = psnr(outs["bf16"], outs["auto"])
    row["kernel"] = describe_attention("auto", "cpu", torch.float32, model.attention_head_sizes).line
    return row


def _size(text: str) -> tuple[int, int]:
    h, _, w = text.lower().partition("x")
    return int(h), int(w or h)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", choices=sorted(MODELS), help="default: sst-light")
    ap.add_argument("-s", "--scale", type=int, default=4)
    ap.add_argument("--sizes", type=_size, nargs="+", default=[(128, 128)], help="LR sizes: SIDE or HxW")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=["auto", "sdpa", "reference"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--clock", choices=["auto", "cpu", "wall"], default="auto",
                    help="auto: CPU time with 1 thread, wall time otherwise")  # fmt: skip
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    threads = torch.get_num_threads()
    use_cpu = a.clock == "cpu" or (a.clock == "auto" and threads == 1)
    clock = time.process_time if use_cpu else time.perf_counter
    flags = cpu_flags()
    native_bf16 = sorted(f for f in flags if f in ("avx512_bf16", "amx_bf16"))
    clock_name = "CPU" if use_cpu else "wall"
    bf16_flags = ", ".join(native_bf16) or "none"
    print(f"# {cpu_name()}, {threads} torch thread(s), torch {torch.__version__}, {clock_name} time, "
          f"native bf16: {bf16_flags}", flush=True)  # fmt: skip
    rows = []
    for name in a.model or ["sst-light"]:
        for size in a.sizes:
            row = run_case(name, a.scale, size, a.variants, a.runs, clock)
            rows.append(row)
            parts = [f"{v} {row[f'{v}_ms']:8.0f} ms" for v in a.variants]
            ratios = [f"{v}/{a.variants[0]} {row[f'{v}_ms'] / row[f'{a.variants[0]}_ms']:.2f}" for v in a.variants[1:]]
            extra = f" | bf16 PSNR {row['bf16_psnr_db']:.1f} dB" if "bf16_psnr_db" in row else ""
            print(f"{name:10s} x{a.scale} {row['lr']:>9s}: " + " | ".join(parts + ratios) + extra, flush=True)
    if len(a.sizes) > 1:
        for name in a.model or ["sst-light"]:
            mine = [r for r in rows if r["model"] == name]
            first = mine[0]
            for r in mine[1:]:
                for v in a.variants:
                    growth = (r[f"{v}_ms"] / first[f"{v}_ms"]) / (r["pixels"] / first["pixels"])
                    more_time, more_pixels = r[f"{v}_ms"] / first[f"{v}_ms"], r["pixels"] / first["pixels"]
                    print(f"{name} {v}: {first['lr']} -> {r['lr']}: time x{more_time:.2f} "
                          f"for pixels x{more_pixels:.2f} (time per pixel x{growth:.2f})")  # fmt: skip
    if a.json:
        meta = dict(cpu=cpu_name(), threads=threads, torch=torch.__version__, clock="cpu" if use_cpu else "wall")
        a.json.write_text(json.dumps(dict(meta=meta, rows=rows), indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
