"""SST's fused Triton kernels (``sst_cli/archs/sst/kernels.py``) on CUDA: correct, and how much faster.

    python benchmarks/gpu_kernels.py [--json OUT/fused.json] [--golden DIR] [--runs 10]

1. ``units``: each kernel on random tensors (odd sizes, 70 channels, NCHW and channels-last, fp32 and bf16, and
   one tensor of more than 2**31 elements for the 64-bit indexing) against the plain PyTorch steps on the GPU.
2. ``golden``: the golden vectors (``../shared/golden``) in fp32 (TF32 off, ``--attention math``) with the kernels
   on and off: max |d| against the authors' outputs, goal <= 5e-5.
3. ``timing``: SST-L x2 bf16 640x360 -> 1280x720 (the issue's case), SST-L x3 bf16 427x240 (the x3 cliff) and
   SST-L x2 fp32: one forward with and one without the kernels, alternating, median of ``--runs`` after warm-up,
   CUDA events; peak memory of each; the largest difference between the two outputs.
4. ``tiles``: the FFN kernel alone at SST-L x2's size for a few tile shapes, against the plain steps (GELU,
   depth-wise conv, GELU, add) it replaces.

A kernel that fails to compile turns the kernels off with a warning (kernels.py): the script says so, and the
plain path's figures are still printed. Random weights (the speed does not depend on them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from sst_cli import create_model, load_model
from sst_cli.archs.sst import kernels, windows
from sst_cli.runtime import fp32_mode

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "golden"
CASES = ("light_x2", "mini_x3")


def _kernels_alive(device: torch.device) -> bool:
    return kernels.runs_kernels(torch.empty(0, device=device))


def _time(fn: Callable[[], Any]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def _ffn_plain(p: torch.Tensor, conv: torch.nn.Conv2d) -> torch.Tensor:
    h = F.gelu(p)
    return h + F.gelu(conv(h))


def units(device: torch.device) -> list[dict]:
    rows = []
    shapes = [((1, 5, 1, 1), "nchw"), ((2, 70, 37, 53), "channels_last"), ((2, 70, 37, 53), "nchw"),
              ((1, 384, 240, 427), "channels_last"), ((1, 384, 2736, 2048), "channels_last")]  # fmt: skip
    for shape, layout in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            if shape[2] * shape[3] > 2**22 and dtype == torch.float32:
                continue  # the 64-bit case once, in bf16 (8.6 GB for p, out and the plain steps' temporaries)
            torch.manual_seed(0)
            c = shape[1]
            memory = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            p = torch.empty(shape, device=device, dtype=dtype, memory_format=memory).normal_(0, 2)
            conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c).to(device, dtype)
            out = torch.empty_like(p)
            # Beyond 2**31 elements only the last rows are compared (where 32-bit offsets would have wrapped).
            first = 1 if p.numel() > 2**31 else 0
            crop = slice(-10, None) if first else slice(None)
            with torch.no_grad(), fp32_mode(device, dtype):
                ran = kernels.ffn_middle(out, p, conv)
                ref = _ffn_plain(p[:, :, crop].float(), conv.float())[:, :, first:]  # the plain steps in fp32
            diff = (out[:, :, crop][:, :, first:].float() - ref).abs()
            limit = 5e-5 if dtype == torch.float32 else 2.0**-7 * ref.abs().max().item()  # one bf16 step
            row = {"op": "ffn", "shape": list(shape), "layout": layout, "dtype": str(dtype), "ran": ran,
                   "max_abs_vs_plain_fp32": diff.max().item(), "limit": limit,
                   "ok": ran and diff.max().item() <= limit}  # fmt: skip
            rows.append(row)
            print(row, flush=True)
            del p, out, ref, diff
            torch.cuda.empty_cache()
    for shift, dtype in ((0, torch.float32), (4, torch.float32), (4, torch.bfloat16)):
        torch.manual_seed(1)
        b, heads, d, ws, h, w = 2, 6, 30, 16, 37, 53
        grid = (48, 64)
        win = torch.randn(b * 3 * 4, heads, ws * ws, d + 18, device=device).to(dtype)
        logits = (torch.randn(b, heads * d, h, w, device=device) * 3).to(dtype)
        image = torch.empty(b, heads * d, h, w, device=device, dtype=dtype, memory_format=torch.channels_last)
        ran = kernels.merge_gated(win, logits, image, ws, grid, shift)
        ref = torch.empty(image.shape, device=device)
        windows.merge_gated(win.float(), torch.sigmoid(logits.float()), ref, ws, grid, shift)
        diff = (image.float() - ref).abs().max().item()
        limit = 1e-6 if dtype == torch.float32 else 2.0**-7 * ref.abs().max().item()
        row = {"op": "merge", "shift": shift, "dtype": str(dtype), "ran": ran, "max_abs_vs_plain_fp32": diff,
               "limit": limit, "ok": ran and diff <= limit}  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    for shift, dtype, out_dtype in ((0, torch.float32, torch.float32), (8, torch.float32, torch.bfloat16),
                                    (8, torch.bfloat16, torch.bfloat16)):  # fmt: skip
        torch.manual_seed(2)
        b, heads, d, ws, h, w = 2, 6, 30, 16, 37, 53
        grid = (48, 64)
        qkv = (torch.randn(b, 3 * heads * d, h, w, device=device) * 3).to(dtype)
        qkv = qkv.contiguous(memory_format=torch.channels_last)
        parts = [torch.zeros(b * 3 * 4, heads, ws * ws, d + 18, device=device, dtype=out_dtype) for _ in range(3)]
        ran = kernels.partition(parts, qkv, ws, grid, shift, d**-0.5)
        ref = [torch.zeros(p.shape, device=device) for p in parts]
        windows.partition_into(ref, qkv.float(), ws, grid, shift, d**-0.5)
        diff = max((p.float() - r).abs().max().item() for p, r in zip(parts, ref, strict=True))
        largest = max(r.abs().max().item() for r in ref)
        limit = 1e-6 if out_dtype == torch.float32 else 2.0**-7 * largest
        row = {"op": "partition", "shift": shift, "dtype": str(dtype), "out_dtype": str(out_dtype), "ran": ran,
               "max_abs_vs_plain_fp32": diff, "limit": limit, "ok": ran and diff <= limit}  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    return rows


def golden(device: torch.device, root: Path) -> list[dict]:
    from safetensors.torch import load_file

    rows = []
    for case in CASES:
        config = json.loads((root / f"{case}.json").read_text())
        io = load_file(str(root / f"{case}_io.safetensors"))
        model = load_model(root / f"{case}.safetensors", config=config, device=device, dtype=torch.float32)
        model.set_attention_backend("math")
        for name in ("a", "b"):
            x = io[f"input_{name}"].to(device)
            outs = {}
            for mode in ("kernels", "plain"):
                with torch.inference_mode(), fp32_mode(device, torch.float32):
                    if mode == "plain":
                        with kernels.disabled():
                            outs[mode] = model(x).cpu()
                    else:
                        outs[mode] = model(x).cpu()
            row = {"case": case, "input": name, "kernels_ran": _kernels_alive(device)}
            for mode, out in outs.items():
                row[f"max_abs_{mode}"] = (out - io[f"output_{name}"]).abs().max().item()
            row["max_abs_kernels_vs_plain"] = (outs["kernels"] - outs["plain"]).abs().max().item()
            row["ok"] = row["kernels_ran"] and row["max_abs_kernels"] <= 5e-5
            rows.append(row)
            print(row, flush=True)
    return rows


def timing(device: torch.device, runs: int) -> list[dict]:
    rows = []
    for name, scale, size, dtype in (("sst-l", 2, (640, 360), torch.bfloat16), ("sst-l", 3, (427, 240), torch.bfloat16),
                                     ("sst-l", 2, (640, 360), torch.float32)):  # fmt: skip
        torch.manual_seed(0)
        model = create_model(name, scale).eval().to(device, dtype)
        x = torch.rand(1, 3, size[1], size[0], device=device, dtype=dtype)
        times: dict[str, list[float]] = {"kernels": [], "plain": []}
        peaks: dict[str, int] = {}
        outs: dict[str, torch.Tensor] = {}

        def forward(mode: str, model: torch.nn.Module = model, x: torch.Tensor = x, dtype: torch.dtype = dtype) -> Any:
            with torch.inference_mode(), fp32_mode(device, dtype):
                if mode == "plain":
                    with kernels.disabled():
                        return model(x)
                return model(x)

        for mode in times:  # warm-up: compiles the kernels, picks cuDNN's algorithms
            for _ in range(2):
                forward(mode)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            outs[mode] = forward(mode).float()
            peaks[mode] = torch.cuda.max_memory_allocated()
        for _ in range(runs):
            for mode in times:
                times[mode].append(_time(lambda mode=mode: forward(mode)))
        ms = {mode: statistics.median(t) for mode, t in times.items()}
        row = {"model": name, "scale": scale, "input": f"{size[0]}x{size[1]}", "dtype": str(dtype),
               "kernels_ran": _kernels_alive(device), "ms_kernels": ms["kernels"], "ms_plain": ms["plain"],
               "speedup": ms["plain"] / ms["kernels"], "peak_mb_kernels": peaks["kernels"] / 2**20,
               "peak_mb_plain": peaks["plain"] / 2**20,
               "max_abs_kernels_vs_plain": (outs["kernels"] - outs["plain"]).abs().max().item(),
               "runs": runs}  # fmt: skip
        rows.append(row)
        print(f"{name} x{scale} {row['input']} {dtype}: kernels {ms['kernels']:.1f} ms, plain {ms['plain']:.1f} ms "
              f"({row['speedup']:.2f}x), peak {row['peak_mb_kernels']:.0f} / {row['peak_mb_plain']:.0f} MB, "
              f"max|d| {row['max_abs_kernels_vs_plain']:.2e}", flush=True)  # fmt: skip
        del model, outs
        torch.cuda.empty_cache()
    return rows


def tiles(device: torch.device, runs: int) -> list[dict]:
    from sst_cli.archs.sst import triton_kernels

    torch.manual_seed(0)
    c, h, w = 384, 360, 640  # SST-L's hidden width at x2's LR size
    p = torch.randn(1, c, h, w, device=device, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c).to(device, torch.bfloat16)
    out = torch.empty_like(p)
    rows = []
    with torch.no_grad():
        for _ in range(3):
            _ffn_plain(p, conv)
        plain = statistics.median(_time(lambda: _ffn_plain(p, conv)) for _ in range(runs))
        shapes = ((8, 16, 32, 4), (8, 16, 64, 4), (8, 16, 64, 8), (16, 16, 32, 4), (4, 32, 32, 4), (8, 8, 64, 4),
                  (16, 8, 32, 2))  # fmt: skip
        for rows_, block_w, block_c, warps in shapes:
            try:

                def launch(r: int = rows_, bw: int = block_w, bc: int = block_c, nw: int = warps) -> None:
                    triton_kernels.dwconv3x3_gelu_residual(out, p, conv.weight, conv.bias, r, bw, bc, nw)

                launch()
                ms = statistics.median(_time(launch) for _ in range(runs))
            except Exception as err:  # a tile that does not compile here: say so, try the next
                rows.append({"rows": rows_, "block_w": block_w, "block_c": block_c, "num_warps": warps,
                             "error": repr(err)[:200]})  # fmt: skip
                continue
            moved = 2 * p.numel() * p.element_size()  # p read once, out written once, at best
            row = {"rows": rows_, "block_w": block_w, "block_c": block_c, "num_warps": warps, "ms": ms,
                   "ms_plain_steps": plain, "speedup": plain / ms, "gb_per_s_one_pass": moved / ms / 1e6}  # fmt: skip
            rows.append(row)
            print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--golden", type=Path, default=GOLDEN)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", default="units,golden,timing,tiles")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_kernels.py needs a CUDA GPU")
    device = torch.device("cuda")
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    try:
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        report["triton"] = None
        print("triton is not installed: the kernels cannot run, only the plain path's figures follow")
    steps: dict[str, Callable[[], Any]] = {
        "units": lambda: units(device),
        "golden": lambda: golden(device, args.golden),
        "timing": lambda: timing(device, args.runs),
        "tiles": lambda: tiles(device, args.runs),
    }
    start = time.time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in args.steps.split(","):
            try:
                report[step] = steps[step]()
            except Exception as err:  # one step failing must not lose the others' figures
                report[step] = {"error": repr(err)[:500]}
                print(f"{step}: failed: {err!r}", flush=True)
            if args.json:
                args.json.write_text(json.dumps(report, indent=2) + "\n")
    report["warnings"] = [str(w.message) for w in caught]
    report["kernels_alive_at_end"] = _kernels_alive(device)
    report["seconds"] = time.time() - start
    for message in report["warnings"]:
        print("warning:", message)
    if not report["kernels_alive_at_end"]:
        print("THE KERNELS DID NOT RUN (see the warnings): the figures above are the plain path's")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
