"""Where a small SST's GPU time goes, and whether a CUDA graph removes the host's share. Prints figures only.

On an H100 on 2026-11-27 (benchmarks/RESULTS.md) SST and SST-L beat the authors' code 1.3-2.1x, but SST-light at
Table S4's x3 and x4 inputs did not (0.82-1.07x), and SST-light x3 ran slower in bf16 (88 ms) than in fp32
(55 ms). Small inputs make tiny kernels, so the host's Python and launch time may be the floor. Per case:

* ``eager``: median ms of one forward, synchronised; ``plain``: the same with the fused Triton kernels off;
* ``syncs``: operations in one forward that made the host wait for the GPU (CUDA's sync debug mode): each one
  stops the host from queuing ahead, so host and GPU time add up instead of overlapping;
* ``host``: median ms the Python side takes to queue one forward (the GPU idle at the start, no wait at the end):
  when it is close to ``eager``, the GPU waits for the host and fewer, larger operations (or a graph) pay;
* ``graph``: median ms of replaying the forward captured in a CUDA graph (static input), its largest difference
  to eager, or why the capture failed (a host sync inside the forward, say);
* the CUDA kernels with the most time in one forward (torch.profiler);
* ``convs``: each dense 3x3 conv whose output channels are not a multiple of 8 (SST-light x3's upsampler writes
  27, SST's final conv 3), alone at its input size in the model's dtype and layout, against the same conv with
  its output channels zero-padded to a multiple of 8 (then cropped): whether cuDNN has a slow kernel there.

    python benchmarks/gpu_profile.py [--cases sst-light:3:427x240:bf16 ...] [--runs 10] [--json OUT/profile.json]
    python benchmarks/gpu_profile.py --device cpu --cases sst-light:4:32x24:fp32 --runs 1   # a rehearsal, no GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from sst_cli import create_model
from sst_cli.archs.sst import kernels

CASES = (
    "sst-light:3:427x240:bf16",
    "sst-light:3:427x240:fp32",
    "sst-light:4:320x180:fp32",
    "sst-light:4:320x180:bf16",
    "sst-l:3:427x240:bf16",
    "sst-l:2:640x360:bf16",
)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn: Callable[[], object], device: torch.device, runs: int, wait: bool = True) -> float:
    times = []
    for _ in range(runs):
        _sync(device)
        start = time.perf_counter()
        fn()
        if wait:
            _sync(device)
        times.append(time.perf_counter() - start)
    _sync(device)
    return statistics.median(times) * 1000


def _syncs(fn: Callable[[], object], device: torch.device) -> int | None:
    """Operations of one ``fn()`` that made the host wait for the GPU (None off CUDA)."""
    if device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _graph(model: torch.nn.Module, x: torch.Tensor, eager: torch.Tensor, runs: int) -> dict:
    """Capture one forward in a CUDA graph and time its replay; the error text where capture fails."""
    try:
        static_in = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up on a side stream, as capture wants
                model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_in)
        graph.replay()
        diff = (static_out.float() - eager).abs().max().item()
        return {"graph_ms": _median_ms(graph.replay, x.device, runs), "graph_max_abs_diff": diff}
    except Exception as exc:  # a benchmark reports every failure and goes on
        return {"graph_error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _top_kernels(model: torch.nn.Module, x: torch.Tensor, rows: int) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if x.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        model(x)
        _sync(x.device)
    events = prof.key_averages()
    field = "self_device_time_total" if x.device.type == "cuda" else "self_cpu_time_total"
    ranked = sorted(events, key=lambda e: getattr(e, field, 0.0), reverse=True)[:rows]
    return [{"name": e.key[:90], "calls": e.count, "ms": getattr(e, field, 0.0) / 1000} for e in ranked]


def _odd_convs(model: torch.nn.Module, x: torch.Tensor, runs: int) -> list[dict]:
    """Dense 3x3 convs with an output channel count that is not a multiple of 8, alone, plain and padded."""
    inputs: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: tuple, out: torch.Tensor) -> None:  # None: the output stays
            inputs.setdefault(name, args[0])

        return hook

    hooks = [
        conv.register_forward_hook(keep(name))
        for name, conv in model.named_modules()
        if isinstance(conv, torch.nn.Conv2d) and conv.groups == 1 and conv.kernel_size == (3, 3)
        and conv.out_channels % 8
    ]  # fmt: skip
    try:
        model(x)
    finally:
        for hook in hooks:
            hook.remove()
    rows = []
    seen: set[tuple] = set()
    for name, inp in inputs.items():
        conv = model.get_submodule(name)
        shape = (tuple(inp.shape), conv.out_channels)
        if shape in seen:  # the same conv in every group: once
            continue
        seen.add(shape)
        extra = -conv.out_channels % 8
        weight = torch.cat([conv.weight, conv.weight.new_zeros(extra, *conv.weight.shape[1:])])
        bias = None if conv.bias is None else torch.cat([conv.bias, conv.bias.new_zeros(extra)])

        def padded(inp: torch.Tensor = inp, weight: torch.Tensor = weight, bias: torch.Tensor | None = bias,
                   out: int = conv.out_channels) -> torch.Tensor:  # fmt: skip
            return torch.nn.functional.conv2d(inp, weight, bias, padding=1)[:, :out]

        rows.append({
            "conv": name, "in": list(inp.shape), "out_channels": conv.out_channels,
            "channels_last": inp.is_contiguous(memory_format=torch.channels_last) and inp.shape[1] > 1,
            "plain_ms": _median_ms(lambda conv=conv, inp=inp: conv(inp), x.device, runs),
            "padded_ms": _median_ms(padded, x.device, runs),
        })  # fmt: skip
    return rows


def case(spec: str, device: torch.device, runs: int, rows: int) -> dict:
    name, scale, size, precision = spec.split(":")
    w, h = (int(n) for n in size.split("x"))
    dtype = DTYPES[precision]
    torch.manual_seed(0)
    model = create_model(name, int(scale)).eval().to(device, dtype)
    x = torch.rand(1, 3, h, w, device=device, dtype=dtype)
    row: dict = {"case": spec}
    with torch.inference_mode():
        eager = model(x).float()  # warm-up: RIB caches, kernel choice, Triton compiles
        model(x)
        row["eager_ms"] = _median_ms(lambda: model(x), device, runs)
        with kernels.disabled():
            model(x)
            row["plain_ms"] = _median_ms(lambda: model(x), device, runs)
        row["host_ms"] = _median_ms(lambda: model(x), device, runs, wait=False)
        row["syncs"] = _syncs(lambda: model(x), device)
        if device.type == "cuda":
            row.update(_graph(model, x, eager, runs))
        row["top"] = _top_kernels(model, x, rows)
        row["convs"] = _odd_convs(model, x, runs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), help="model:scale:WxH:fp32|bf16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rows", type=int, default=12, help="kernels listed per case")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    results = []
    for spec in args.cases:
        try:
            row = case(spec, device, args.runs, args.rows)
        except Exception as exc:  # one case failing must not cost the others' figures
            row = {"case": spec, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(f"{spec}: {row['error']}", flush=True)
            results.append(row)
            continue
        graph = (
            f"graph {row['graph_ms']:.1f} ms (max|d| {row['graph_max_abs_diff']:.1e})"
            if "graph_ms" in row
            else row.get("graph_error", "graph: not on this device")
        )
        print(
            f"{spec}: eager {row['eager_ms']:.1f} ms, plain {row['plain_ms']:.1f} ms, host {row['host_ms']:.1f} ms, "
            f"syncs {row['syncs']}, {graph}",
            flush=True,
        )
        for k in row["top"]:
            print(f"    {k['ms']:8.2f} ms {k['calls']:5d}x  {k['name']}")
        for c in row["convs"]:
            print(f"    conv {c['conv']} {c['in']} -> {c['out_channels']} ch: plain {c['plain_ms']:.2f} ms, "
                  f"padded to a multiple of 8 {c['padded_ms']:.2f} ms")  # fmt: skip
        results.append(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
