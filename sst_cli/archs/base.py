"""What every architecture room provides, so that the engine never branches on the architecture.

A room (``archs/sst``, ``archs/dat``, ...) exports one ``Architecture``: how to recognise its checkpoints
(``detect``), what the tensors say about the constructor keywords (``infer``), how to validate keywords into
its config (``make_config``) and how to build the network (``build``). Its network subclasses ``SRNetwork``
and describes itself with a ``ModelDescriptor``: the tiler, the Upscaler, eval and bench read that and
nothing else. A third architecture is one new room plus one line in ``archs.ARCHITECTURES``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import torch
from torch import nn

from ..errors import CheckpointError, ConfigError, ScaleMismatch

StateDict = Mapping[str, torch.Tensor]


class ArchConfig(Protocol):
    """A room's validated constructor keywords (a frozen dataclass in practice)."""

    @property
    def scale(self) -> int: ...

    def to_kwargs(self) -> dict[str, Any]: ...


K = TypeVar("K", bound="OfficialKeywords")


class OfficialKeywords:
    """Base of the rooms' configs (frozen dataclasses of the authors' constructor keywords): built from an
    option file's keywords with unknown ones refused by name, and written back as JSON-friendly keywords."""

    title: ClassVar[str] = "model"  # in messages: "unknown SST config key(s)"

    @classmethod
    def unknown_hint(cls, unknown: Sequence[str]) -> str:
        """More to say about these unknown keys (a room whose option files hold non-JSON values)."""
        return ""

    @classmethod
    def from_kwargs(cls: type[K], kwargs: Mapping[str, Any]) -> K:
        """Build from the official constructor keywords, refusing unknown keys by name."""
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # subclasses are dataclasses
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(
                f"unknown {cls.title} config key(s): {', '.join(unknown)}{cls.unknown_hint(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        hints = typing.get_type_hints(cls)
        for key, value in kwargs.items():
            wanted = _kind(hints.get(key))
            if wanted is not None and not _fits(value, wanted):
                raise ConfigError(f"{cls.title} config key {key}: expected {_describe_kind(wanted)}, got {value!r}")
        return cls(**dict(kwargs))

    def to_kwargs(self) -> dict[str, Any]:
        """JSON-friendly keywords, as in the official option files (lists, not tuples)."""
        pairs = dataclasses.asdict(self).items()  # type: ignore[call-overload]  # subclasses are dataclasses
        return {k: list(v) if isinstance(v, tuple) else v for k, v in pairs}


_SCALARS: dict[Any, tuple[type, ...]] = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def _kind(hint: Any) -> tuple[str, Any] | None:
    """("one", T) for a scalar field, ("many", T) for ``tuple[T, ...]``; None for types not checked here."""
    if hint in _SCALARS:
        return "one", hint
    if typing.get_origin(hint) is tuple and typing.get_args(hint)[1:] == (Ellipsis,):
        item = typing.get_args(hint)[0]
        return ("many", item) if item in _SCALARS else None
    return None


def _fits(value: Any, kind: tuple[str, Any]) -> bool:
    def one(v: Any, t: Any) -> bool:
        return isinstance(v, _SCALARS[t]) and (t is bool or not isinstance(v, bool))

    many, item = kind[0] == "many", kind[1]
    if many and isinstance(value, (list, tuple)):
        return all(one(v, item) for v in value)
    return one(value, item)  # per-layer keys also take one value for every layer (num_heads: 6)


def _describe_kind(kind: tuple[str, Any]) -> str:
    name = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[kind[1]]
    return f"{name} or a list of {name.split(' ', 1)[1]}s" if kind[0] == "many" else name


def tensor_shape(state: StateDict, key: str, ndim: int, title: str) -> torch.Size:
    """The shape of ``state[key]``, which the network holds with ``ndim`` dimensions, for a room's inference.

    A tensor missing, of another number of dimensions or empty is refused by name: inference reads sizes from
    the shape, and an ``IndexError`` or a width of 0 (an "x0" model) said nothing of the file.
    """
    if key not in state:
        raise CheckpointError(f"an incomplete {title} checkpoint: key {key!r} is missing")
    shape = state[key].shape
    if len(shape) != ndim:
        raise CheckpointError(f"{key} has the shape {tuple(shape)}: {len(shape)}-D, where {title}'s is {ndim}-D")
    if 0 in shape:
        raise CheckpointError(f"{key} is empty {tuple(shape)}")
    return shape


@dataclass(frozen=True)
class ModelDescriptor:
    """What a network says about itself.

    ``size_multiple``: tiles whose origins are multiples of it see the same window grid as the whole image
    (1 = any origin). ``exact_context``: LR pixels of context beyond a tile edge that make tiled output equal
    whole-image output (None: unknown, tiles are blended instead). ``default_context``: the context used
    when the user asks for none. ``attention_head_sizes``: (q/k, v) channels per head reaching the shared
    attention kernels, for planning and describing them, or (q/k, v, rank) where the last ``rank`` q/k
    channels are factors shared by every window (``plan_attention(..., rank=)``). ``bf16_safe``: whether
    bfloat16 inference keeps its output close to fp32. ``position_dependent``: the output depends on where
    the input lies in the whole image (SSTReal's noise is keyed by position), so the tiler tells the network
    each tile's origin through ``SRNetwork.at_tile_origins``. ``settings``: the runtime knobs
    ``SRNetwork.configure`` accepts. ``seam_note``: what is known (measured) about the seams of a network whose
    tiles cannot be exact, said when such a network is tiled.
    """

    architecture: str
    scale: int
    size_multiple: int = 1
    exact_context: int | None = None
    default_context: int = 16
    attention_head_sizes: tuple[tuple[int, ...], ...] = ()
    bf16_safe: bool = True
    parameters: int = 0
    notes: tuple[str, ...] = field(default=())
    position_dependent: bool = False
    settings: tuple[str, ...] = ()
    seam_note: str = ""


NO_BF16 = "models do not support bf16"  # after the architecture's name, in the refusal


class SRNetwork(nn.Module):
    """Base class of every network: NCHW RGB in [0, 1] to NCHW RGB ``scale`` times larger, any input size."""

    attention_backend: str = "auto"
    channels_last: bool | None = None  # memory layout preference (None: the network's default per device)
    repeated_block: type[nn.Module] | None = None  # what ``--compile`` compiles one by one (compile_regions)

    def describe(self) -> ModelDescriptor:
        raise NotImplementedError

    @property
    def scale(self) -> int:
        return self.describe().scale

    def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
        """Rough peak activation memory of one forward pass (no grad) on a ``height x width`` input."""
        raise NotImplementedError

    def bf16_failure(self, device: torch.device) -> str | None:
        """Why bf16 inference cannot be trusted on ``device`` (a phrase after the architecture's name), None where
        it can. What ``describe().bf16_safe`` states; a network may check further (spandrel's models do)."""
        return None if self.describe().bf16_safe else NO_BF16

    def reference_path(self) -> AbstractContextManager[nn.Module]:
        """A context in which the network runs the plain way of its authors' code (the baseline of ``sst bench
        --reference``); the same function, so outputs agree to rounding."""
        raise ConfigError(f"{type(self).__name__} has no reference path to compare with")

    def configure(self, **settings: object) -> None:
        """Set runtime knobs named in ``describe().settings`` (SSTReal's ``ig_lambda``, ``seed``); a network
        without such a knob refuses it by name."""
        if settings:
            names = ", ".join(sorted(settings))
            raise ConfigError(f"{self.describe().architecture} models have no setting {names}")

    def at_tile_origins(self, origins: Sequence[tuple[int, int]]) -> AbstractContextManager[None]:
        """A context in which the next forward's batch items are tiles whose context boxes start at
        ``origins`` (LR (y, x) in the whole image); only position-dependent networks care."""
        return nullcontext()

    def compile_regions(self) -> list[nn.Module]:
        """The blocks ``torch.compile`` gets one by one, or ``[]`` to compile the network whole.

        A network is mostly one block repeated; blocks alike (same window, heads, shapes) share one compiled
        graph, so far less is traced and compiled than for the whole network (figures in ``compiling.py``).
        """
        kind = self.repeated_block
        return [] if kind is None else [m for m in self.modules() if isinstance(m, kind)]

    def set_attention_backend(self, backend: str) -> None:
        """Choose the attention kernel (a runtime choice; what the network computes stays the same)."""
        from .attention import check_backend

        backend = check_backend(backend)  # canonical spelling: "NATIVE" is "native"
        self.attention_backend = backend
        for module in self.modules():
            if hasattr(module, "backend"):
                module.backend = backend  # type: ignore[assignment]  # nn.Module types attributes as Tensor | Module


def network_of(model: nn.Module) -> nn.Module:
    """The network itself, also when ``torch.compile`` wrapped it."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model


def bf16_failure(model: nn.Module, device: torch.device) -> str | None:
    """``SRNetwork.bf16_failure`` of the network; for a foreign module, what its descriptor states."""
    network = network_of(model)
    if isinstance(network, SRNetwork):
        return network.bf16_failure(device)
    return None if describe(model).bf16_safe else NO_BF16


def describe(model: nn.Module) -> ModelDescriptor:
    """A network's own descriptor; a foreign module with a ``scale`` attribute gets a generic one."""
    network = network_of(model)
    if isinstance(network, SRNetwork):
        return network.describe()
    scale = getattr(model, "scale", None)
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:  # a ConfigError, as Upscaler(5) gets
        raise ConfigError(
            f"{type(model).__name__} does not say its scale: give the module an integer 'scale' attribute (how many "
            "times larger its output is), or load a super-resolution network with load_model"
        )
    return ModelDescriptor(architecture=type(model).__name__, scale=scale)


@dataclass(frozen=True)
class Architecture:
    """One row of the architecture table.

    ``detect(state)``: True when the keys are this architecture's. ``infer(state)``: the constructor keywords
    the tensors determine, and whether they are all of them (SST's window sizes, for one, are not in any
    tensor). ``make_config(kwargs)``: validated config (unknown keys refused by name). ``check(inferred,
    config, source)``: raise a readable CheckpointError where the file and the config disagree.
    ``undetermined``: what the tensors never say (named in the error when no config is given), if anything.
    ``markers``: keys every checkpoint of the architecture holds, to explain a near miss (a file with most
    of them) by the keys it lacks.
    ``scale_key``: the keyword holding the upscaling factor. ``config_key``: the safetensors metadata key
    under which sst-cli stores the keywords of files it writes. ``settings``: the runtime knobs its networks
    accept (as their descriptors say), known before any weights are read.
    """

    name: str
    title: str
    scale_key: str
    detect: Callable[[StateDict], bool]
    infer: Callable[[StateDict], tuple[dict[str, Any], bool]]
    make_config: Callable[[Mapping[str, Any]], ArchConfig]
    build: Callable[[ArchConfig], SRNetwork]
    check: Callable[[Mapping[str, Any], ArchConfig, str], None] | None = None
    undetermined: str = ""
    markers: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()

    @property
    def config_key(self) -> str:
        return f"{self.name}_config"

    def compare(self, inferred: Mapping[str, Any], config: ArchConfig, source: str) -> None:
        """The room's own check, or a field-by-field comparison of the inferred keywords."""
        if self.check is not None:
            self.check(inferred, config, source)
            return
        wanted = config.to_kwargs()
        if inferred.get(self.scale_key, config.scale) != config.scale:
            # the loader adds what to do, as its caller names the scale (--scale 2, scale=2)
            raise ScaleMismatch(f"{source} holds x{inferred[self.scale_key]} weights but x{config.scale} was requested")
        diffs = [f"{k}: file has {v}, model needs {wanted[k]}" for k, v in inferred.items() if wanted.get(k, v) != v]
        if diffs:
            raise CheckpointError(
                f"{source} does not match the requested {self.title} architecture: " + "; ".join(diffs)
            )


@contextmanager
def plain_layers(model: nn.Module, kind: type[nn.Module]) -> Iterator[nn.Module]:
    """Inside the block, every ``kind`` layer of ``model`` runs its plain path (``layer.plain = True``: the
    authors' formulation, for ``reference_path``); each layer's own setting comes back afterwards."""
    layers = [m for m in model.modules() if isinstance(m, kind)]
    saved = [layer.plain for layer in layers]
    for layer in layers:
        layer.plain = True  # type: ignore[assignment]  # nn.Module types attributes as Tensor | Module
    try:
        yield model
    finally:
        for layer, plain in zip(layers, saved, strict=True):
            layer.plain = plain
