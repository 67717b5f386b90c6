"""DAT's blocks, named and shaped like the official checkpoints' keys.

Activations between blocks are (B, H, W, C) tensors (the official code uses (B, H*W, C) tokens; same
order of values): LayerNorms and linears act on the last axis, convolutions see an NCHW view in
channels-last memory, so no layout copies are needed around them.

A residual group alternates spatial blocks (even index: window attention over two channel halves with
transposed windows, ``SpatialAttention``) and channel blocks (odd index: transposed attention across
channels, ``ChannelAttention``). Both mix their attention branch with a depth-wise convolution branch
through the adaptive interaction module (AIM), and are followed by the spatial-gate FFN (SGFN).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import shifted
from .window import WindowBranch, full_shift_mask, shift_mask_patterns


def nchw(x: torch.Tensor) -> torch.Tensor:
    """(B, H, W, C) -> an NCHW view (channels-last memory)."""
    return x.permute(0, 3, 1, 2)


def nhwc(x: torch.Tensor) -> torch.Tensor:
    """NCHW -> a (B, H, W, C) view."""
    return x.permute(0, 2, 3, 1)


def _dwconv(dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1, groups=dim), nn.BatchNorm2d(dim), nn.GELU())


def _channel_interaction(dim: int) -> nn.Sequential:
    """Global average pool -> squeeze/excite: one logit per channel (before the sigmoid)."""
    return nn.Sequential(
        nn.AdaptiveAvgPool2d(1),
        nn.Conv2d(dim, dim // 8, 1),
        nn.BatchNorm2d(dim // 8),
        nn.GELU(),
        nn.Conv2d(dim // 8, dim, 1),
    )


def _spatial_interaction(dim: int) -> nn.Sequential:
    """Point-wise bottleneck: one logit per pixel (before the sigmoid)."""
    return nn.Sequential(nn.Conv2d(dim, dim // 16, 1), nn.BatchNorm2d(dim // 16), nn.GELU(), nn.Conv2d(dim // 16, 1, 1))


class SpatialAttention(nn.Module):
    """Dual spatial window attention (official ``Axial_Spatial_Attention``).

    qkv is computed once; the first channel half attends in ``s0 x s1`` windows, the second in ``s1 x s0``.
    q/k/v are zero-padded bottom/right (after the projection, so padded keys score 0 and take part
    unmasked) to a multiple of the window sizes. Shifted blocks roll each half by half its window first
    and mask tokens that the roll brought together. The conv branch sees v unpadded.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        split: tuple[int, int],
        qkv_bias: bool,
        qk_scale: float | None,
        img_size: int,
        shift: bool,
    ) -> None:
        super().__init__()
        s0, s1 = split
        self.split = split
        self.shift = shift
        self.img_size = img_size
        self.plain = False  # the authors' matmul-softmax formulation (reference path, backend 'math')
        self.backend = "auto"
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.branches = [WindowBranch(dim // 2, heads // 2, hs, ws, qk_scale) for hs, ws in ((s0, s1), (s1, s0))]
        self.attns = nn.ModuleList(self.branches)
        # Padding unit. The official code pads to max(s0, s1): the same number whenever one side divides the
        # other, which is the only case it can run (its window partition fails otherwise).
        self.multiple = math.lcm(s0, s1)
        if shift:  # stored in checkpoints (official buffers): the masks at img_size x img_size
            for i, (hs, ws) in enumerate(((s0, s1), (s1, s0))):
                mask = full_shift_mask(img_size, img_size, hs, ws, hs // 2, ws // 2)
                self.register_buffer(f"attn_mask_{i}", mask)
        self.dwconv = _dwconv(dim)
        self.channel_interaction = _channel_interaction(dim)
        self.spatial_interaction = _spatial_interaction(dim)

    def _patterns(self, i: int, hp: int, wp: int) -> dict[tuple[bool, bool], torch.Tensor] | None:
        """The four mask patterns of branch ``i``: from the stored buffer when the padded input is
        ``img_size`` square (as the official code uses it), else from the geometry (identical values)."""
        if not self.shift:
            return None
        hs, ws = self.branches[i].hs, self.branches[i].ws
        stored: torch.Tensor = getattr(self, f"attn_mask_{i}")
        nh, nw = hp // hs, wp // ws
        if hp == wp == self.img_size and stored.shape[0] == nh * nw:
            return {
                (False, False): stored[0],
                (False, True): stored[nw - 1],
                (True, False): stored[(nh - 1) * nw],
                (True, True): stored[nh * nw - 1],
            }
        # while torch.compile traces, the masks become constants of the graph: the cache would only make it warn
        build = shift_mask_patterns.__wrapped__ if torch.compiler.is_compiling() else shift_mask_patterns
        return build(hp, wp, hs, ws, hs // 2, ws // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        qkv = self.qkv(x)  # (B, H, W, 3C): q, k, v
        v = nchw(qkv[..., 2 * c :])
        ph, pw = -h % self.multiple, -w % self.multiple
        qkv = F.pad(qkv, (0, 0, 0, pw, 0, ph)).view(b, h + ph, w + pw, 3, c).permute(3, 0, 1, 2, 4)
        hp, wp = h + ph, w + pw
        plain = self.plain or self.backend == "math"
        halves = []
        for i, branch in enumerate(self.branches):
            part = qkv[..., i * (c // 2) : (i + 1) * (c // 2)]
            sh, sw = branch.hs // 2, branch.ws // 2
            if self.shift:
                part = torch.roll(part, shifts=(-sh, -sw), dims=(2, 3))
            out = branch(part, self._patterns(i, hp, wp), plain)
            if self.shift:
                out = torch.roll(out, shifts=(sh, sw), dims=(1, 2))
            halves.append(out[:, :h, :w])
        attended = torch.cat(halves, dim=-1)  # (B, H, W, C)
        conv = self.dwconv(v)
        channel_map = self.channel_interaction(conv)  # (B, C, 1, 1)
        spatial_map = self.spatial_interaction(nchw(attended))  # (B, 1, H, W)
        attended = attended * torch.sigmoid(nhwc(channel_map))
        conv = torch.sigmoid(spatial_map) * conv
        return self.proj(attended + nhwc(conv))


class ChannelAttention(nn.Module):
    """Transposed (channel-wise) attention per head, L2-normalised q and k, a learned temperature per
    head and no 1/sqrt(d) (official ``Axial_Channel_Attention``, from XCiT)."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.dwconv = _dwconv(dim)
        self.channel_interaction = _channel_interaction(dim)
        self.spatial_interaction = _spatial_interaction(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        n, d = h * w, c // self.heads
        qkv = self.qkv(x).view(b, n, 3, self.heads, d).permute(2, 0, 3, 4, 1)  # (3, B, heads, d, N)
        q, k, v = qkv.unbind(0)
        conv = self.dwconv(v.reshape(b, c, h, w))
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        attn = ((q @ k.transpose(-2, -1)) * self.temperature).softmax(dim=-1)  # (B, heads, d, d)
        attended = (attn @ v).permute(0, 3, 1, 2).reshape(b, h, w, c)
        channel_map = self.channel_interaction(nchw(attended))  # (B, C, 1, 1)
        spatial_map = self.spatial_interaction(conv)  # (B, 1, H, W)
        attended = attended * torch.sigmoid(nhwc(spatial_map))
        conv = conv * torch.sigmoid(channel_map)
        return self.proj(attended + nhwc(conv))


class SpatialGate(nn.Module):
    """Second half of the hidden channels -> LayerNorm -> depth-wise 3x3; multiplies the first half."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.conv = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x1 * nhwc(self.conv(nchw(self.norm(x2))))


class SGFN(nn.Module):
    """Spatial-gate feed-forward network: linear, GELU (exact), spatial gate, linear."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.sg = SpatialGate(hidden // 2)
        self.fc2 = nn.Linear(hidden // 2, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.sg(self.act(self.fc1(x))))


class DATBlock(nn.Module):
    """Pre-norm transformer block: spatial attention at even ``index``, channel attention at odd."""

    def __init__(
        self,
        dim: int,
        heads: int,
        split: tuple[int, int],
        hidden: int,
        qkv_bias: bool,
        qk_scale: float | None,
        img_size: int,
        group: int,
        index: int,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn: nn.Module
        if index % 2 == 0:
            shift = shifted(group, index)
            self.attn = SpatialAttention(dim, heads, split, qkv_bias, qk_scale, img_size, shift)
        else:
            self.attn = ChannelAttention(dim, heads, qkv_bias)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = SGFN(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


def residual_conv(dim: int, kind: str) -> nn.Module:
    """The convolution closing a residual group (and the body): one 3x3, or 3x3 -> 1x1 -> 3x3 at dim / 4."""
    if kind == "1conv":
        return nn.Conv2d(dim, dim, 3, padding=1)
    quarter = dim // 4
    return nn.Sequential(
        nn.Conv2d(dim, quarter, 3, padding=1),
        nn.LeakyReLU(0.2),
        nn.Conv2d(quarter, quarter, 1),
        nn.LeakyReLU(0.2),
        nn.Conv2d(quarter, dim, 3, padding=1),
    )


class ResidualGroup(nn.Module):
    """``depth`` DAT blocks, then a convolution, around a residual connection."""

    def __init__(self, blocks: list[DATBlock], conv: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        res = x
        for block in self.blocks:
            x = block(x)
        return res + nhwc(self.conv(nchw(x)))
