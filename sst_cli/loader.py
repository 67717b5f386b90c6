"""``load_model``: from a zoo name, a local file or a hub reference to a ready network."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from . import hub
from .archs.sst import SST, SSTConfig
from .checkpoint import compare_architecture, infer_architecture, load_state, read_weights
from .errors import ConfigError
from .zoo import VARIANTS, check_scale, get_variant, list_models

ConfigSource = Mapping[str, Any] | str | os.PathLike[str]


def read_config(config: ConfigSource) -> SSTConfig:
    """Constructor kwargs from a mapping or a JSON file, as in the official option files."""
    if isinstance(config, Mapping):
        return SSTConfig.from_kwargs(config)
    path = Path(config)
    try:
        kwargs = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config {path} is not valid JSON: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise ConfigError(f"config {path} must hold a JSON object of SST constructor keywords")
    try:
        return SSTConfig.from_kwargs(kwargs)
    except TypeError as exc:
        raise ConfigError(f"config {path}: {exc}") from exc


def is_zoo_name(source: str | os.PathLike[str]) -> bool:
    return isinstance(source, str) and source.strip().lower() in VARIANTS and not Path(source).exists()


def _matching_variants(arch: Mapping[str, Any]) -> list[str]:
    """Official variants the tensors fit (entries reusing an official architecture would only repeat them)."""
    names = []
    for name, variant in VARIANTS.items():
        if not variant.official:
            continue
        cfg = variant.config(arch["upscaling_factor"]) if arch["upscaling_factor"] in (2, 3, 4) else None
        if cfg is None:
            continue
        try:
            compare_architecture(arch, cfg, "")
        except ValueError:
            continue
        names.append(name)
    return names


def _choose_config(
    arch: Mapping[str, Any],
    source: str,
    scale: int | None,
    config: ConfigSource | None,
    variant: str | None,
    stored: SSTConfig | None,
) -> SSTConfig:
    if config is not None:
        cfg = read_config(config)
        if scale is not None and scale != cfg.scale:
            raise ConfigError(f"the config is for x{cfg.scale} but x{scale} was requested")
        return cfg
    if variant is not None:
        return get_variant(variant).config(scale if scale is not None else arch["upscaling_factor"])
    if stored is not None:
        return stored
    matches = _matching_variants(arch)
    official = ", ".join(list_models(official_only=True))
    hint = f"it fits {' or '.join(matches)}" if matches else f"zoo models: {official}"
    raise ConfigError(
        f"{source}: window sizes cannot be read from the weights; name the architecture with --model ({hint}) "
        "or pass --config with the constructor keywords"
    )


def load_model(
    source: str | os.PathLike[str],
    scale: int | None = None,
    *,
    config: ConfigSource | None = None,
    variant: str | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    hub_repo: str | None = None,
) -> SST:
    """An eval-mode SST with weights, mapping NCHW RGB in [0, 1] to NCHW RGB.

    ``source`` is a zoo name (pretrained weights: bundled, or from the hub via the manifest), a
    ``.pth``/``.pt``/``.safetensors`` path, or ``hf://OWNER/REPO/PATH[@REVISION]``. The architecture
    comes from ``config`` (kwargs or JSON path), else ``variant`` (a zoo name), else the zoo name of
    ``source``, else the config stored in a safetensors file by sst-cli; window sizes are never guessed.
    """
    if is_zoo_name(source):
        name = str(source).strip().lower()
        if scale is None:
            raise ConfigError(f"pass a scale for {name}: one of 2, 3, 4")
        check_scale(scale)
        path = hub.resolve_pretrained(name, scale, repo_id=hub_repo)
        variant = variant or name
    elif isinstance(source, str) and hub.is_hf_reference(source):
        path = hub.download(hub.parse_hf_reference(source))
    else:
        path = Path(source)
    state, stored = read_weights(path)
    arch = infer_architecture(state)
    cfg = _choose_config(arch, str(source), scale, config, variant, stored)
    compare_architecture(arch, cfg, str(source))
    with torch.device("meta"):
        model = SST(**cfg.to_kwargs())
    load_state(model, state, str(source))  # meta parameters are replaced by the file's tensors
    return model.to(device=device, dtype=dtype).eval()
