"""``load_model``: from a zoo name, a local file or a hub reference to a ready network, down one staircase.

source -> file (``hub``) -> state dict (``checkpoint``) -> architecture (``archs`` table) -> config -> network.
``ModelSpec`` holds what a user asked for and checks it before anything is read, so that front ends can
fail on bad options before the expensive part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from . import hub
from .archs import (
    ARCHITECTURES,
    ArchConfig,
    Architecture,
    SRNetwork,
    detect_architecture,
    get_architecture,
    near_miss,
    prefix_miss,
    recognise,
)
from .checkpoint import check_fit, load_state, read_metadata, read_weights
from .checks import option_name, option_value
from .errors import CheckpointError, ConfigError, DamagedCheckpoint, ScaleMismatch
from .hub.advice import Spelling, spoken_to
from .runtime import resolve_device
from .zoo import VARIANTS, Variant, check_hub_repo, check_model_choice, get_variant

if TYPE_CHECKING:
    from .spandrel.foreign import NotRecognised

ConfigSource = Mapping[str, Any] | str | os.PathLike[str]
CONFIG_BYTES = 1 << 20  # a config of constructor keywords is a few hundred bytes; weights are megabytes


def read_config_kwargs(config: ConfigSource) -> dict[str, Any]:
    """Constructor keywords from a mapping or a JSON file (the official option files' keys)."""
    if isinstance(config, Mapping):
        return dict(config)
    path = Path(config)
    try:
        if not path.is_file():  # a folder, a device or a pipe (``/dev/zero`` would be read without end)
            raise ConfigError(f"config {path} is not a file" if path.exists() else f"config {path} does not exist")
        size = path.stat().st_size
        if size > CONFIG_BYTES:
            raise ConfigError(f"config {path} is {size:,} bytes: not a config of keywords (weights?)")
        kwargs = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM, as Windows editors write, is fine
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {path} is not UTF-8 text (byte {exc.start}): a JSON file of keywords") from exc
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = exc if isinstance(exc, json.JSONDecodeError) else "nested too deep"
        raise ConfigError(f"config {path} is not valid JSON: {detail}") from exc
    if not isinstance(kwargs, dict):
        raise ConfigError(f"config {path} must hold a JSON object of constructor keywords")
    return kwargs


def is_zoo_name(source: str | os.PathLike[str]) -> bool:
    """A zoo name always means the zoo, whatever files the working folder holds (``./sst-l`` or a ``Path`` is a
    file of that name)."""
    return isinstance(source, str) and source.strip().lower() in VARIANTS


#: Endings of weights files: a model given as text with one of them names a file, even a missing one.
WEIGHTS_SUFFIXES = (".pth", ".pt", ".safetensors", ".ckpt", ".bin")


def names_weights(source: str) -> bool:
    """Whether a model given as text means weights, as ``load_model`` reads its source (``Upscaler("mine.pth")``
    was told "unknown model"): never a zoo name; an ``hf://`` reference, an existing file, or a name ending as
    weights files do. Other text is a zoo name, perhaps misspelt (``refuse_unknown_model``)."""
    if is_zoo_name(source):
        return False
    weights_like = source.strip().lower().endswith(WEIGHTS_SUFFIXES)
    return hub.is_hf_reference(source) or weights_like or os.path.isfile(source)


def refuse_unknown_model(source: str) -> None:
    """For text that is no zoo name and no weights (``names_weights``) but looks like a path (a folder or an
    extension in it): the zoo's "unknown model", and that no such file exists either."""
    looks_like_path = os.sep in source or "/" in source or bool(os.path.splitext(source)[1])
    if is_zoo_name(source) or not looks_like_path:
        return
    try:
        get_variant(source)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; and no weights file {source!r} exists") from None


@dataclass(frozen=True)
class Asked:
    """How the caller named what it asked for, so that advice names the same: the command line's ``--model``
    and ``--weights``, ``ModelSpec(model=..., weights=...)``, or ``load_model``'s ``variant`` and ``source``."""

    cli: bool = False
    model: str = "variant"
    weights: str = "source"

    def name(self, option: str) -> str:
        """``model``, ``weights``, ``config``, ... as this caller spells the option."""
        keyword = {"model": self.model, "weights": self.weights}.get(option, option)
        return option_name(option if self.cli else keyword, self.cli)

    def value(self, option: str, value: object) -> str:
        """``--scale 2`` / ``scale=2``: ``scale`` and ``hub_repo`` are spelt alike by every API entry."""
        return option_value(option, value, self.cli)

    @property
    def spelling(self) -> Spelling:
        """The same, for the Hub's messages (``hub.advice``)."""
        return Spelling("weights" if self.cli else self.weights, self.cli)


LOAD_MODEL = Asked()
MODEL_SPEC = Asked(model="model", weights="weights")
COMMAND_LINE = Asked(cli=True, model="model", weights="weights")


def _needs_scale(label: str, found: int, requested: int, asked: Asked) -> ConfigError:
    return ConfigError(
        f"{label}: the weights are for x{found} but x{requested} was requested; they need {asked.value('scale', found)}"
    )


def _scale_mismatch(source: str, found: object, requested: int, asked: Asked) -> ScaleMismatch:
    """The model is right and the scale asked for is not: the advice names the scale as the caller gave it (the
    architectures' own checks know tensors, not options)."""
    return ScaleMismatch(
        f"{source} holds x{found} weights but x{requested} was requested; "
        f"use {asked.value('scale', found)} or weights for x{requested}"
    )


def weights_source(weights: str | os.PathLike[str]) -> str | Path:
    """``--weights`` as ``load_model`` takes it: an ``hf://`` reference stays text, anything else is a path."""
    return weights if isinstance(weights, str) and hub.is_hf_reference(weights) else Path(weights)


@dataclass(frozen=True)
class ModelSpec:
    """What to load: a zoo ``model`` (default: the caller's), or ``weights`` (file or ``hf://``) whose
    architecture comes from ``config``, else ``model``, else the file itself; checked on construction.
    ``cli``: made from the command line's options, so that advice names ``--model`` and ``--scale 2``, not the
    keywords ``model`` and ``scale=2`` (it travels with the spec to the Upscaler that loads it)."""

    model: str | None = None
    scale: int | None = None
    weights: str | os.PathLike[str] | None = None
    config: ConfigSource | None = None
    hub_repo: str | None = None
    # set by ``fetched``: the file found, and for which weights, or zoo name, scale and repo (``_wanted``)
    fetched_file: tuple[tuple[object, ...], Path] | None = field(default=None, repr=False, compare=False)
    cli: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_model_choice(self.model, self.scale, self.weights, self.config, self.hub_repo, cli=self.cli)
        if self.config is not None and not isinstance(self.config, Mapping):
            read_config_kwargs(self.config)  # a missing or broken file is said before the weights are read

    def fetched(self, default_model: str, default_scale: int) -> ModelSpec:
        """This spec with its weights file found now (a zoo name or an ``hf://`` reference: from the cache, else
        downloaded), which ``load`` then reads without looking again. A command that loads several models one
        after another fetches them all first: a second model missing offline was found only after the first had
        run on every picture. The error is the one ``load`` gives."""
        if self._found() is not None:
            return self
        asked = COMMAND_LINE if self.cli else MODEL_SPEC
        if self.weights is not None:
            source = weights_source(self.weights)
            if not isinstance(source, str):  # a local file: nothing to fetch
                return self
            path, _ = _weights_file(source, self.scale, None, asked)
            return replace(self, fetched_file=(self._wanted(), path))
        at = replace(self, model=self.model or default_model, scale=self.scale or default_scale)
        path, _ = _weights_file(at.model or default_model, at.scale, self.hub_repo, asked)
        return replace(at, fetched_file=(at._wanted(), path))

    def _wanted(self) -> tuple[object, ...]:
        """What a fetched file is the file of: a spec copied at another scale or model must look again."""
        return (str(self.weights),) if self.weights is not None else (self.model, self.scale, self.hub_repo)

    def _found(self) -> Path | None:
        """The file ``fetched`` found for this spec as it is now, if any."""
        if self.fetched_file is None or self.fetched_file[0] != self._wanted():
            return None
        return self.fetched_file[1]

    def load(self, default_model: str, default_scale: int, *, device: torch.device, dtype: torch.dtype) -> SRNetwork:
        """The network, on ``device`` in ``dtype``; a zoo model falls back to the given defaults."""
        found, asked = self._found(), COMMAND_LINE if self.cli else MODEL_SPEC
        if self.weights is not None:
            variant = None if self.config is not None else self.model
            source = weights_source(self.weights)
            if found is not None:
                return _load_file(found, str(source), self.scale, self.config, variant, device, dtype, asked)
            return _load_source(source, self.scale, self.config, variant, device, dtype, None, asked)
        name = self.model or default_model
        scale = self.scale or default_scale
        if found is not None:
            return _load_zoo_file(found, get_variant(name), scale, self.hub_repo, device, dtype, asked)
        return _load_source(name, scale, None, None, device, dtype, self.hub_repo, asked)


def _weights_file(
    source: str | os.PathLike[str], scale: int | None, hub_repo: str | None, asked: Asked
) -> tuple[Path, Variant | None]:
    """The file of a zoo name (found on the Hub or bundled), an ``hf://`` reference or a path; the Hub's advice
    names the options as the caller spells them (``--weights PATH``, ``source='PATH'``)."""
    if is_zoo_name(source):
        variant = get_variant(str(source))
        if scale is None:
            raise ConfigError(f"pass a scale for {variant.name}: one of {', '.join(map(str, variant.scales))}")
        variant.config(scale)  # the zoo entry must exist at this scale before anything is downloaded
        with spoken_to(asked.spelling):
            return hub.resolve_pretrained(variant.name, scale, repo_id=hub_repo), variant
    if isinstance(source, str) and hub.is_hf_reference(source):
        with spoken_to(asked.spelling):
            return hub.download(hub.parse_hf_reference(source)), None
    return Path(source), None


def _fitting_variants(
    arch: Architecture, inferred: Mapping[str, Any], state: Mapping[str, torch.Tensor], source: str
) -> list[str]:
    """Official zoo variants of this architecture whose every tensor the file fits (to suggest with --model).

    A file whose hyper-parameters match variants but whose tensors fit none of them (one wrong shape, an extra
    key) raises why: it would otherwise be told it "fits sst-light" and learn the truth only once it is named.
    """
    scale = inferred.get(arch.scale_key)
    names, misfit = [], None
    for name, variant in VARIANTS.items():
        if variant.arch != arch.name or not variant.official or scale not in variant.scales:
            continue
        try:
            arch.compare(inferred, variant.config(scale), source)
        except (CheckpointError, ConfigError):
            continue  # another size: a custom file passes --config
        try:
            with torch.device("meta"):
                check_fit(arch.build(variant.config(scale)), state, source)
        except CheckpointError as exc:
            misfit = misfit or (name, exc)
            continue
        names.append(name)
    if not names and misfit is not None:
        raise CheckpointError(f"{misfit[1]} (its sizes are {misfit[0]}'s, but not every tensor fits)")
    return names


def _stored_config(
    arch: Architecture, metadata: Mapping[str, str], inferred: Mapping[str, Any], source: str
) -> ArchConfig | None:
    """The keywords sst-cli stores in the safetensors files it writes (``<arch>_config``), if present; refused when
    their scale contradicts the tensors' (``inferred``)."""
    text = metadata.get(arch.config_key)
    if text is None:
        return None
    try:
        kwargs = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"{source}: invalid {arch.config_key} metadata: {exc}") from exc
    if not isinstance(kwargs, dict):
        kinds = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
        kind = kinds.get(type(kwargs), "a number")
        raise CheckpointError(f"{source}: invalid {arch.config_key} metadata: {kind}, not an object of keywords")
    try:
        stored = arch.make_config(kwargs)
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{source}: invalid {arch.config_key} metadata: {exc}") from exc
    found = inferred.get(arch.scale_key)
    if found is not None and found != stored.scale:  # checked as a request, it gave circular --scale advice
        raise CheckpointError(
            f"{source}: its {arch.config_key} metadata says x{stored.scale} but its tensors are x{found} weights "
            "(an inconsistent file)"
        )
    return stored


def declared_scale(path: str | os.PathLike[str]) -> int | None:
    """The scale a weights file's own metadata declares (any architecture's ``<arch>_config``), read without its
    tensors, so that several files can be checked against each other before any is loaded; None when it declares
    none."""
    metadata = read_metadata(path)
    for arch in ARCHITECTURES.values():
        try:
            factor = json.loads(metadata.get(arch.config_key) or "{}").get(arch.scale_key)
        except (ValueError, AttributeError):  # damaged metadata: the load says so, with the file's name
            continue
        if isinstance(factor, int) and not isinstance(factor, bool):
            return factor
    return None


def _choose_config(
    arch: Architecture,
    state: Mapping[str, torch.Tensor],
    inferred: Mapping[str, Any],
    complete: bool,
    metadata: Mapping[str, str],
    source: str,
    scale: int | None,
    config: ConfigSource | None,
    variant: str | None,
    asked: Asked,
) -> ArchConfig:
    """Precedence: an explicit config, a zoo variant, the config stored in the file, then the tensors alone."""
    if config is not None:
        kwargs = read_config_kwargs(config)
        if arch.scale_key not in kwargs:  # a config that leaves the scale open: --scale, else the weights' own
            found = scale if scale is not None else inferred.get(arch.scale_key)
            kwargs = kwargs if found is None else {**kwargs, arch.scale_key: int(found)}
        try:
            cfg = arch.make_config(kwargs)
        except (TypeError, ValueError, ConfigError) as exc:
            where = "" if isinstance(config, Mapping) else f"config {config}: "
            raise ConfigError(f"{where}{exc}") from exc
    elif variant is not None:
        chosen = get_variant(variant)
        if chosen.arch != arch.name:
            raise CheckpointError(
                f"{source} holds {arch.title} weights, but {chosen.name} is a {get_architecture(chosen.arch).title} "
                f"model: drop {asked.name('model')}, or name a {arch.title} model"
            )
        found = int(inferred[arch.scale_key])
        if scale is None and found not in chosen.scales:  # the file's scale, not one the user asked for
            at = " / ".join(f"x{s}" for s in chosen.scales)
            raise CheckpointError(f"{source} holds x{found} weights, and {chosen.name} exists at {at} only")
        cfg = chosen.config(scale if scale is not None else found)
        stored = _stored_config(arch, metadata, inferred, source)
        if stored is not None and stored != cfg:  # the file says how it was built: another build gives other pixels
            if stored.scale != cfg.scale and stored.scale in chosen.scales and chosen.config(stored.scale) == stored:
                raise _scale_mismatch(source, stored.scale, cfg.scale, asked)  # dropping --model won't do
            key, mine, theirs = _first_difference(stored, cfg)
            raise ConfigError(
                f"{source} records the architecture it was trained with, and {chosen.name} differs ({key}: "
                f"{mine} in the file, {theirs} in {chosen.name}): drop {asked.name('model')}"
            )
        return cfg
    else:
        stored = _stored_config(arch, metadata, inferred, source)
        if stored is not None:
            cfg = stored
        elif complete:
            try:
                cfg = arch.make_config(inferred)
            except (ValueError, TypeError) as exc:  # ConfigError too: the file, not an option, is at fault
                raise CheckpointError(f"{source}: its tensors describe no valid {arch.title} network: {exc}") from None
        else:
            matches = _fitting_variants(arch, inferred, state, source)
            hint = f"it fits {' or '.join(matches)}" if matches else "see `sst models`"
            raise ConfigError(
                f"{source}: {arch.undetermined or 'the architecture'} cannot be read from the {arch.title} weights; "
                f"name the architecture with {asked.name('model')} ({hint}) or pass {asked.name('config')} with the "
                "constructor keywords"
            )
    if scale is not None and scale != cfg.scale:
        raise _needs_scale(source, cfg.scale, scale, asked)
    return cfg


def _first_difference(stored: ArchConfig, chosen: ArchConfig) -> tuple[str, Any, Any]:
    """The first keyword where two configs of one architecture differ, with both values."""
    have, want = stored.to_kwargs(), chosen.to_kwargs()
    key = next((k for k in [*have, *want] if have.get(k) != want.get(k)), "?")
    return key, have.get(key), want.get(key)


def any_architecture(state: Mapping[str, torch.Tensor]) -> bool:
    """Whether one of sst-cli's own architectures claims these keys."""
    return any(arch.detect(state) for arch in ARCHITECTURES.values())


def _foreign_hint(asked: Asked) -> str:
    from .spandrel import foreign as spandrel

    if spandrel.available():
        return f"without {asked.name('model')} and {asked.name('config')}, spandrel may run it"
    return f"installing spandrel ({spandrel.INSTALL_HINT}) may help: it runs about 40 more architectures"


def _with_foreign_hint(
    exc: CheckpointError, state: Mapping[str, torch.Tensor], source: str, asked: Asked
) -> CheckpointError:
    """``exc`` plus what spandrel would add, unless the file is one of sst-cli's own, damaged (a near miss)."""
    if near_miss(state, source) is not None or prefix_miss(state, source) is not None:
        return exc
    return CheckpointError(f"{exc}; {_foreign_hint(asked)}")


def _load_foreign(state: Mapping[str, torch.Tensor], source: str, asked: Asked) -> SRNetwork:
    """A checkpoint none of sst-cli's architectures claims: through spandrel when it is installed, else
    sst-cli's own explanation plus what installing spandrel would add."""
    from .spandrel import foreign as spandrel

    if spandrel.available():
        try:
            return spandrel.load_foreign(state, source)
        except spandrel.NotRecognised as refused:
            _refuse_unrecognised(state, source, refused)
    try:
        detect_architecture(state, source)
    except CheckpointError as exc:
        raise _with_foreign_hint(exc, state, source, asked) from None
    raise AssertionError("detect_architecture accepted keys no architecture claims")  # pragma: no cover


def _refuse_unrecognised(state: Mapping[str, torch.Tensor], source: str, refused: NotRecognised) -> NoReturn:
    """Neither sst-cli nor spandrel loads the file: sst-cli's own explanation first when it has a specific one
    (a near miss of its own architectures; an architecture its table names), else spandrel's nearest."""
    near = near_miss(state, source) or prefix_miss(state, source)  # "looks like a DAT checkpoint but lacks ..."
    if near is not None:
        raise near
    name = recognise(state)
    if name is None:
        raise refused
    nearest = f"; spandrel's nearest architecture is {refused.nearest}" if refused.nearest else ""
    raise CheckpointError(
        f"{source}: this is a {name} checkpoint (recognised by its keys), but neither sst-cli nor spandrel can "
        f"load it{nearest}"
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
    cli: bool = False,
) -> SRNetwork:
    """An eval-mode network with weights, mapping NCHW RGB in [0, 1] to NCHW RGB ``scale`` times larger.

    ``source`` is a zoo name (pretrained weights: bundled, or from the hub via the manifest), a
    ``.pth``/``.pt``/``.safetensors`` path, or ``hf://OWNER/REPO/PATH[@REVISION]``. The architecture is
    recognised from the keys; its configuration comes from ``config`` (kwargs or JSON path), else ``variant``
    (a zoo name), else the zoo name of ``source``, else the config stored by sst-cli in a safetensors file,
    else the tensors alone when they determine it (never guessed: SST's window sizes are in no tensor). A file
    none of sst-cli's architectures claims is loaded by spandrel when it is installed (``sst_cli.spandrel``).
    ``device``: a name (``"cuda:1"``, ``"auto"``) or a ``torch.device``; one PyTorch cannot use here is a
    ConfigError, as for ``Upscaler``. ``cli``: advice names the command line's options (``--model``,
    ``--scale 2``, ``--device cpu``), not these keywords.
    """
    asked = COMMAND_LINE if cli else LOAD_MODEL
    check_hub_repo(hub_repo, cli=cli)
    resolved = resolve_device(device, cli=cli)  # a device PyTorch cannot use is said before any file is read
    return _load_source(source, scale, config, variant, resolved, dtype, hub_repo, asked)


def _load_source(
    source: str | os.PathLike[str],
    scale: int | None,
    config: ConfigSource | None,
    variant: str | None,
    device: str | torch.device,
    dtype: torch.dtype,
    hub_repo: str | None,
    asked: Asked,
) -> SRNetwork:
    path, zoo_variant = _weights_file(source, scale, hub_repo, asked)
    if zoo_variant is None:
        return _load_file(path, str(source), scale, config, variant, device, dtype, asked)
    return _load_zoo_file(path, zoo_variant, scale, hub_repo, device, dtype, asked)


def _load_zoo_file(
    path: Path,
    zoo_variant: Variant,
    scale: int | None,
    hub_repo: str | None,
    device: str | torch.device,
    dtype: torch.dtype,
    asked: Asked,
) -> SRNetwork:
    """The network in the file found for a zoo name; a file that proves not to hold it is forgotten (unpinned,
    removed from the cache) so that the next run looks for it again."""
    label = f"the {zoo_variant.name} x{scale} weights file ({path})"
    try:
        return _load_file(path, label, scale, None, zoo_variant.name, device, dtype, asked)
    except (CheckpointError, ConfigError) as exc:
        if hub.manifest_entry(zoo_variant.name, int(scale or 0)).bundled and hub_repo is None:
            raise
        fate = hub.forget(zoo_variant.name, int(scale or 0), repo_id=hub_repo)  # the next run looks again
        problem = str(exc).split("; ", 1)[0]  # its advice (--scale, another file) is for a file the user chose
        if isinstance(exc, DamagedCheckpoint):  # damaged in the cache: the repository is not to blame
            pull = hub.manifest_entry(zoo_variant.name, int(scale or 0)).pull_hint
            pull += f" --hub-repo {hub_repo}" if hub_repo else ""
            raise DamagedCheckpoint(
                f"{problem} (the file found for {zoo_variant.name} x{scale} {fate or 'is no longer pinned'}: the next "
                f"run downloads it again, or `{pull}` does now)"
            ) from None
        variable = None if hub_repo is not None else os.environ.get("SST_HUB_REPO")
        if hub_repo is None and not variable:
            gone = f"{fate} and is no longer pinned" if fate else "is no longer pinned"
            instead = f"{asked.value('hub_repo', 'OWNER/REPO')} for a repository that holds them"
        else:  # a file of --hub-repo (or SST_HUB_REPO) is never pinned, and the repository was named already
            gone = fate or "is not used"
            instead = f"another {asked.name('hub_repo') if hub_repo else 'SST_HUB_REPO'} than {hub_repo or variable}"
        weights = asked.name("weights")
        right_file = f"{weights} with the right file" if asked.cli else f"the right file as {weights}"
        raise CheckpointError(
            f"{problem} (the file found for {zoo_variant.name} x{scale} does not hold them and {gone}: pass "
            f"{right_file}, or {instead})"
        ) from None


def _infer(arch: Architecture, state: Mapping[str, torch.Tensor], label: str) -> tuple[dict[str, Any], bool]:
    """``arch.infer``, its refusals naming the file: a room reads tensors, and knows no file names."""
    try:
        return arch.infer(state)
    except CheckpointError as exc:
        raise type(exc)(f"{label}: {exc}") from None


def _load_file(
    path: Path,
    label: str,
    scale: int | None,
    config: ConfigSource | None,
    variant: str | None,
    device: str | torch.device,
    dtype: torch.dtype,
    asked: Asked,
) -> SRNetwork:
    """The network in ``path`` (``label`` names it in messages, ``asked`` the options in advice); see
    ``load_model``."""
    state, metadata = read_weights(path)
    if config is None and variant is None and not any_architecture(state):
        foreign = _load_foreign(state, label, asked)
        if scale is not None and scale != foreign.scale:
            raise _needs_scale(label, foreign.scale, scale, asked)
        return foreign.to(device=device, dtype=dtype).eval()
    try:
        arch = detect_architecture(state, label)
    except CheckpointError as exc:  # only --model / --config bring another architecture's file here
        raise _with_foreign_hint(exc, state, label, asked) from None
    inferred, complete = _infer(arch, state, label)
    cfg = _choose_config(arch, state, inferred, complete, metadata, label, scale, config, variant, asked)
    try:
        arch.compare(inferred, cfg, label)
    except ScaleMismatch:  # the architecture says the scales differ; the advice names the caller's option
        raise _scale_mismatch(label, inferred.get(arch.scale_key), cfg.scale, asked) from None
    with torch.device("meta"):
        model = arch.build(cfg)
    load_state(model, state, label)  # meta parameters are replaced by the file's tensors
    return model.to(device=device, dtype=dtype).eval()
