"""``weights/manifest.json``: what each zoo name and scale is (its official file name) and what is known of where
it lives. Read-only data: where a file was actually found is pinned elsewhere (``pins.py``)."""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigError, WeightsNotFound
from ..zoo import VARIANTS
from .refs import check_sha256

MANIFEST_FORMAT = 1


def weights_dir() -> Path:
    """Folder holding manifest.json and bundled weights: env override, source checkout, installed package."""
    env = os.environ.get("SST_WEIGHTS_DIR")
    if env:
        return Path(env).expanduser()
    checkout = checkout_weights(Path(__file__).resolve().parents[2])
    if checkout is not None:
        return checkout
    try:
        found: Any = resources.files("sst_cli.weights")
    except ModuleNotFoundError as exc:
        raise WeightsNotFound("cannot find the sst_cli weights folder; set SST_WEIGHTS_DIR") from exc
    if isinstance(found, Path):
        return found
    paths = getattr(found, "_paths", None)  # MultiplexedPath of a namespace package
    if paths:
        return Path(paths[0])
    return Path(str(found))


def weights_dir_remedy() -> str:
    """What mends a missing or changed file of the weights folder: a reinstall for the folder sst-cli ships; for an
    SST_WEIGHTS_DIR of the user's, whose files no reinstall brings back, the variable is named."""
    env = os.environ.get("SST_WEIGHTS_DIR")
    if env:
        return f"the folder is SST_WEIGHTS_DIR={env}: put the file back there, or unset SST_WEIGHTS_DIR"
    return "reinstall sst-cli"


@functools.cache
def checkout_weights(root: Path) -> Path | None:
    """``root/weights`` when ``root``, the folder above the package, is sst-cli's source checkout (an editable
    install), else None. Beside an installed copy ``root`` is site-packages, whose ``weights/`` belongs to
    whichever package made it: a checkout is known by its pyproject.toml naming sst-cli."""
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    named = re.search(r'^name\s*=\s*"sst-cli"', project, re.MULTILINE)
    return root / "weights" if named and (root / "weights" / "manifest.json").is_file() else None


@functools.lru_cache(maxsize=8)
def _load_manifest_at(path: Path) -> dict:
    """Parse and shape-check one manifest file (cached per path, so SST_WEIGHTS_DIR can change in tests)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"weights manifest not found at {path}: {weights_dir_remedy()}") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"weights manifest {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ConfigError(f"weights manifest {path} is not format {MANIFEST_FORMAT}")
    if not isinstance(data.get("models"), dict):
        raise ConfigError(f"weights manifest {path} lacks 'models'")
    return data


def load_manifest() -> dict:
    """The parsed manifest.json; treat it as read-only (it is cached)."""
    return _load_manifest_at(weights_dir() / "manifest.json")


def hub_owner() -> str | None:
    """The Hub user whose collections and model repositories discovery searches (``hub_owner``)."""
    return load_manifest().get("hub_owner") or None


def hub_collection() -> str | None:
    """Name of the owner's collection to search first (``hub_collection``, e.g. ``sst``)."""
    return load_manifest().get("hub_collection") or None


def release_base() -> str | None:
    """Base URL of the authors' release assets: SST_RELEASE_URL, else the manifest's ``release_url``.

    ``SST_RELEASE_URL=off`` (or ``none``, empty) disables the release fallback.
    """
    env = os.environ.get("SST_RELEASE_URL")
    base = env if env is not None else load_manifest().get("release_url")
    if not base or base.strip().lower() in ("off", "none", "0", "false"):
        return None
    return base.strip().rstrip("/")


@dataclass(frozen=True)
class Entry:
    """One model at one scale, as the manifest describes it.

    ``filename``: the official checkpoint name (None: sst-cli's own bundled weights, or a repository whose one
    checkpoint is taken whatever its name); ``repo_id``: a verified repository (None: find it by file name);
    ``on_hub`` False: published elsewhere, ``where`` is the page that links the download (on ``host``).
    """

    name: str
    scale: int
    filename: str | None = None
    repo_id: str | None = None
    revision: str | None = None
    sha256: str | None = None
    bundled: str | None = None
    on_hub: bool = True
    where: str | None = None
    host: str | None = None

    def __post_init__(self) -> None:
        check_sha256(self.sha256, f"{self.name} x{self.scale}")

    @property
    def label(self) -> str:
        return f"{self.name} x{self.scale}"

    @property
    def pull_hint(self) -> str:
        return f"sst models pull {self.name} --scale {self.scale}"

    @property
    def ours(self) -> bool:
        """sst-cli's own weights: bundled only, never downloaded (no file name, no repository)."""
        return self.filename is None and self.repo_id is None

    @property
    def what(self) -> str:
        """The file in messages: its official name, or the repository whose checkpoint it is."""
        return self.filename or f"the checkpoint of {self.repo_id}"

    @property
    def bundled_path(self) -> Path | None:
        return weights_dir() / self.bundled if self.bundled else None


def manifest_entry(name: str, scale: int) -> Entry:
    """The manifest's entry for ``name`` (case-insensitive) at ``scale``; ConfigError naming the choices."""
    models: dict = load_manifest()["models"]
    key = name.strip().lower()
    if key not in models:
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(models)}")
    raw = models[key].get(str(scale))
    if not isinstance(raw, dict):
        scales = ", ".join(sorted(models[key], key=lambda s: (len(s), s)))
        raise ConfigError(f"model {key!r} has no x{scale} weights; available scales: {scales}")
    return Entry(
        name=key,
        scale=int(scale),
        filename=raw.get("filename") or None,
        repo_id=raw.get("repo_id") or None,
        revision=raw.get("revision") or None,
        sha256=raw.get("sha256") or None,
        bundled=raw.get("bundled") or None,
        on_hub=raw.get("hub", True) is not False,
        where=raw.get("where") or None,
        host=raw.get("host") or None,
    )


def not_trained_message(entry: Entry) -> str:
    """One sentence for a bundled-only entry whose weights do not exist yet, saying how to make them."""
    key, scale = entry.name, entry.scale
    variant = VARIANTS.get(key)
    arch = variant.base if variant is not None and variant.base else key
    scales = load_manifest()["models"][key]
    shipped = [f"x{s}" for s, e in sorted(scales.items()) if isinstance(e, dict) and e.get("bundled")]
    have = f" (only {', '.join(shipped)} {'ships' if len(shipped) == 1 else 'ship'} so far)" if shipped else ""
    return (
        f"{key} x{scale} weights are not trained yet{have}: make them with `sst train --model {arch} "
        f"--scale {scale} --data DIR --iters N --out {key}_x{scale}.safetensors` and load that file with "
        f"--weights, or use the official weights with --model {arch} --scale {scale}"
    )


def off_hub_message(entry: Entry) -> str:
    """One sentence for weights that their authors publish outside the Hub: where to get them, how to pass them."""
    name = entry.filename or "the checkpoint"
    host = f"the authors' {entry.host}" if entry.host else "the authors' download"
    where = f" (linked from {entry.where})" if entry.where else ""
    return (
        f"{entry.label} weights are not on the Hugging Face Hub: download {name} from {host}{where} and pass it "
        f"with --weights {name} (or --weights hf://OWNER/REPO/{name} if you mirror it on the Hub)"
    )


def bundled_models() -> list[tuple[str, int]]:
    """(name, scale) of every zoo entry whose weights ship with sst-cli, to suggest when downloads fail."""
    found = []
    for name, scales in load_manifest()["models"].items():
        for scale, raw in scales.items():
            if isinstance(raw, dict) and raw.get("bundled") and (weights_dir() / raw["bundled"]).is_file():
                found.append((name, int(scale)))
    return found
