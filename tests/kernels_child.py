"""SST's Triton kernels run by Triton's interpreter on CPU tensors: measured errors as JSON on stdout.

Run as ``TRITON_INTERPRET=1 python kernels_child.py`` (the variable must be set before triton is imported,
hence a process of its own; ``tests/test_kernels.py`` does it); ``python kernels_child.py compile`` (without the
variable) compiles the kernels for an H100 instead and prints what the compiler said. Each interpreted case
prints the largest error of a kernel against a reference computed independently (float64, or the plain PyTorch
steps). Small shapes only: the interpreter runs each program in Python.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from sst_cli import SST
from sst_cli.archs.sst import kernels
from sst_cli.archs.sst.windows import merge_gated, partition_into

BF16_STEP = 2.0**-7  # bf16 keeps 8 significant bits: one step is at most 2**-7 of the value


def _ffn_reference(p: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    p, weight, bias = p.double(), weight.double(), bias.double()
    h = F.gelu(p)
    return h + F.gelu(F.conv2d(h, weight, bias, 1, 1, 1, p.shape[1]))


def _ffn_case(shape: tuple[int, int, int, int], dtype: torch.dtype, layout: str) -> dict:
    """One kernel call against float64 (from the same, possibly bf16, inputs) and against the plain steps."""
    torch.manual_seed(sum(shape))
    b, c, h, w = shape
    p = (torch.randn(shape) * 2).to(dtype)
    conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c).to(dtype)
    with torch.no_grad():
        conv.weight.normal_(0, 1 / 3)
        conv.bias.normal_(0, 0.05)
    if layout == "channels_last":
        p = p.contiguous(memory_format=torch.channels_last)
    if layout == "rows":  # the FFN's real destination: a (pixels, C + 8) buffer viewed as a channels-last image
        p = p.contiguous(memory_format=torch.channels_last)
        out = torch.empty(b * h * w, c + 8, dtype=dtype)[:, :c].view(b, h, w, c).permute(0, 3, 1, 2)
    else:
        out = torch.empty_like(p)
    with torch.no_grad():
        ran = kernels.ffn_middle(out, p, conv)
        exact = _ffn_reference(p, conv.weight, conv.bias)
        h_plain = F.gelu(p)
        plain = h_plain + F.gelu(conv(h_plain))
    error = (out.double() - exact).abs()
    return {
        "ran": ran,
        "max_abs_vs_float64": error.max().item(),
        "excess_over_one_bf16_step": (error - BF16_STEP * exact.abs()).max().item(),
        "excess_over_half_a_step": (error - BF16_STEP / 2 * exact.abs()).max().item(),
        "max_abs_vs_plain": (out.double() - plain.double()).abs().max().item(),
        "max_abs_value": exact.abs().max().item(),
    }


def _merge_case(dtype: torch.dtype, window_dtype: torch.dtype, shift: int, channels_last: bool) -> dict:
    torch.manual_seed(shift)
    b, heads, d, ws, h, w = 2, 2, 3, 4, 7, 10
    grid = (8, 12)
    windows = torch.randn(b * 2 * 3, heads, ws * ws, d + 2).to(window_dtype)
    logits = (torch.randn(b, heads * d, h, w) * 3).to(dtype)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    image = torch.empty(b, heads * d, h, w, dtype=dtype).contiguous(memory_format=layout)
    ran = kernels.merge_gated(windows, logits, image, ws, grid, shift)
    exact = torch.empty(image.shape, dtype=torch.float64)
    merge_gated(windows.double(), torch.sigmoid(logits.double()), exact, ws, grid, shift)
    error = (image.double() - exact).abs()
    return {
        "ran": ran,
        "max_abs_vs_float64": error.max().item(),
        "excess_over_one_bf16_step": (error - BF16_STEP * exact.abs()).max().item(),
        "excess_over_half_a_step": (error - BF16_STEP / 2 * exact.abs()).max().item(),
    }


def _partition_case(
    dtype: torch.dtype, out_dtype: torch.dtype, shift: int, size: tuple[int, int], channels_last: bool
) -> dict:
    """q, k and v of an odd-sized image into windows of 4 over a reflect-padded, rolled grid, against the plain
    ``partition_into`` in float64 (from the same inputs) and in the kernel's own dtypes."""
    torch.manual_seed(shift + size[0])
    b, heads, d, ws = 2, 2, 3, 4
    h, w = size
    grid = (h + -h % ws, w + -w % ws)
    windows = b * (grid[0] // ws) * (grid[1] // ws)
    qkv = (torch.randn(b, 3 * heads * d, h, w) * 3).to(dtype)
    if channels_last:
        qkv = qkv.contiguous(memory_format=torch.channels_last)
    parts = [torch.full((windows, heads, ws * ws, d + 2), 7.0, dtype=out_dtype) for _ in range(3)]
    ran = kernels.partition(parts, qkv, ws, grid, shift, d**-0.5)
    exact = [torch.full((windows, heads, ws * ws, d + 2), 7.0, dtype=torch.float64) for _ in range(3)]
    partition_into(exact, qkv.double(), ws, grid, shift, d**-0.5)
    plain = [torch.full((windows, heads, ws * ws, d + 2), 7.0, dtype=out_dtype) for _ in range(3)]
    partition_into(plain, qkv, ws, grid, shift, d**-0.5)
    error = torch.cat([(p.double() - e).abs().flatten() for p, e in zip(parts, exact, strict=True)])
    values = torch.cat([e.abs().flatten() for e in exact])
    return {
        "ran": ran,
        "max_abs_vs_float64": error.max().item(),
        "excess_over_one_bf16_step": (error - BF16_STEP * values).max().item(),
        "max_abs_vs_plain": max(
            (p.double() - q.double()).abs().max().item() for p, q in zip(parts, plain, strict=True)
        ),
        "tails_untouched": all(bool((p[..., d:] == 7).all()) for p in parts),
    }


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def _model_case(config: dict) -> dict:
    """A whole tiny SST forward, fused (the kernels under the interpreter) against the reference path."""
    torch.manual_seed(0)
    model = SST(**config, upscaling_factor=2).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    x = torch.rand(2, 3, 13, 10)
    with torch.no_grad():
        with _Ops() as ops:
            fused = model(x)
        with model.reference_path():
            plain = model(x)
    return {
        "max_abs_vs_plain": (fused - plain).abs().max().item(),
        "ffn_kernel_calls": ops.calls.get("dwconv3x3_gelu_residual_", 0),
        "merge_kernel_calls": ops.calls.get("merge_windows_gated_", 0),
        "partition_kernel_calls": ops.calls.get("partition_windows_", 0),
        "gelu_calls": ops.calls.get("gelu", 0),
        "sigmoid_calls": ops.calls.get("sigmoid", 0),
        "layers": len(config["window_sizes"]) * config["n_blocks"],
    }


def _self_check_case() -> dict:
    """The check before first use passes the real kernels and turns a wrong one off with a warning."""
    from sst_cli.archs.sst import triton_kernels

    real = triton_kernels.dwconv3x3_gelu_residual
    clean = {str(dtype): kernels.self_check(torch.device("cpu"), dtype) for dtype in (torch.float32, torch.bfloat16)}

    def mirrored(out: torch.Tensor, p: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> None:
        real(out, p, weight.flip(-1), bias)  # taps mirrored left-right: the kind of slip an indexing bug makes

    kernels._checked.clear()
    triton_kernels.dwconv3x3_gelu_residual = mirrored
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            p = torch.randn(1, 4, 3, 3)
            ran = kernels.ffn_middle(torch.empty_like(p), p, torch.nn.Conv2d(4, 4, 3, padding=1, groups=4))
        return {"clean": clean, "ran_wrong_kernel": ran, "enabled_after": kernels._state["enabled"],
                "warnings": [str(w.message) for w in caught]}  # fmt: skip
    finally:
        triton_kernels.dwconv3x3_gelu_residual = real
        kernels._state["enabled"] = True


TINY = {"dim": 16, "window_sizes": (4, 8), "num_heads": (2, 4), "ranks": (3, 5), "n_blocks": 2}
SHIFTED = {"dim": 12, "window_sizes": (4, 4), "num_heads": (2, 2), "ranks": (3, 3), "n_blocks": 2}


def compile_for_hopper() -> dict:
    """Each kernel compiled for sm_90 (an H100) by Triton's own ptxas, no GPU needed: what the interpreter does
    not check (globals a kernel reads, types, what the compiler accepts). Ints as 32 and as 64 bits."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from sst_cli.archs.sst import triton_kernels

    tiles = {"ROWS": 8, "BLOCK_W": 16, "BLOCK_C": 32}
    floats = {"scale": "fp32"}
    results = {}
    kernels = (
        triton_kernels._dwconv3x3_gelu_residual,
        triton_kernels._merge_windows_gated,
        triton_kernels._partition_windows,
    )
    for fn in kernels:
        for dtype, ints in (("fp32", "i32"), ("bf16", "i32"), ("bf16", "i64")):
            signature = {
                name: "constexpr" if name in tiles else f"*{dtype}" if name.endswith("_ptr") else floats.get(name, ints)
                for name in fn.arg_names
            }
            constexprs = {name: value for name, value in tiles.items() if name in signature}
            name = f"{fn.__name__}-{dtype}-{ints}"
            try:
                compiled = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32))
                results[name] = "ok" if compiled.asm.get("cubin") else "no cubin"
            except Exception as err:
                results[name] = f"{type(err).__name__}: {err}"[:2000]
    return results


def main() -> None:
    if sys.argv[1:] == ["compile"]:
        json.dump(compile_for_hopper(), sys.stdout)
        return
    if not kernels.interpreting():
        sys.exit("set TRITON_INTERPRET=1 before running this script (or pass 'compile')")
    torch.set_num_threads(1)
    f32, bf16 = torch.float32, torch.bfloat16
    results = {
        "ffn-1x1-fp32": _ffn_case((1, 5, 1, 1), f32, "nchw"),
        "ffn-3x5-batch2-fp32-rows": _ffn_case((2, 6, 3, 5), f32, "rows"),
        "ffn-9x19-c70-fp32-channels_last": _ffn_case((1, 70, 9, 19), f32, "channels_last"),
        "ffn-9x19-c70-fp32-nchw": _ffn_case((1, 70, 9, 19), f32, "nchw"),
        "ffn-3x5-batch2-bf16-rows": _ffn_case((2, 6, 3, 5), bf16, "rows"),
        "ffn-9x19-c70-bf16-channels_last": _ffn_case((1, 70, 9, 19), bf16, "channels_last"),
        "merge-fp32-shift0-channels_last": _merge_case(f32, f32, 0, True),
        "merge-fp32-shift2-nchw": _merge_case(f32, f32, 2, False),
        "merge-bf16-windows-in-fp32": _merge_case(f32, bf16, 2, True),
        "merge-bf16": _merge_case(bf16, bf16, 0, True),
        "partition-fp32-shift0-channels_last": _partition_case(f32, f32, 0, (7, 10), True),
        "partition-fp32-shift2-nchw": _partition_case(f32, f32, 2, (7, 10), False),
        "partition-fp32-shift2-pad3": _partition_case(f32, f32, 2, (5, 9), True),
        "partition-fp32-into-bf16": _partition_case(f32, bf16, 2, (7, 10), True),
        "partition-bf16": _partition_case(bf16, bf16, 0, (7, 10), True),
        "model-tiny": _model_case(TINY),
        "model-shifted": _model_case(SHIFTED),
        "self-check": _self_check_case(),  # last: it swaps a kernel for a wrong one for a moment
    }
    json.dump({"triton_interpret": os.environ.get("TRITON_INTERPRET"), "cases": results}, sys.stdout)


if __name__ == "__main__":
    main()
