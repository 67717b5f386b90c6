"""DAT's spatial window attention: rectangular windows, a dynamic position bias, shifted-window masks.

One ``WindowBranch`` attends over half of the channels in ``hs x ws`` windows (the official
``Spatial_Attention``: keys ``pos.*``, ``rpe_biases``, ``relative_position_index``). The bias is a small
MLP over relative offsets (CrossFormer's dynamic position bias), gathered into ``(heads, N, N)``.

Fast path: ``scaled_dot_product_attention`` with the bias as an additive float mask (4-D, so that PyTorch's
fused CPU kernel accepts it; left out where it is constant along the keys, as for DAT-light, whose bias
MLP is one channel wide). Shifted windows are cut into four classes (interior, last column, last row,
corner), each with one mask pattern, instead of the official per-window ``(nW, N, N)`` mask whose size
grows with the image. Plain path (``reference_path``, backend ``math``): the authors' formulation, one
matmul, bias and per-window mask added, softmax, matmul.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

MASK_VALUE = -100.0  # the official shifted-window mask value (not -inf)


class DynamicPosBias(nn.Module):
    """Relative offset (dy, dx) -> one bias per head: linear, then three (LayerNorm, ReLU, Linear) stages."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        width = dim // 4
        self.pos_proj = nn.Linear(2, width)
        self.pos1 = nn.Sequential(nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, width))
        self.pos2 = nn.Sequential(nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, width))
        self.pos3 = nn.Sequential(nn.LayerNorm(width), nn.ReLU(), nn.Linear(width, heads))

    def forward(self, offsets: torch.Tensor) -> torch.Tensor:
        return self.pos3(self.pos2(self.pos1(self.pos_proj(offsets))))


def relative_offsets(hs: int, ws: int) -> torch.Tensor:
    """((2hs-1)(2ws-1), 2) float offsets, dy-major: the official ``rpe_biases`` buffer."""
    dy = torch.arange(1 - hs, hs)
    dx = torch.arange(1 - ws, ws)
    return torch.stack(torch.meshgrid(dy, dx, indexing="ij")).flatten(1).t().float().contiguous()


def relative_index(hs: int, ws: int) -> torch.Tensor:
    """(N, N) index of query i's offset to key j in ``relative_offsets``: the official buffer."""
    ys, xs = torch.meshgrid(torch.arange(hs), torch.arange(ws), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    dy = ys[:, None] - ys[None, :] + hs - 1
    dx = xs[:, None] - xs[None, :] + ws - 1
    return dy * (2 * ws - 1) + dx


def _region_labels(size: int, window: int, shift: int) -> list[int]:
    """Per row (or column) of a padded image: which of the three shifted-window regions it belongs to.

    Python slices exactly as the official mask code writes them (later regions overwrite earlier ones,
    which matters only for windows of size 1, where the shift is 0).
    """
    labels = [0] * size
    for region, part in enumerate((slice(0, -window), slice(-window, -shift), slice(-shift, None))):
        for i in range(size)[part]:
            labels[i] = region
    return labels


def _pattern(row_labels: list[int], col_labels: list[int]) -> torch.Tensor:
    """(N, N) mask of one window: 0 where two tokens share a region, MASK_VALUE where they do not."""
    label = torch.tensor([3 * r + c for r in row_labels for c in col_labels], device="cpu")
    return torch.where(label[None, :] != label[:, None], MASK_VALUE, 0.0)


@lru_cache(maxsize=64)
def shift_mask_patterns(hp: int, wp: int, hs: int, ws: int, sh: int, sw: int) -> dict[tuple[bool, bool], torch.Tensor]:
    """The (N, N) mask of each window class (last row?, last column?) of a shifted ``hp x wp`` image.

    Every window row but the last lies in one region, and so does every window column but the last, so
    four patterns describe the whole official ``(nW, N, N)`` mask. Cached: geometry only, always on the CPU
    (also inside a ``torch.device('meta')`` block).
    """
    rows, cols = _region_labels(hp, hs, sh), _region_labels(wp, ws, sw)
    row_patterns = {False: rows[:hs], True: rows[hp - hs :]}
    col_patterns = {False: cols[:ws], True: cols[wp - ws :]}
    return {
        (last_row, last_col): _pattern(row_patterns[last_row], col_patterns[last_col])
        for last_row in (False, True)
        for last_col in (False, True)
    }


def full_shift_mask(hp: int, wp: int, hs: int, ws: int, sh: int, sw: int) -> torch.Tensor:
    """The official per-window mask (nW, N, N), windows row-major (what the stored buffers hold)."""
    patterns = shift_mask_patterns(hp, wp, hs, ws, sh, sw)
    default_device = torch.empty(0).device  # honours a ``with torch.device(...)`` block (meta, when building)
    return _stack_patterns(patterns, hp // hs, wp // ws).to(default_device)


def to_windows(x: torch.Tensor, hs: int, ws: int, heads: int) -> torch.Tensor:
    """(B, H, W, C) -> (B * nW, heads, hs * ws, C / heads), windows row-major (one copy)."""
    b, h, w, c = x.shape
    x = x.view(b, h // hs, hs, w // ws, ws, heads, c // heads)
    return x.permute(0, 1, 3, 5, 2, 4, 6).reshape(-1, heads, hs * ws, c // heads)


def from_windows(x: torch.Tensor, b: int, h: int, w: int, hs: int, ws: int) -> torch.Tensor:
    """Inverse of ``to_windows``: (B * nW, heads, N, d) -> (B, H, W, heads * d)."""
    heads, d = x.shape[1], x.shape[3]
    x = x.view(b, h // hs, w // ws, heads, hs, ws, d)
    return x.permute(0, 1, 4, 2, 5, 3, 6).reshape(b, h, w, heads * d)


class WindowBranch(nn.Module):
    """Window attention over one half of the channels (official ``Spatial_Attention``, keys included)."""

    def __init__(self, dim: int, heads: int, hs: int, ws: int, qk_scale: float | None) -> None:
        super().__init__()
        self.heads, self.hs, self.ws = heads, hs, ws
        self.head_dim = dim // heads
        self.scale = qk_scale or self.head_dim**-0.5
        self.pos = DynamicPosBias(dim // 4, heads)
        self.rpe_biases: torch.Tensor
        self.relative_position_index: torch.Tensor
        self.register_buffer("rpe_biases", relative_offsets(hs, ws))
        self.register_buffer("relative_position_index", relative_index(hs, ws))

    def position_bias(self) -> torch.Tensor:
        """(heads, N, N) bias added to the scores, from the MLP over the stored offsets."""
        n = self.hs * self.ws
        table = self.pos(self.rpe_biases)
        return table[self.relative_position_index.view(-1)].view(n, n, -1).permute(2, 0, 1)

    def forward(
        self, qkv: torch.Tensor, shift_patterns: dict[tuple[bool, bool], torch.Tensor] | None, plain: bool
    ) -> torch.Tensor:
        """(3, B, Hp, Wp, C) q/k/v, already padded and rolled -> (B, Hp, Wp, C) attention output."""
        full = self.position_bias().to(qkv.dtype)
        if plain:
            return self._plain(qkv, full, shift_patterns)
        # constant along the keys (DAT-light: a one-channel MLP): softmax ignores it, SDPA runs unmasked. Not
        # while torch.compile traces: the data-dependent test would split every block's graph in two.
        constant = not torch.compiler.is_compiling() and torch.equal(full.amax(-1), full.amin(-1))
        bias = None if constant else full
        if shift_patterns is None:
            return self._attend(qkv, bias, None)
        _, b, hp, wp, c = qkv.shape
        out = qkv.new_empty(b, hp, wp, c)
        rows = {False: slice(0, hp - self.hs), True: slice(hp - self.hs, hp)}
        cols = {False: slice(0, wp - self.ws), True: slice(wp - self.ws, wp)}
        for (last_row, last_col), pattern in shift_patterns.items():
            part = qkv[:, :, rows[last_row], cols[last_col]]
            if part.shape[2] and part.shape[3]:
                out[:, rows[last_row], cols[last_col]] = self._attend(part, bias, pattern.to(qkv))
        return out

    def _attend(self, qkv: torch.Tensor, bias: torch.Tensor | None, pattern: torch.Tensor | None) -> torch.Tensor:
        _, b, h, w, _ = qkv.shape
        q, k, v = (to_windows(t, self.hs, self.ws, self.heads) for t in qkv.unbind(0))
        mask = bias
        if pattern is not None:
            mask = pattern if mask is None else mask + pattern
        if mask is not None:
            mask = mask.expand(1, self.heads, *mask.shape[-2:])  # 4-D: PyTorch's fused CPU kernel takes it
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return from_windows(out, b, h, w, self.hs, self.ws)

    def _plain(
        self, qkv: torch.Tensor, bias: torch.Tensor, shift_patterns: dict[tuple[bool, bool], torch.Tensor] | None
    ) -> torch.Tensor:
        """The authors' formulation: scaled scores, + bias, + the per-window mask, softmax, times v."""
        _, b, hp, wp, _ = qkv.shape
        q, k, v = (to_windows(t, self.hs, self.ws, self.heads) for t in qkv.unbind(0))
        scores = (q * self.scale) @ k.transpose(-2, -1) + bias
        if shift_patterns is not None:
            mask = _stack_patterns(shift_patterns, hp // self.hs, wp // self.ws).to(scores)
            n = scores.shape[-1]
            scores = (scores.view(b, -1, self.heads, n, n) + mask[:, None]).view(-1, self.heads, n, n)
        out = scores.softmax(dim=-1) @ v
        return from_windows(out, b, hp, wp, self.hs, self.ws)


def _stack_patterns(patterns: dict[tuple[bool, bool], torch.Tensor], nh: int, nw: int) -> torch.Tensor:
    return torch.stack([patterns[(i == nh - 1, j == nw - 1)] for i in range(nh) for j in range(nw)])
