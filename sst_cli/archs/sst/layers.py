"""Building blocks of SST, named and shaped exactly like the official checkpoints' keys."""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import AttentionPlan, plan_attention, run_plan, run_plan_rows
from ..base import plain_layers
from . import kernels
from .fused import add_projection, fusable, owned_stream, projection_buffer
from .rib import RibParameters
from .windows import kept_queries, merge_gated, partition_into


def _channels_last(x: torch.Tensor) -> bool:
    return x.stride(1) == 1 and x.shape[1] > 1


class LayerNorm2d(nn.Module):
    """LayerNorm over channels at each pixel of an NCHW tensor (biased variance, eps 1e-6).

    ``affine=False`` (SSTReal's adaLN layers, whose scale and shift come from the noise embedding) keeps
    no weight or bias, as in the official checkpoints.
    """

    weight: nn.Parameter | None
    bias: nn.Parameter | None

    def __init__(self, dim: int, eps: float = 1e-6, affine: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), self.weight, self.bias, self.eps)
        return y.permute(0, 3, 1, 2)


def depthwise_conv(channels: int) -> nn.Conv2d:
    """3x3 depth-wise convolution as the checkpoints store it (``weight`` (C, 1, 3, 3), ``bias``).

    Plain cuDNN on CUDA: zero-padding odd widths to a multiple of 8 (aimed at a slow cuDNN kernel at x3 seen
    on 2026-11-25) measured 4% slower on an H100 on 2026-11-27, with no cliff left in the bare conv
    (benchmarks/RESULTS.md)."""
    return nn.Conv2d(channels, channels, 3, padding=1, groups=channels)


class ConvFFN(nn.Module):
    """1x1 expand, GELU, depth-wise 3x3 with an inner residual ``h + GELU(dwc(h))``, 1x1 back."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(dim, hidden, 1)
        self.dwc = depthwise_conv(hidden)
        self.agg = nn.Conv2d(hidden, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.proj(x))
        return self.agg(h + F.gelu(self.dwc(h)))

    def add_into(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``residual += forward(x)`` in place, the sum before ``agg`` written straight into its input buffer
        (by one fused kernel where ``kernels`` runs, else step by step)."""
        p = self.proj(x)
        rows, image = projection_buffer(x, p.shape[1])
        if not kernels.ffn_middle(image, p, self.dwc):
            h = F.gelu(p)
            torch.add(h, F.gelu(self.dwc(h)), out=image)
        return add_projection(residual, rows, self.agg)


def local_gate(dim: int) -> nn.Sequential:
    """Convolutional local attention gate (depth-wise 3x3, point-wise 1x1); sigmoid applied by the caller."""
    return nn.Sequential(depthwise_conv(dim), nn.Conv2d(dim, dim, 1))


class WindowAttention(RibParameters):
    """Non-overlapping window self-attention with RIB positional factors and a local gate.

    Each layer pads bottom/right (reflect) to a multiple of its own window size, attends within
    windows tiled from the origin (padded tokens take part, unmasked), crops back, multiplies by
    the gate computed on the unpadded input, and projects.
    """

    def __init__(
        self, dim: int, heads: int, window: int, rank: int, rib_hidden: int, n_freqs: int, shift: bool
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.head_dim = dim // heads
        self.window = window
        self.shift = shift
        self.backend = "auto"
        self.plain = False  # run _plain_forward instead (the baseline of sst bench)
        self.init_rib(heads, rank, rib_hidden, n_freqs)
        self.to_qkv = nn.Conv2d(dim, 3 * dim, 1)
        self.to_out = nn.Conv2d(dim, dim, 1)
        self.gate = local_gate(dim)

    @property
    def head_sizes(self) -> tuple[int, int]:
        """(q/k, v) channels per head that reach the attention kernel: D + R and D."""
        return self.head_dim + self.rank, self.head_dim

    @property
    def attention_sizes(self) -> tuple[int, int, int]:
        """(q/k, v, rank): the last R q/k channels are RIB factors shared by every window (see plan_attention)."""
        return self.head_dim + self.rank, self.head_dim, self.rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.plain:
            return self._plain_forward(x)
        layout = torch.channels_last if _channels_last(x) else torch.contiguous_format
        image = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=layout)
        return self.to_out(self.gated(x, image))

    def gated(self, x: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        """``attention(x) * sigmoid(gate(x))`` before ``to_out``, written into ``image`` (B, C, H, W, any strides).

        Tokens move into their windows once (q, k, v, straight from the unpadded image) and back once, gated
        and cropped on the way back (windows.py). Where those ``out=`` writes cannot run (``fusable``: autograd,
        torch.compile), the same steps run one by one on a padded copy.
        """
        h, w = x.shape[-2:]
        ws = self.window
        shift = ws // 2 if self.shift else 0
        grid = (h + -h % ws, w + -w % ws)
        stepwise = not fusable()
        gate = self.gate(x)  # logits: the fused merge takes the sigmoid on its way (kernels.merge_gated)
        fused_merge = not stepwise and kernels.runs_kernels(x)
        if not fused_merge:
            gate = torch.sigmoid(gate)
        plan = plan_attention(self.backend, x.device, x.dtype, *self.attention_sizes)
        if stepwise:
            padded = F.pad(x, (0, grid[1] - w, 0, grid[0] - h), mode="reflect") if grid != (h, w) else x
            if shift:
                padded = torch.roll(padded, shifts=(-shift, -shift), dims=(2, 3))
            q, k, v = self._partition(self.to_qkv(padded), plan)
        else:
            q, k, v = self._window_buffers(x, grid, plan, zero_v=False)
            qkv = self.to_qkv(x)
            if not kernels.partition([q, k, v], qkv, ws, grid, shift, self.head_dim**-0.5):
                partition_into([q, k, v], qkv, ws, grid, shift, self.head_dim**-0.5)
        # A plan that takes the positional factors separately adds their product as a bias (no tails).
        bias = self.positional_tails(ws, x.dtype, plan.dtype, self.rank) if plan.rank else None
        kept = None if stepwise or not plan.drops_rows else kept_queries((h, w), grid, ws, shift, x.shape[0], x.device)
        out = run_plan(plan, q, k, v, bias=bias) if kept is None else run_plan_rows(plan, q, k, v, kept, bias=bias)
        if stepwise:
            out = self._merge(out, torch.Size((x.shape[0], x.shape[1], *grid)), x.dtype, _channels_last(x))
            if shift:
                out = torch.roll(out, shifts=(shift, shift), dims=(2, 3))
            return out[:, :, :h, :w] * gate
        if not (fused_merge and kernels.merge_gated(out, gate, image, ws, grid, shift)):
            merge_gated(out, torch.sigmoid(gate) if fused_merge else gate, image, ws, grid, shift)
        return image

    def _plain_forward(self, x: torch.Tensor) -> torch.Tensor:
        """What ``forward`` computes, written the plain way the authors' code runs it (the baseline of ``sst bench``).

        Per forward: RIB coordinates, features and MLP recomputed; q scaled and concatenated with expanded
        positional factors; q, k and v each cast and zero-padded to one multiple of 8 by separate copies;
        windows split and merged with reshape copies. Same kernel as the optimised path, so the two must agree.
        """
        b, c, h, w = x.shape
        ws, heads = self.window, self.heads
        d = c // heads
        gate = torch.sigmoid(self.gate(x))
        pad_h, pad_w = -h % ws, -w % ws
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h), mode="reflect")
        if self.shift:
            x = torch.roll(x, shifts=(-(ws // 2), -(ws // 2)), dims=(2, 3))
        hp, wp = x.shape[-2:]
        nh, nw = hp // ws, wp // ws
        qkv = self.to_qkv(x).view(b, 3, heads, d, nh, ws, nw, ws)
        q, k, v = qkv.permute(1, 0, 4, 6, 2, 5, 7, 3).reshape(3, b * nh * nw, heads, ws * ws, d).unbind(0)
        pos_q, pos_k = self.compute_factors(ws)
        pos_q, pos_k = pos_q.to(q.dtype), pos_k.to(q.dtype)
        n = q.shape[0]
        q = torch.cat([q * d**-0.5, (pos_q * self.rank**-0.5).expand(n, -1, -1, -1)], dim=-1)
        k = torch.cat([k, pos_k.expand(n, -1, -1, -1)], dim=-1)
        kernel_dtype = plan_attention(self.backend, x.device, x.dtype, d + self.rank, d).dtype
        width = _round8(q.shape[-1])
        q, k, v = (F.pad(t.to(kernel_dtype), (0, width - t.shape[-1])) for t in (q, k, v))
        plan = plan_attention(self.backend, x.device, kernel_dtype, width, width)
        if plan.kernel == "native":  # sst-cli's own CPU kernel: the authors' code runs PyTorch's SDPA there
            plan = plan_attention("sdpa", x.device, kernel_dtype, width, width)
        out = run_plan(plan, q, k, v)[..., :d].to(x.dtype)
        out = out.reshape(b, nh, nw, heads, ws, ws, d).permute(0, 3, 6, 1, 4, 2, 5).reshape(b, c, hp, wp)
        if self.shift:
            out = torch.roll(out, shifts=(ws // 2, ws // 2), dims=(2, 3))
        out = out[:, :, :h, :w].contiguous()
        return self.to_out(out * gate)

    def _window_buffers(
        self, x: torch.Tensor, grid: tuple[int, int], plan: AttentionPlan, zero_v: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v buffers at the kernel's width and dtype, everything but the content channels written.

        The cached positional tails (or zeros) follow q's and k's content channels, unless the plan takes the
        factors as a bias. v's padding only reaches output channels that are dropped (each output channel
        reads one v channel), so it stays unwritten unless autograd will differentiate through it.
        """
        ws, heads, d = self.window, self.heads, self.head_dim
        windows = x.shape[0] * (grid[0] // ws) * (grid[1] // ws)
        tails = None if plan.rank else self.positional_tails(ws, x.dtype, plan.dtype, plan.qk_width - d)
        parts = []
        # Three buffers, not one: CPU allocations above 32 MB are fresh mmaps, page-faulted on every call.
        for i, width in enumerate((plan.qk_width, plan.qk_width, plan.v_width)):
            part = x.new_empty((windows, heads, ws * ws, width), dtype=plan.dtype)
            if i < 2 and tails is not None:
                part[..., d:].copy_(tails[i])  # broadcast over windows
            elif width > d and (i < 2 or zero_v):
                part[..., d:].zero_()
            parts.append(part)
        return parts[0], parts[1], parts[2]

    def _partition(self, qkv: torch.Tensor, plan: AttentionPlan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Window tokens of the padded (and rolled) q, k, v, q scaled: the step-by-step path's copies."""
        b, _, hp, wp = qkv.shape
        ws, heads, d = self.window, self.heads, self.head_dim
        qkv[:, : heads * d].mul_(d**-0.5)  # the conv output is not needed by autograd: scale in place
        windows = qkv.view(b, 3, heads, d, hp // ws, ws, wp // ws, ws).permute(1, 0, 4, 6, 2, 5, 7, 3)
        parts = self._window_buffers(qkv, (hp, wp), plan, zero_v=True)
        for part, window in zip(parts, windows, strict=False):
            part[..., :d].view(b, hp // ws, wp // ws, heads, ws, ws, d).copy_(window)
        return parts

    def _merge(self, out: torch.Tensor, shape: torch.Size, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
        """Windows back to an image in the network's dtype: one copy that also drops padded channels."""
        b, c, hp, wp = shape
        ws, heads = self.window, self.heads
        d = c // heads
        nh, nw = hp // ws, wp // ws
        # Keep a channels-last network channels-last: the copy then moves runs of d contiguous values.
        layout = torch.channels_last if channels_last else torch.contiguous_format
        image = torch.empty((b, c, hp, wp), dtype=dtype, device=out.device, memory_format=layout)
        windows = out[..., :d].view(b, nh, nw, heads, ws, ws, d).permute(0, 3, 6, 1, 4, 2, 5)
        image.view(b, heads, d, nh, ws, nw, ws).copy_(windows)
        return image


def _round8(width: int) -> int:
    return -(-width // 8) * 8


def reference_path(model: nn.Module) -> AbstractContextManager[nn.Module]:
    """Inside the block, ``model``'s SST attention layers run ``_plain_forward`` (same weights)."""
    return plain_layers(model, WindowAttention)


class TransformerLayer(nn.Module):
    """Pre-norm layer: ``x + attn(LN(x))``, then ``x + ffn(LN(x))``."""

    def __init__(self, dim: int, ffn_hidden: int, attn: WindowAttention) -> None:
        super().__init__()
        self.norm_attn = LayerNorm2d(dim)
        self.attn = attn
        self.norm_ffn = LayerNorm2d(dim)
        self.ffn = ConvFFN(dim, ffn_hidden)

    def forward(self, x: torch.Tensor, owned: bool = False) -> torch.Tensor:
        """``owned``: ``x`` may be overwritten (nothing else reads it later), so the residual adds go in place."""
        if self.attn.plain or not fusable():
            x = x + self.attn(self.norm_attn(x))
            return x + self.ffn(self.norm_ffn(x))
        y = self.norm_attn(x)
        rows, image = projection_buffer(y, y.shape[1])
        self.attn.gated(y, image)  # fusable(): it writes image
        x = add_projection(owned_stream(x, owned), rows, self.attn.to_out)
        return self.ffn.add_into(x, self.norm_ffn(x))


class ResidualGroup(nn.Sequential):
    """SSTB: transformer layers then a 3x3 conv, with one residual around the whole group."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for i, layer in enumerate(self):
            # The group's input is needed for its residual; what the layers produce may be overwritten.
            y = layer(y, owned=i > 0) if isinstance(layer, TransformerLayer) else layer(y)
        return x + y


class DirectUpsampler(nn.Module):
    """``pixelshuffle_direct`` (light variants): conv to 3*r^2, add the repeated LR input, shuffle."""

    def __init__(self, dim: int, scale: int) -> None:
        super().__init__()
        self.scale = scale
        self.up_conv = nn.Conv2d(dim, 3 * scale * scale, 3, padding=1)

    def forward(self, feat: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        r2 = self.scale * self.scale
        return F.pixel_shuffle(self.up_conv(feat) + lr.repeat_interleave(r2, dim=1), self.scale)


class ShuffleUpsampler(nn.Module):
    """``pixelshuffle``: conv + leaky ReLU, conv to C*r^2, one shuffle by r, conv to RGB, plus nearest LR."""

    def __init__(self, dim: int, inner: int, scale: int) -> None:
        super().__init__()
        self.scale = scale
        self.feature_conv = nn.Conv2d(dim, inner, 3, padding=1)
        self.up_conv = nn.Conv2d(inner, inner * scale * scale, 3, padding=1)
        self.final_conv = nn.Conv2d(inner, 3, 3, padding=1)

    def forward(self, feat: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.feature_conv(feat), 0.1)
        h = self.final_conv(F.pixel_shuffle(self.up_conv(h), self.scale))
        return h + F.interpolate(lr, scale_factor=self.scale, mode="nearest")
