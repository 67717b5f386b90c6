"""SST's fused GPU kernels as PyTorch custom ops, and where the network uses them.

Steps that eager PyTorch runs as several operations (issue 25's memory traffic, and launches), each replaced
by one Triton kernel (``triton_kernels.py``) writing its output once:

* ``sst::dwconv3x3_gelu_residual_(out, p, weight, bias)``: the ConvFFN's middle, ``out = h + GELU(dwconv(h))``
  with ``h = GELU(p)`` recomputed from ``p`` (the 1x1 expand's output) where the conv reads it. A depth-wise
  3x3 convolution with its prologue and epilogue fused; it replaces GELU, conv, GELU and add (four writes of
  the hidden tensor) and keeps the FFN's depth-wise conv off cuDNN's slow grouped kernel at odd widths.
* ``sst::merge_windows_gated_(image, windows, gate_logits, ...)``: attention windows back into the image,
  multiplied by ``sigmoid(gate_logits)`` on the way (``windows.merge_gated`` on ``torch.sigmoid(logits)``
  writes the sigmoid too).
* ``sst::partition_windows_(out, src, ...)``: q, k or v into its window buffer, reflect-padded and rolled on
  the way, q scaled: one launch each where ``windows.partition_into`` makes one strided copy per piece of the
  padded, rolled grid (about 15 launches and 60 views per layer: the host's time on small inputs).

Where they run: on CUDA when Triton is installed, and on the meta device under the same condition: meta stands
in for the accelerator when memory traffic is counted (``../shared/bench/traffic.py``), so it takes the path
CUDA takes and sees each op as one op writing one tensor (the fake implementations compute nothing). The CPU
runs the plain PyTorch steps (the reference), except under Triton's interpreter (``TRITON_INTERPRET=1``), where
the kernels run on CPU tensors: that is how the tests check them. Autograd and torch.compile tracing never get
here (``fused.fusable``). Before their first use on a device and dtype they are checked against float64
(``self_check``); a kernel that fails to compile, to launch or that check is reported once (a warning) and the
plain steps run from then on. ``SST_FUSED_KERNELS=0`` in the environment turns them off.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import torch
import torch.nn.functional as F

from ...errors import one_line
from .windows import merge_gated as merge_gated_plain
from .windows import partition_into

_state = {"enabled": os.environ.get("SST_FUSED_KERNELS", "1").strip() != "0"}  # =0: the plain steps everywhere


@cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Triton's interpreter is on (read by triton when it is imported): kernels run on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in ("", "0", "false", "off")


def runs_kernels(x: torch.Tensor) -> bool:
    """Whether the fused kernels take tensors on ``x``'s device (see the module's docstring)."""
    if not (_state["enabled"] and _HAS_CUSTOM_OPS and triton_installed()):
        return False
    kind = x.device.type
    return kind in ("cuda", "meta") or (kind == "cpu" and interpreting())


@contextmanager
def disabled() -> Iterator[None]:
    """Inside the block the plain PyTorch steps run everywhere (benchmarks: with and without the kernels)."""
    saved = _state["enabled"]
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = saved


def _launch(op: object, out: torch.Tensor, *args: object) -> bool:
    """Run ``op`` (checked first on each device and dtype, ``self_check``); on a failure (not out-of-memory) or a
    wrong result, warn once, turn the kernels off and return False: the caller then runs the plain steps."""
    try:
        key = (str(out.device), out.dtype)
        if out.device.type != "meta" and key not in _checked:
            problem = self_check(out.device, out.dtype)
            _checked[key] = problem
            if problem:
                raise RuntimeError(problem)
        op(out, *args)  # type: ignore[operator]
    except torch.OutOfMemoryError:
        raise
    except Exception as err:
        _state["enabled"] = False
        message = one_line(err)
        warnings.warn(f"sst-cli's fused Triton kernels failed ({message}); the plain PyTorch path runs instead",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
        return False
    return True


_checked: dict[tuple[str, torch.dtype], str] = {}  # (device, dtype) -> "" (passed) or what was wrong


def self_check(device: torch.device, dtype: torch.dtype) -> str:
    """Each kernel once on small random tensors (odd sizes, 70 channels, a shifted, padded window grid) against
    float64 on the CPU: "" when they agree to within ``dtype``'s rounding, else what differs. As the CPU
    attention kernel is checked before its first use: a kernel compiled wrong must not change the pictures."""
    gen = torch.Generator().manual_seed(0)
    tolerance = 1e-4 if dtype == torch.float32 else 1.5 * torch.finfo(dtype).eps  # one 16-bit step, some slack
    p = torch.randn(2, 70, 9, 19, generator=gen, dtype=torch.float64) * 2
    weight = torch.randn(70, 1, 3, 3, generator=gen, dtype=torch.float64) / 3
    bias = torch.randn(70, generator=gen, dtype=torch.float64) / 20
    p, weight, bias = (t.to(dtype).double() for t in (p, weight, bias))  # what the kernel sees, exactly
    out = torch.empty(p.shape, dtype=dtype, device=device, memory_format=torch.channels_last)
    args = (t.to(device, dtype) for t in (p.contiguous(memory_format=torch.channels_last), weight, bias))
    torch.ops.sst.dwconv3x3_gelu_residual_(out, *args)
    h = F.gelu(p)
    expected = h + F.gelu(F.conv2d(h, weight, bias, padding=1, groups=70))
    worst = ((out.cpu().double() - expected).abs() / (1 + expected.abs())).max().item()
    if not worst <= tolerance:
        return f"the FFN kernel differs from PyTorch by {worst:.2g} (relative) in {dtype} on {device}"
    windows = torch.randn(12, 2, 16, 5, generator=gen, dtype=torch.float64).to(dtype).double()
    logits = (torch.randn(2, 6, 7, 10, generator=gen, dtype=torch.float64) * 3).to(dtype).double()
    image = torch.empty(logits.shape, dtype=dtype, device=device, memory_format=torch.channels_last)
    torch.ops.sst.merge_windows_gated_(image, windows.to(device, dtype), logits.to(device, dtype), 4, 8, 12, 2)
    expected = torch.empty(logits.shape, dtype=torch.float64)
    merge_gated_plain(windows, torch.sigmoid(logits), expected, 4, (8, 12), 2)
    worst = ((image.cpu().double() - expected).abs() / (1 + expected.abs())).max().item()
    if not worst <= tolerance:
        return f"the gated merge kernel differs from PyTorch by {worst:.2g} (relative) in {dtype} on {device}"
    qkv = torch.randn(2, 18, 7, 10, generator=gen, dtype=torch.float64).to(dtype).double()
    parts = [torch.zeros(12, 2, 16, 5, dtype=dtype, device=device) for _ in range(3)]
    kernel_qkv = qkv.to(device, dtype)
    for i, part in enumerate(parts):
        torch.ops.sst.partition_windows_(part, kernel_qkv[:, 6 * i : 6 * i + 6], 4, 8, 12, 2, 0.5 if i == 0 else 1.0)
    references = [torch.zeros(12, 2, 16, 5, dtype=torch.float64) for _ in range(3)]
    partition_into(references, qkv, 4, (8, 12), 2, 0.5)
    worst = max(
        ((p.cpu().double() - e).abs() / (1 + e.abs())).max().item() for p, e in zip(parts, references, strict=True)
    )
    if not worst <= tolerance:
        return f"the window partition kernel differs from PyTorch by {worst:.2g} (relative) in {dtype} on {device}"
    return ""


def ffn_middle(out: torch.Tensor, p: torch.Tensor, dwc: torch.nn.Conv2d) -> bool:
    """``out = h + GELU(dwc(h))``, ``h = GELU(p)``, in one kernel; False (nothing done) where it does not run."""
    if not runs_kernels(p) or dwc.bias is None:
        return False
    return _launch(torch.ops.sst.dwconv3x3_gelu_residual_, out, p, dwc.weight, dwc.bias)


def merge_gated(
    windows: torch.Tensor, gate_logits: torch.Tensor, image: torch.Tensor, window: int, grid: tuple[int, int],
    shift: int,
) -> bool:  # fmt: skip
    """``windows.merge_gated(windows, sigmoid(gate_logits), image, ...)`` in one kernel; False where it does not run."""
    if not runs_kernels(image):
        return False
    return _launch(torch.ops.sst.merge_windows_gated_, image, windows, gate_logits, window, *grid, shift)


def partition(
    parts: list[torch.Tensor], qkv: torch.Tensor, window: int, grid: tuple[int, int], shift: int, scale: float
) -> bool:
    """``windows.partition_into(parts, qkv, ...)``, one kernel per part; False (nothing done) where it does not run."""
    if not runs_kernels(qkv):
        return False
    c = qkv.shape[1] // 3
    d = c // parts[0].shape[1]
    for i, part in enumerate(parts):
        # The content channels alone: what the kernel writes, and what a memory-traffic count should see.
        content, src = part[..., :d], qkv[:, i * c : (i + 1) * c]
        if not _launch(torch.ops.sst.partition_windows_, content, src, window, *grid, shift, scale if i == 0 else 1.0):
            return False
    return True


def _check_device(t: torch.Tensor) -> None:
    if t.device.type == "cpu" and not interpreting():
        raise RuntimeError("sst-cli's Triton kernels run on CPU tensors only under Triton's interpreter "
                           "(TRITON_INTERPRET=1 before triton is imported)")  # fmt: skip


_HAS_CUSTOM_OPS = hasattr(torch.library, "custom_op")  # torch >= 2.4

if _HAS_CUSTOM_OPS:

    @torch.library.custom_op("sst::dwconv3x3_gelu_residual_", mutates_args=("out",))
    def _dwconv3x3_gelu_residual(out: torch.Tensor, p: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> None:
        _check_device(p)
        from . import triton_kernels

        triton_kernels.dwconv3x3_gelu_residual(out, p, weight, bias)

    @_dwconv3x3_gelu_residual.register_fake
    def _(out: torch.Tensor, p: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> None:
        return None

    @torch.library.custom_op("sst::merge_windows_gated_", mutates_args=("image",))
    def _merge_windows_gated(
        image: torch.Tensor, windows: torch.Tensor, gate_logits: torch.Tensor, window: int, grid_h: int,
        grid_w: int, shift: int,
    ) -> None:  # fmt: skip
        _check_device(image)
        from . import triton_kernels

        triton_kernels.merge_windows_gated(image, windows, gate_logits, window, grid_h, grid_w, shift)

    @_merge_windows_gated.register_fake
    def _(
        image: torch.Tensor, windows: torch.Tensor, gate_logits: torch.Tensor, window: int, grid_h: int,
        grid_w: int, shift: int,
    ) -> None:  # fmt: skip
        return None

    @torch.library.custom_op("sst::partition_windows_", mutates_args=("out",))
    def _partition_windows(
        out: torch.Tensor, src: torch.Tensor, window: int, grid_h: int, grid_w: int, shift: int, scale: float
    ) -> None:
        _check_device(src)
        from . import triton_kernels

        triton_kernels.partition_windows(out, src, window, grid_h, grid_w, shift, scale)

    @_partition_windows.register_fake
    def _(
        out: torch.Tensor, src: torch.Tensor, window: int, grid_h: int, grid_w: int, shift: int, scale: float
    ) -> None:
        return None
