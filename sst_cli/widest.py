"""The most elements one forward pass writes into a single tensor, per input pixel, measured on a small input.

PyTorch sends a CUDA convolution whose one-image input or output passes 2**31 - 1 elements away from cuDNN to
a slow fallback kernel (and some kernels have failed outright past it: pytorch issues 117736, 152816). A whole
3840x2160 image through SST-L x2 passes it (q/k/v's 576 channels: 4.8e9 elements; the FFN's 384: 3.2e9) and
ran 1.44x slower than 1088x1280 tiles on an H100 (34.0 s against 23.6 s, 2026-11-25). So on CUDA the tile
planner keeps every tile's widest tensor under the limit, whatever memory the card has. Measured, not declared:
any network, any layout (SST-L: 576 elements per LR pixel at x2, 1536 at x4, where the upsampler's are widest).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

INDEX_LIMIT = 2**31 - 1  # elements of one tensor that 32-bit index math can address


class _Widest(TorchDispatchMode):
    """Records the largest tensor any op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.most = max(self.most, leaf.numel())
        return out


def widest_per_pixel(model: nn.Module, side: int, device: torch.device, dtype: torch.dtype) -> float:
    """Elements of the largest tensor of one forward pass on a ``side`` x ``side`` RGB input, per input pixel
    (output-sized tensors count scale**2 per pixel). ``side`` should be a multiple of the network's window.

    ``device`` "meta" runs the model's own code on shapes alone (its weights swapped for meta tensors for the
    call): no kernel runs, compiles or allocates. On CUDA the real probe cost a first forward at a size the
    images never use (cuDNN's and Triton's choices and compiles for it); sst-cli's networks take the same
    path on meta as on CUDA (``kernels.runs_kernels``)."""
    x = torch.zeros(1, 3, side, side, device=device, dtype=dtype)
    if device.type == "meta":  # made outside inference mode: caches keyed by a weight's version read it
        tensors = {name: t.to("meta") for name, t in [*model.named_parameters(), *model.named_buffers()]}
    with torch.inference_mode(), _Widest() as seen:
        if device.type == "meta":
            torch.func.functional_call(model, tensors, (x,))
        else:
            model(x)
    return seen.most / (side * side)
