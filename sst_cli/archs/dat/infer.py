"""What a DAT checkpoint's tensors say about its constructor keywords (everything that shapes the network).

Read from the tensors: ``in_chans`` and ``embed_dim`` (first conv), ``depth`` (block indices per group),
``num_heads`` (the channel attention's temperature; a group with one block only has a spatial block,
whose bias MLP has heads // 2 outputs, and then 2 * that is exact in function), ``split_size`` (the
values of the stored ``rpe_biases``: their last row is (s0 - 1, s1 - 1); tensors without values, such as
meta tensors, give only the two sides, taken smaller first as in every published variant),
``expansion_factor`` (FFN width), ``qkv_bias``, ``resi_connection`` (``conv_after_body`` one conv or
three), ``upsampler`` and ``upscale`` (the reconstruction convs), ``img_size`` (the stored shift masks:
(img_size / s0) * (img_size / s1) windows; 64, the official default, when no block is shifted, where it
changes nothing).

Not in any tensor: ``img_range`` (1.0 in every official and community DAT), ``qk_scale`` (None: 1/sqrt(d)),
and training-only keywords. The inferred keywords are therefore complete for loading.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from ...errors import CheckpointError
from ..base import tensor_shape
from .config import NUM_FEAT

_BLOCK = re.compile(r"^layers\.(\d+)\.blocks\.(\d+)\.")
_MASK = re.compile(r"^layers\.\d+\.blocks\.\d+\.attn\.attn_mask_0$")
_INDEX = re.compile(r"^(layers\.\d+\.blocks\.\d+\.attn\.attns\.\d+\.)relative_position_index$")
_FIRST = "layers.0.blocks.0."
REQUIRED = (
    "conv_first.weight",
    "before_RG.1.weight",
    f"{_FIRST}attn.qkv.weight",
    f"{_FIRST}attn.attns.0.rpe_biases",
    f"{_FIRST}attn.attns.0.relative_position_index",
    f"{_FIRST}ffn.sg.norm.weight",
    "norm.weight",
)


def _shape(state: Mapping[str, torch.Tensor], key: str, ndim: int) -> torch.Size:
    return tensor_shape(state, key, ndim, "DAT")


def detect(state: Mapping[str, torch.Tensor]) -> bool:
    """DAT's own key layout: ``before_RG``, spatial blocks with ``attns.N.rpe_biases`` and an SGFN gate."""
    return all(key in state for key in REQUIRED)


def _split_size(state: Mapping[str, torch.Tensor]) -> list[int]:
    """The window sides (s0, s1), checked against the shapes of the tensors they size.

    A number read from a tensor decides how much the build allocates (the masks are N x N per window): a
    damaged last row (3000, 3000) asked for 81 TB, and (-5, 2) met ``isqrt`` of a negative number. The shapes,
    (2 s0 - 1)(2 s1 - 1) offsets and an N x N index, are the file's own size, so sides that fit them are bounded.
    """
    key, index_key = f"{_FIRST}attn.attns.0.rpe_biases", f"{_FIRST}attn.attns.0.relative_position_index"
    for name in (key, index_key):
        _shape(state, name, 2)
    offsets, index = state[key], state[index_key]
    if offsets.shape[1] != 2 or index.shape[0] != index.shape[1]:
        raise CheckpointError(
            f"{key} {tuple(offsets.shape)} and relative_position_index {tuple(index.shape)} are not the "
            "(offsets, 2) and (N, N) tensors of a DAT window"
        )
    n, rows = index.shape[0], offsets.shape[0]
    if not offsets.is_meta:
        last = offsets[-1].tolist()  # the last offset: (s0 - 1, s1 - 1)
        said = f"its last offset ({last[0]:g}, {last[1]:g})"
        if last != [int(v) for v in last]:
            raise CheckpointError(f"{key}: {said} is not a pair of whole numbers (a damaged file)")
        split = [int(last[0]) + 1, int(last[1]) + 1]
        said += f" means a {split[0]} x {split[1]} window"
    else:  # no values: N = s0 * s1 and (2 s0 - 1)(2 s1 - 1) rows give s0 + s1 and s0 * s1, not their order
        total = (4 * n + 1 - rows) // 2
        root = math.isqrt(max(0, total * total - 4 * n))
        split = [(total - root) // 2, (total + root) // 2]
        said = f"its {rows} offsets fit no window"
    s0, s1 = split
    if min(split) < 1 or s0 * s1 != n or (2 * s0 - 1) * (2 * s1 - 1) != rows:
        raise CheckpointError(
            f"{key}: {said}, but relative_position_index {tuple(index.shape)} is for a window of {n} tokens "
            f"(a damaged file)"
        )
    return split


def _groups(state: Mapping[str, torch.Tensor]) -> list[int]:
    blocks: dict[int, set[int]] = {}
    for key in state:
        match = _BLOCK.match(key)
        if match:
            blocks.setdefault(int(match[1]), set()).add(int(match[2]))
    if sorted(blocks) != list(range(len(blocks))):
        raise CheckpointError(f"residual groups are not numbered 0..N-1: {sorted(blocks)}")
    depth = []
    for g in range(len(blocks)):
        if sorted(blocks[g]) != list(range(len(blocks[g]))):
            raise CheckpointError(f"blocks of residual group {g} are not numbered 0..N-1: {sorted(blocks[g])}")
        depth.append(len(blocks[g]))
    return depth


def _heads(state: Mapping[str, torch.Tensor], group: int, depth: int) -> int:
    if depth >= 2:
        return int(_shape(state, f"layers.{group}.blocks.1.attn.temperature", 3)[0])
    return 2 * int(_shape(state, f"layers.{group}.blocks.0.attn.attns.0.pos.pos3.2.weight", 2)[0])


def _expansion(dim: int, hidden: int) -> float:
    ratio = hidden / dim
    # int(dim * ratio) must give back the hidden width, as the constructor computes it.
    return ratio if int(dim * ratio) == hidden else (hidden + 0.5) / dim


def _upsampler(state: Mapping[str, torch.Tensor], in_chans: int) -> dict[str, Any]:
    if "conv_last.weight" in state:
        convs = sorted(int(k.split(".")[1]) for k in state if re.match(r"^upsample\.\d+\.weight$", k))
        widths = [_shape(state, f"upsample.{i}.weight", 4)[0] for i in convs]
        if widths == [9 * NUM_FEAT]:
            scale = 3
        elif all(w == 4 * NUM_FEAT for w in widths):
            scale = 2 ** len(widths)
        else:
            raise CheckpointError(f"upsampler convolutions of {widths} channels fit no DAT scale")
        return {"upsampler": "pixelshuffle", "upscale": scale}
    out = _shape(state, "upsample.0.weight", 4)[0]
    scale = math.isqrt(out // in_chans)
    if scale * scale * in_chans != out:
        raise CheckpointError(f"the one-step upsampler has {out} channels: not in_chans x a square scale")
    return {"upsampler": "pixelshuffledirect", "upscale": scale}


def _img_size(state: Mapping[str, torch.Tensor], split: list[int]) -> int:
    masks = [(k, v) for k, v in state.items() if _MASK.match(k)]
    if not masks:
        return 64
    key, mask = masks[0]
    n = split[0] * split[1]
    if mask.ndim != 3 or mask.shape[1:] != (n, n):  # the build allocates windows x N x N from the window's N
        raise CheckpointError(f"{key} {tuple(mask.shape)} is not the (windows, {n}, {n}) mask of its windows")
    windows = mask.shape[0]
    side = math.isqrt(windows * split[0] * split[1])
    if side * side != windows * split[0] * split[1]:
        raise CheckpointError(f"stored shift masks of {windows} windows fit no square img_size")
    return side


def _check_indices(state: Mapping[str, torch.Tensor]) -> None:
    """Each ``relative_position_index`` picks rows of its branch's ``rpe_biases``: one out of range (a damaged
    file) would fail only at the first forward pass, after the image is read, or wrap round silently (-1)."""
    for key, index in state.items():
        match = _INDEX.match(key)
        offsets = state.get(f"{match[1]}rpe_biases") if match else None
        if offsets is None or offsets.ndim != 2 or index.is_meta or offsets.is_meta or not index.numel():
            continue  # another shape: the strict load names it
        low, high = index.min().item(), index.max().item()
        if low < 0 or high >= offsets.shape[0]:
            raise CheckpointError(
                f"{key} holds indices from {low:g} to {high:g}, outside the {offsets.shape[0]} rows of its rpe_biases"
            )


def infer(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, Any], bool]:
    """Constructor keywords the tensors determine; complete (see the module docstring)."""
    first = _shape(state, "conv_first.weight", 4)
    embed_dim, in_chans = int(first[0]), int(first[1])
    depth = _groups(state)
    split = _split_size(state)
    arch: dict[str, Any] = {
        "img_size": _img_size(state, split),
        "in_chans": in_chans,
        "embed_dim": embed_dim,
        "split_size": split,
        "depth": depth,
        "num_heads": [_heads(state, g, d) for g, d in enumerate(depth)],
        "expansion_factor": _expansion(embed_dim, int(_shape(state, f"{_FIRST}ffn.fc1.weight", 2)[0])),
        "qkv_bias": f"{_FIRST}attn.qkv.bias" in state,
        "resi_connection": "1conv" if "conv_after_body.weight" in state else "3conv",
    }
    arch |= _upsampler(state, in_chans)
    _check_indices(state)
    return arch, True
