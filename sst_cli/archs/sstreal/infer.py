"""What an SSTReal checkpoint's tensors say about its architecture.

Everything that shapes a tensor is read from the file. Three things shape none: the window sizes (RIB
parameters do not depend on them), ``ig_idx`` (which block feeds the first head) and the EDM constants
(``sigma_data``, ``use_skip``). For those the released SSTReal-X4's values are assumed when every size the
tensors show is its own; a file of any other size needs its constructor keywords (``--config``), or its
stored config (sst-cli's own files).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from ...errors import CheckpointError
from ..base import ArchConfig, tensor_shape
from ..sst.rib import feature_count
from .config import RELEASED_WINDOWS, SSTRealConfig

_REQUIRED = ("model.map_noise.mlp.0.weight", "model.proj_in.weight", "model.proj_lr.weight", "model.up_f.8.weight")
_BLOCK_KEY = re.compile(r"^model\.proj_body\.(\d+)\.adaLN_modulation\.weight$")
_LAYER_KEY = re.compile(r"^model\.proj_body\.0\.blocks\.(\d+)\.attn\.to_q$")
_FUSE_KEY = re.compile(r"^model\.proj_body\.(\d+)\.fuse_lr\.weight$")

# Keys the tensors determine; ``check`` compares exactly these.
DETERMINED = (
    "dim", "intermediate_dim", "emb_channels", "noise_channels", "num_blocks", "fuse_lr_till",
    "num_heads", "ranks", "rib_hidden_dim", "rib_n_freqs", "ffn_hidden",
)  # fmt: skip


def detect(state: Mapping[str, torch.Tensor]) -> bool:
    """The EDMUNet layout: ``model.map_noise``, ``model.proj_in``, ``model.proj_lr``, ``model.up_f`` (SST's
    keys are unprefixed ``proj``/``body``/``upsampler``, so the two never both match)."""
    return all(key in state for key in _REQUIRED)


def _indices(state: Mapping[str, torch.Tensor], pattern: re.Pattern[str]) -> list[int]:
    return sorted(int(m[1]) for key in state if (m := pattern.match(key)))


def _shape(state: Mapping[str, torch.Tensor], key: str, ndim: int) -> torch.Size:
    return tensor_shape(state, key, ndim, "SSTReal")


def infer(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, Any], bool]:
    """Constructor keywords: read from the tensors, the rest the released model's (see the module docstring)."""
    embed = _shape(state, "model.map_noise.mlp.0.weight", 2)
    dim = _shape(state, "model.proj_in.weight", 4)[0]
    blocks = _indices(state, _BLOCK_KEY)
    layers = _indices(state, _LAYER_KEY)
    if blocks != list(range(len(blocks))) or not blocks or layers != list(range(len(layers))) or not layers:
        raise CheckpointError("an incomplete SSTReal checkpoint: its blocks or layers are not numbered 0, 1, 2, ...")
    to_q = [_shape(state, f"model.proj_body.0.blocks.{i}.attn.to_q", 3) for i in layers]
    to_hidden = _shape(state, "model.proj_body.0.blocks.0.attn.to_hidden", 2)
    hidden = _shape(state, "model.proj_body.0.blocks.0.ffn.w3.weight", 4)[1]
    inner = _shape(state, "model.up_f.0.weight", 4)[0]
    fused = _indices(state, _FUSE_KEY)
    fuse_lr_till = len(fused) - 1
    if fused != list(range(len(fused))):
        raise CheckpointError(f"SSTReal checkpoint fuses LR features in blocks {fused}, not in leading blocks")
    n_freqs, rest = divmod(to_hidden[0] - 2, 4)
    if rest or feature_count(n_freqs) != to_hidden[0]:
        raise CheckpointError(f"RIB input width {to_hidden[0]} is not 2 + 4 * n_freqs")
    windows = (RELEASED_WINDOWS * len(layers))[: len(layers)]  # the released six, or as many of its pattern
    kwargs: dict[str, Any] = {
        "scale": 4,
        "dim": dim,
        "intermediate_dim": inner,
        "emb_channels": embed[0],
        "noise_channels": embed[1],
        "num_blocks": len(blocks),
        "fuse_lr_till": fuse_lr_till,
        "ig_idx": max(0, fuse_lr_till),
        "window_sizes": list(windows),
        "num_heads": [s[0] for s in to_q],
        "ranks": [s[2] for s in to_q],
        "rib_hidden_dim": to_hidden[1],
        "rib_n_freqs": n_freqs,
        "exp_ratio": _exp_ratio(dim, hidden),
    }
    return kwargs, _is_released(kwargs)


def _is_released(kwargs: Mapping[str, Any]) -> bool:
    """Whether every size the tensors show is the released SSTReal-X4's, so that its window sizes and ig_idx (in
    no tensor) may be assumed; another build may use others, and guessing gave wrong pixels (2e-3) silently."""
    try:
        found = SSTRealConfig(**kwargs)
    except (TypeError, ValueError) as exc:  # ConfigError too: the file, not an option, is at fault
        raise CheckpointError(f"its tensors describe no valid SSTReal network: {exc}") from None
    return determined(found) == determined(SSTRealConfig())


def _exp_ratio(dim: int, hidden: int) -> float:
    """A ratio that gives back ``hidden`` through ``int(int(dim * ratio) * 2 / 3)``."""
    for width in range(hidden * 3 // 2, hidden * 3 // 2 + 3):
        if int(width * 2 / 3) == hidden:
            ratio = width / dim
            if int(int(dim * ratio) * 2 / 3) == hidden:
                return int(ratio) if ratio == int(ratio) else ratio
    raise CheckpointError(f"SwiGLU width {hidden} cannot come from dim {dim} and any exp_ratio")


def determined(cfg: SSTRealConfig) -> dict[str, Any]:
    """The config's values of the keys the tensors determine."""
    kwargs = cfg.to_kwargs()
    values = {key: kwargs[key] for key in DETERMINED if key in kwargs}
    values["fuse_lr_till"] = cfg.fused_blocks - 1
    values["ffn_hidden"] = cfg.ffn_hidden
    return values


def check(inferred: Mapping[str, Any], config: ArchConfig, source: str) -> None:
    """Explain, field by field, where the weights disagree with the requested architecture."""
    assert isinstance(config, SSTRealConfig)
    wanted = determined(config)
    found = determined(SSTRealConfig.from_kwargs(inferred))
    diffs = [f"{k}: file has {v}, model needs {wanted[k]}" for k, v in found.items() if v != wanted[k]]
    if len(inferred["ranks"]) != len(config.window_sizes):
        diffs.insert(0, f"layers per block: file has {len(inferred['ranks'])}, model needs {len(config.window_sizes)}")
    if diffs:
        raise CheckpointError(f"{source} does not match the requested SSTReal architecture: " + "; ".join(diffs))
