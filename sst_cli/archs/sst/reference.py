"""SST's window attention written the plain way the authors' code runs it: the baseline of ``sst bench``.

Per forward: RIB coordinates, features and MLP recomputed; q scaled and concatenated with expanded
positional factors; q, k and v each cast and zero-padded to one multiple of 8 by separate copies; windows
split and merged with reshape copies. Same kernel as the optimised path, so the two must agree.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import plan_attention, run_plan
from ..base import plain_layers

if TYPE_CHECKING:
    from .layers import WindowAttention


def _round8(width: int) -> int:
    return -(-width // 8) * 8


def plain_window_attention(layer: WindowAttention, x: torch.Tensor) -> torch.Tensor:
    """What ``WindowAttention.forward`` computes, step by step with fresh tensors (see the module docstring)."""
    b, c, h, w = x.shape
    ws, heads = layer.window, layer.heads
    d = c // heads
    gate = torch.sigmoid(layer.gate(x))
    pad_h, pad_w = -h % ws, -w % ws
    if pad_h or pad_w:
        x = F.pad(x, (0, pad_w, 0, pad_h), mode="reflect")
    if layer.shift:
        x = torch.roll(x, shifts=(-(ws // 2), -(ws // 2)), dims=(2, 3))
    hp, wp = x.shape[-2:]
    nh, nw = hp // ws, wp // ws
    qkv = layer.to_qkv(x).view(b, 3, heads, d, nh, ws, nw, ws)
    q, k, v = qkv.permute(1, 0, 4, 6, 2, 5, 7, 3).reshape(3, b * nh * nw, heads, ws * ws, d).unbind(0)
    pos_q, pos_k = layer.compute_factors(ws)
    pos_q, pos_k = pos_q.to(q.dtype), pos_k.to(q.dtype)
    n = q.shape[0]
    q = torch.cat([q * d**-0.5, (pos_q * layer.rank**-0.5).expand(n, -1, -1, -1)], dim=-1)
    k = torch.cat([k, pos_k.expand(n, -1, -1, -1)], dim=-1)
    kernel_dtype = plan_attention(layer.backend, x.device, x.dtype, d + layer.rank, d).dtype
    width = _round8(q.shape[-1])
    q, k, v = (F.pad(t.to(kernel_dtype), (0, width - t.shape[-1])) for t in (q, k, v))
    plan = plan_attention(layer.backend, x.device, kernel_dtype, width, width)
    if plan.kernel == "native":  # sst-cli's own CPU kernel: the authors' code runs PyTorch's SDPA there
        plan = plan_attention("sdpa", x.device, kernel_dtype, width, width)
    out = run_plan(plan, q, k, v)[..., :d].to(x.dtype)
    out = out.reshape(b, nh, nw, heads, ws, ws, d).permute(0, 3, 6, 1, 4, 2, 5).reshape(b, c, hp, wp)
    if layer.shift:
        out = torch.roll(out, shifts=(ws // 2, ws // 2), dims=(2, 3))
    out = out[:, :, :h, :w].contiguous()
    return layer.to_out(out * gate)


def reference_path(model: nn.Module) -> AbstractContextManager[nn.Module]:
    """Inside the block, ``model``'s SST attention layers run ``plain_window_attention`` (same weights)."""
    from .layers import WindowAttention

    return plain_layers(model, WindowAttention)
