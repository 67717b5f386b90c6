"""SST's fused GPU kernels as PyTorch custom ops, and where the network uses them.

Two elementwise chains that eager PyTorch writes step by step (issue 25's memory traffic), each replaced by
one Triton kernel (``triton_kernels.py``) writing its output once:

* ``sst::dwconv3x3_gelu_residual_(out, p, weight, bias)``: the ConvFFN's middle, ``out = h + GELU(dwconv(h))``
  with ``h = GELU(p)`` recomputed from ``p`` (the 1x1 expand's output) where the conv reads it. A depth-wise
  3x3 convolution with its prologue and epilogue fused; it replaces GELU, conv, GELU and add (four writes of
  the hidden tensor) and keeps the FFN's depth-wise conv off cuDNN's slow grouped kernel at odd widths.
* ``sst::merge_windows_gated_(image, windows, gate_logits, ...)``: attention windows back into the image,
  multiplied by ``sigmoid(gate_logits)`` on the way (``windows.merge_gated`` on ``torch.sigmoid(logits)``
  writes the sigmoid too).

Where they run: on CUDA when Triton is installed, and on the meta device under the same condition: meta stands
in for the accelerator when memory traffic is counted (``../shared/bench/traffic.py``), so it takes the path
CUDA takes and sees each op as one op writing one tensor (the fake implementations compute nothing). The CPU
runs the plain PyTorch steps (the reference), except under Triton's interpreter (``TRITON_INTERPRET=1``), where
the kernels run on CPU tensors: that is how the tests check them. Autograd and torch.compile tracing never get
here (``fused.fusable``). A kernel that fails to compile or launch is reported once (a warning) and the plain
steps run from then on.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import torch

_state = {"enabled": True}


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


def _launch(op: object, *args: object) -> bool:
    """Run ``op``; on a kernel failure (not out-of-memory) warn once, turn the kernels off and return False."""
    try:
        op(*args)  # type: ignore[operator]
    except torch.OutOfMemoryError:
        raise
    except Exception as err:
        _state["enabled"] = False
        message = f"{type(err).__name__}: {err}".splitlines()[0][:300]
        warnings.warn(f"sst-cli's fused Triton kernels failed ({message}); the plain PyTorch path runs instead",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
        return False
    return True


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
