"""What a weights file holds, as ``sst models info FILE`` says it: architecture, scale, parameters, purpose,
which library runs it, what the engine learnt from the model's descriptor, and the record ``sst train`` keeps
in the files it writes (how long, on what, from what). The record is read without torch (``models info NAME``
shows it for bundled files and answers at once)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from . import hub

if TYPE_CHECKING:
    from .loader import ConfigSource


def about_file(
    path: str | os.PathLike[str], variant: str | None = None, config: ConfigSource | None = None, *, cli: bool = False
) -> dict[str, object]:
    """Facts about the model in ``path`` (loaded on the CPU, into ``variant``'s architecture, or built from
    ``config``'s constructor keywords, when given). An ``hf://`` reference is downloaded into the Hugging Face
    cache first, unless it is there already. ``cli``: advice names ``--model`` and ``--config`` (``load_model``)."""
    from .archs import describe, network_of
    from .checkpoint import read_metadata
    from .loader import load_model, weights_source

    source = weights_source(path)
    local = hub.download(hub.parse_hf_reference(source), rehash=True) if isinstance(source, str) else source
    model = load_model(local, variant=variant, config=config, cli=cli)
    d = describe(model)
    facts: dict[str, object] = {
        "file": local,
        "sha256": hub.sha256_of(local),
        "architecture": d.architecture,
        "scale": f"x{d.scale}",
        "parameters": f"{d.parameters:,}",
        "purpose": "SR" if d.scale > 1 else "Restoration",
        "library": "sst-cli",
    }
    to_kwargs = getattr(getattr(network_of(model), "config", None), "to_kwargs", None)  # sst-cli's architectures
    if to_kwargs is not None:  # as JSON, ready for --config (split sizes, windows ... are in no line above)
        facts["config"] = json.dumps(to_kwargs(), separators=(", ", ": "))
    extra = getattr(model, "facts", None)  # models loaded through spandrel say more (sst_cli.spandrel)
    if extra is not None:
        facts |= {
            "purpose": extra.purpose,
            "library": extra.library,
            "tags": ", ".join(extra.tags) or "-",
            "channels": f"{extra.input_channels} in, {extra.output_channels} out",
            "size requirements": extra.size_requirements,
            "precisions": "fp32"
            + (", bf16" if extra.supports_bf16 else "")
            + (", fp16" if extra.supports_fp16 else ""),
            "tiling (spandrel)": extra.tiling,
        }
    exact = f"{d.exact_context} px (measured)" if d.exact_context is not None else "none (tiles are blended)"
    facts |= {
        "tile alignment": f"{d.size_multiple} px",
        "exact context": exact,
        "default context": f"{d.default_context} px",
    }
    if d.seam_note:
        facts["seams"] = d.seam_note
    metadata = read_metadata(local)
    if metadata.get("variant") not in (None, "", "custom"):
        facts["variant"] = metadata["variant"]
    return facts | training_record(metadata)


def header_record(path: str | os.PathLike[str]) -> dict[str, str]:
    """``training_record`` of a safetensors file, from its header alone (no torch); empty for other files."""
    if Path(path).suffix.lower() != ".safetensors":
        return {}
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), framework="numpy") as f:
            return training_record(f.metadata() or {})
    except (SafetensorError, OSError):
        return {}


def training_record(metadata: Mapping[str, str]) -> dict[str, str]:
    """The training record ``sst train`` writes into a weights file's metadata, a few short lines: who trained
    it and for how long, on what data, from what weights, with which settings, and the file's own ``source``
    line (bundled weights say there what they are). Empty for files without one."""
    record: dict[str, str] = {}
    if metadata.get("trained_by"):
        stretches = _stretches(metadata)
        varying = [key for key in STRETCH_LABELS if len({json.dumps(s.get(key)) for s in stretches}) > 1]
        record["trained"] = _trained(metadata)
        if metadata.get("data"):
            record["data"] = _data(metadata, stretches if "data" in varying else [])
        if metadata.get("init"):
            record["init"] = metadata["init"]
        recipe = _recipe(metadata, varying)
        if recipe:
            record["recipe"] = recipe
        if stretches:
            record["history"] = _history(stretches, varying or ["data"])
    if metadata.get("source"):
        record["source"] = metadata["source"]
    return record


def _trained(metadata: Mapping[str, str]) -> str:
    """``by sst-cli 0.1.0: 300 of 400 planned iterations, 62 min on cpu``; ``... iterations after its init`` where
    the run started from other weights (the figures are this run's, not the weights' whole history)."""
    by = " ".join(filter(None, (metadata["trained_by"], metadata.get("sst_cli_version"))))
    done, planned = metadata.get("iterations"), metadata.get("planned_iterations")
    parts = []
    if done:
        counted = f"{done} of {planned} planned iterations" if planned and planned != done else f"{done} iterations"
        parts.append(counted + (" after its init" if metadata.get("init") else ""))
    seconds = metadata.get("seconds", "")
    if seconds.isdigit():
        parts.append(_duration(int(seconds)) + (f" on {metadata['device']}" if metadata.get("device") else ""))
    return f"by {by}" + (": " + ", ".join(parts) if parts else "")


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds / 60:.0f} min" if seconds < 10 * 3600 else f"{seconds / 3600:.1f} h"


def _data(metadata: Mapping[str, str], stretches: list[dict[str, object]]) -> str:
    """The data named, and how many of its images were large enough to train on (in the last stretch: the only
    one whose count is kept, when the data changed between ``stretches``)."""
    images = metadata.get("images")
    if not stretches:
        return metadata["data"] + (f"; {images} images used" if images else "")
    named = ", then ".join(dict.fromkeys(_value("data", s.get("data")) for s in stretches))
    return named + (f"; {images} images used from {metadata['data']}" if images else "")


# The settings a stretch of a resumed run records, as the record words them ("on" precedes the device).
STRETCH_LABELS = {"data": "data", "batch": "batch", "patch": "LR patch", "lr": "lr", "warmup": "warm-up",
                  "ema_decay": "EMA", "precision": "", "device": "on"}  # fmt: skip


def _stretches(metadata: Mapping[str, str]) -> list[dict[str, object]]:
    """The stretches of a run resumed with other settings (``history``: iterations first..last and their settings);
    empty for a run of one stretch, a file of an older sst-cli, or a ``history`` that is not such a list."""
    try:
        stretches = json.loads(metadata.get("history", "[]"))
    except ValueError:
        return []
    valid = isinstance(stretches, list) and all(
        isinstance(s, dict) and isinstance(s.get("iterations"), list) and len(s["iterations"]) == 2 for s in stretches
    )
    return stretches if valid else []


def _history(stretches: list[dict[str, object]], keys: list[str]) -> str:
    """``iterations 1-4: data train, batch 1, lr 0.0005; 5: data ds/HR, batch 2, lr 0.001``: which settings (those
    that differ between stretches) made which iterations."""
    parts = []
    for s in stretches:
        first, last = cast(list[int], s["iterations"])
        span = f"{first}-{last}" if first != last else f"{first}"
        said = ", ".join(" ".join(filter(None, (STRETCH_LABELS[key], _value(key, s.get(key))))) for key in keys)
        parts.append(f"{span}: {said}")
    return "iterations " + "; ".join(parts)


def _value(key: str, value: object) -> str:
    """A stretch's setting as words: the data's folders joined with " + " (commas part the settings)."""
    if key == "data" and isinstance(value, list):
        return " + ".join(map(str, value))
    return str(value)


def _recipe(metadata: Mapping[str, str], varying: list[str]) -> str:
    """Batch, patch, lr, warm-up, EMA, seed and precision, from ``training_settings`` (or the flat keys); those
    that ``varying`` names differ between the run's stretches and are said in its history instead."""
    try:
        settings = json.loads(metadata.get("training_settings", "{}"))
    except ValueError:
        settings = {}
    if not isinstance(settings, dict):
        settings = {}
    keys = [key for key in ("batch", "patch", "lr", "warmup", "ema_decay") if key not in varying]
    value = {key: settings.get(key, metadata.get(key)) for key in keys}
    parts = [f"{STRETCH_LABELS[key]} {v}" for key, v in value.items() if v not in (None, "")]
    parts += [f"seed {settings['seed']}"] if "seed" in settings else []
    parts += [str(settings["precision"])] if settings.get("precision") and "precision" not in varying else []
    return ", ".join(parts)
