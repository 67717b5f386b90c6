"""The networks sst-cli runs, one room per architecture, and the table that recognises their checkpoints.

Adding an architecture: a new room exporting an ``Architecture`` (see ``base.py``) and one line here.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..errors import CheckpointError
from .base import ArchConfig, Architecture, ModelDescriptor, SRNetwork, bf16_failure, describe, network_of
from .dat import ARCH as DAT_ARCH
from .foreign import recognise
from .sst import ARCH as SST_ARCH
from .sstreal import ARCH as SSTREAL_ARCH

ARCHITECTURES: dict[str, Architecture] = {arch.name: arch for arch in (SST_ARCH, DAT_ARCH, SSTREAL_ARCH)}


def get_architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise CheckpointError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}") from None


def near_miss(state: Mapping[str, torch.Tensor], source: str) -> CheckpointError | None:
    """The error for a file that mostly holds one of sst-cli's architectures' marker keys (a modified or
    incomplete file), naming the markers it lacks; None when no architecture is that close."""
    for arch in ARCHITECTURES.values():
        missing = [key for key in arch.markers if key not in state]
        if arch.markers and len(missing) <= len(arch.markers) // 2:
            return CheckpointError(
                f"{source}: looks like a {arch.title} checkpoint but lacks {', '.join(missing)} "
                f"(a modified or incomplete {arch.title} file; sst-cli runs the official {arch.title} layout)"
            )
    return None


def prefix_miss(state: Mapping[str, torch.Tensor], source: str) -> CheckpointError | None:
    """The error for a file whose keys all carry one prefix (``net_g.``, ``model.``) and are one of sst-cli's
    architectures without it; None otherwise. Not stripped silently: only ``module.`` (DataParallel) is a prefix
    every trainer's loader takes off, and another may mean another network."""
    first = next(iter(state), "")
    prefix = first.split(".", 1)[0] + "."
    if "." not in first or not all(key.startswith(prefix) for key in state):
        return None
    bare = {key.removeprefix(prefix): value for key, value in state.items()}
    found = [arch for arch in ARCHITECTURES.values() if arch.detect(bare)]
    if len(found) != 1:
        return None
    return CheckpointError(
        f"{source}: every key starts with {prefix!r}, and without it the keys are a {found[0].title} checkpoint's; "
        f"save the tensors without that prefix (sst-cli strips only 'module.')"
    )


def detect_architecture(state: Mapping[str, torch.Tensor], source: str) -> Architecture:
    """The one architecture whose keys these are; otherwise a CheckpointError saying what the keys look like."""
    found = [arch for arch in ARCHITECTURES.values() if arch.detect(state)]
    if len(found) == 1:
        return found[0]
    if found:  # two rooms claiming one file is a bug in their detect functions
        raise CheckpointError(f"{source}: the keys fit several architectures ({', '.join(a.title for a in found)})")
    known = ", ".join(arch.title for arch in ARCHITECTURES.values())
    near = near_miss(state, source) or prefix_miss(state, source)
    if near is not None:
        raise near
    foreign = recognise(state)
    if foreign is not None:
        raise CheckpointError(
            f"{source}: this is a {foreign} checkpoint (recognised by its keys); sst-cli runs {known} networks only"
        )
    sample = ", ".join(list(state)[:4])
    raise CheckpointError(
        f"{source}: not a checkpoint of an architecture sst-cli knows ({known}); its first keys are {sample}"
    )


__all__ = [
    "ARCHITECTURES",
    "ArchConfig",
    "Architecture",
    "ModelDescriptor",
    "SRNetwork",
    "bf16_failure",
    "describe",
    "detect_architecture",
    "get_architecture",
    "near_miss",
    "network_of",
    "prefix_miss",
    "recognise",
]
