"""SST and SSTReal as spandrel architectures, so spandrel-based applications (chaiNNer, ComfyUI, ...) load
the authors' checkpoints with ``spandrel.ModelLoader().load_from_file(...)``.

An application calls ``sst_cli.spandrel.install()`` once (spandrel has no plugin discovery; this mirrors
``spandrel_extra_arches.install``). Detection and loading are sst-cli's own (``archs`` rooms), the same code
``sst upscale --weights`` runs. Window sizes are in no tensor, so a file's windows come from, in order:
the ``configs`` given to ``install`` (constructor keywords, or JSON option files; the first that fits the
tensors wins), the official zoo variant whose shapes the tensors fit. A ``+`` variant has exactly the
shapes of its base, so an unnamed ``+`` file loads with its base's windows unless its config is given; the
descriptor's tags always say which windows were used and whether they were assumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import spandrel
import torch
from spandrel import ArchSupport, ImageModelDescriptor, ModelTiling, SizeRequirements

from ..archs import ARCHITECTURES, ArchConfig
from ..archs import Architecture as Room
from ..checkpoint import load_state
from ..errors import CheckpointError, ConfigError
from ..loader import ConfigSource, read_config_kwargs
from ..zoo import VARIANTS

ROOMS = ("sst", "sstreal")  # the rooms registered; DAT is spandrel's own already


def _zoo_match(room: Room, inferred: Mapping[str, Any]) -> tuple[ArchConfig, str] | None:
    """The first official zoo variant whose shapes the tensors fit, and its name."""
    scale = inferred.get(room.scale_key)
    for name, variant in VARIANTS.items():
        if variant.arch != room.name or not variant.official or scale not in variant.scales:
            continue
        config = variant.config(scale)
        try:
            room.compare(inferred, config, "")
        except (CheckpointError, ConfigError):
            continue
        return config, name
    return None


def choose_config(
    room: Room, state: Mapping[str, torch.Tensor], configs: Sequence[ConfigSource]
) -> tuple[ArchConfig, str]:
    """The config for these tensors and how it was chosen (a tag)."""
    inferred, complete = room.infer(state)
    for source in configs:
        try:
            config = room.make_config(read_config_kwargs(source))
            room.compare(inferred, config, "")
        except (CheckpointError, ConfigError, TypeError):
            continue
        return config, "config given to install()"
    if complete:
        return room.make_config(inferred), "read from the tensors"
    match = _zoo_match(room, inferred)
    if match is not None:
        return match[0], f"{room.undetermined} of {match[1]} (assumed: not in the tensors)"
    raise ValueError(
        f"an {room.title} checkpoint whose {room.undetermined} are in no tensor and match no official variant: "
        "pass its constructor keywords with sst_cli.spandrel.install(configs=[...])"
    )


class SstArchitecture(spandrel.Architecture[torch.nn.Module]):
    """One sst-cli room (SST or SSTReal) behind spandrel's ``Architecture`` interface."""

    def __init__(self, room: Room, configs: Sequence[ConfigSource] = ()) -> None:
        super().__init__(id=room.title, name=room.title, detect=room.detect)
        self.room = room
        self.configs = tuple(configs)

    def load(self, state_dict: spandrel.StateDict) -> ImageModelDescriptor[torch.nn.Module]:
        state = {k: v for k, v in state_dict.items() if isinstance(v, torch.Tensor)}
        config, how = choose_config(self.room, state, self.configs)
        with torch.device("meta"):
            model = self.room.build(config)
        load_state(model, state, f"{self.room.title} state dict")
        model.eval()
        about = model.describe()
        kwargs = config.to_kwargs()
        tags = [f"{k}={v}" for k, v in kwargs.items() if k in ("dim", "window_sizes", "n_blocks", "num_blocks")]
        return ImageModelDescriptor(
            model,
            state_dict,
            architecture=self,
            purpose="SR",
            tags=[*tags, how],
            supports_half=False,  # not validated in float16; bfloat16 is (descriptor.bf16_safe)
            supports_bfloat16=about.bf16_safe,
            scale=about.scale,
            input_channels=3,
            output_channels=3,
            size_requirements=SizeRequirements(),  # the networks pad any size themselves
            tiling=ModelTiling.SUPPORTED,
        )


def install(
    registry: spandrel.ArchRegistry | None = None,
    *,
    configs: Sequence[ConfigSource] = (),
    ignore_duplicates: bool = True,
) -> list[ArchSupport]:
    """Add SST and SSTReal to ``registry`` (default: spandrel's ``MAIN_REGISTRY``), detected before every
    architecture already there; ``configs``: constructor keywords for files whose windows no zoo variant
    gives. Calling it again is harmless (``ignore_duplicates``). Returns what was added."""
    registry = spandrel.MAIN_REGISTRY if registry is None else registry
    before = tuple(support.architecture.id for support in registry.architectures())
    supports = [
        ArchSupport.from_architecture(SstArchitecture(ARCHITECTURES[name], configs), before=before) for name in ROOMS
    ]
    return registry.add(*supports, ignore_duplicates=ignore_duplicates)
