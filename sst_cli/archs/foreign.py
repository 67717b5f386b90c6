"""Architectures sst-cli recognises but does not run, so that refusing their checkpoints can name them.

Each entry is a name and the keys that identify its checkpoints (all of them must be present; any one
group of alternatives is enough). Facts only: the key layouts of the public implementations (BasicSR,
the authors' repositories), as spandrel also recognises them.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

_GROUP = "layers.0.residual_group."  # the Swin-style residual groups of SwinIR, Swin2SR and HAT
_SWIN_BIAS = _GROUP + "blocks.0.attn.relative_position_bias_table"

# (name, alternatives): the file is that architecture when every key of one alternative is present.
FOREIGN: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("HAT", ((_GROUP + "blocks.0.conv_block.cab.0.weight", _GROUP + "overlap_attn.qkv.weight"),)),
    ("Swin2SR", ((_GROUP + "blocks.0.attn.logit_scale", _GROUP + "blocks.0.attn.cpb_mlp.0.weight"),)),
    ("SwinIR", ((_SWIN_BIAS, "patch_embed.norm.weight"), (_SWIN_BIAS, "conv_after_body.weight"))),
    (
        "RRDBNet (ESRGAN / Real-ESRGAN)",
        (("conv_first.weight", "body.0.rdb1.conv1.weight"), ("model.0.weight", "model.1.sub.0.RDB1.conv1.0.weight")),
    ),
    ("SRVGGNetCompact (Real-ESRGAN compact)", (("body.0.weight", "body.1.weight", "body.2.weight"),)),
    ("EDSR", (("head.0.weight", "body.0.body.0.weight", "tail.0.0.weight"),)),
    ("RCAN", (("head.0.weight", "body.0.body.0.body.0.weight", "body.0.body.0.body.3.conv_du.0.weight"),)),
)


def recognise(state: Mapping[str, torch.Tensor]) -> str | None:
    """The name of the foreign architecture these keys belong to, or None."""
    for name, alternatives in FOREIGN:
        if any(all(key in state for key in keys) for keys in alternatives):
            return name
    return None
