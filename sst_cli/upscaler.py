"""``Upscaler``: a loaded model on a device at a precision, run through the tiler; image in, image out."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, overload

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from .archs import ModelDescriptor, SRNetwork, bf16_failure, describe, network_of
from .archs.attention import AttentionReport, describe_attention
from .archs.cpu_kernel import builds_said_to
from .checks import check_quality, check_scale_type, option_flag, option_name, option_value
from .choices import DEFAULT_MODEL, DEFAULT_SCALE
from .compiling import CompiledNetwork, wants_compile
from .errors import ConfigError, ImageError, NonFiniteOutput, OutOfMemory, OutputExists, OutputIsInput
from .files import InputFiles, not_a_file
from .image_io import (
    ImageInfo,
    Picture,
    choose_format,
    clipping_note,
    for_format,
    frames_note,
    probe_image,
    read_image,
    sixteen_bits_note,
    write_image,
)
from .loader import ConfigSource, ModelSpec, names_weights, refuse_unknown_model
from .naming import check_format_fits
from .options import UpscaleOptions
from .phases import Phases
from .pictures import (
    FLOATS_OUTSIDE,
    check_run_input,
    clipped_note,
    image_array,
    loaded,
    picture_from_array,
    picture_from_pil,
    pil_notes,
    to_array,
    to_pil,
)
from .planner import Planner, TilePlan
from .runtime import (
    allocation_tried,
    fp32_mode,
    is_out_of_memory,
    release_memory,
    resolve_device,
    resolve_precision,
    total_ram,
)
from .seams import SeamGuide
from .tiling import (
    TileSize,
    align_overlap,
    align_tile_size,
    run_tiles_adaptive,
    tile_label,
    tile_sides,
)

TileCallback = Callable[[int, int], None]  # (tiles done, tiles in all)


class _TwoPasses:
    """One progress count over the colour pass and the alpha pass of ``--alpha model``, so that the bar runs once, to
    the tiles of both (the alpha pass is counted as long as the colour pass until it starts)."""

    def __init__(self, on_tile: TileCallback) -> None:
        self.on_tile, self.first = on_tile, 0

    def colour(self, done: int, total: int) -> None:
        self.first = total
        self.on_tile(done, 2 * total)

    def alpha(self, done: int, total: int) -> None:
        self.on_tile(self.first + done, self.first + total)


def _constant(alpha: np.ndarray) -> bool:
    """An alpha plane of one value: passed through at the result's size, not upscaled."""
    return float(alpha.min()) == float(alpha.max())


class Upscaled(NamedTuple):
    """A run's output (C, H*scale, W*scale) and the tile it used (0 = whole image), after any
    out-of-memory halving."""

    image: torch.Tensor
    tile: TileSize


# Bytes per result pixel that finishing it holds at once: the resized float32 RGB, its HWC copy, the integer
# image (measured: 26-27 B/px on the CPU, at --outscale 60 and 120 of a 47x33 image). At 16 a 1.55 Gpx result
# passed the check on a 24 GiB machine and was killed for memory.
RESULT_BYTES = 32


def result_size(
    width: int,
    height: int,
    scale: int,
    outscale: float | None,
    source: str | os.PathLike[str] | None = None,
    *,
    cli: bool = False,
) -> tuple[int, int]:
    """(width, height) of the result for an input of that size, ``outscale`` included; refused (when planning,
    before any work) where an ``outscale`` leaves less than a pixel on a side (named by ``source``, the input's
    file, when given), or where making the result, or the model's own before an ``outscale`` shrinks it, would not
    fit the memory this process may use (``RESULT_BYTES``).
    ``cli``: say ``--outscale 0.5``, not the keyword ``outscale=0.5`` an API caller gives."""
    factor = outscale or scale
    size = math.floor(width * factor + 0.5), math.floor(height * factor + 0.5)  # half up on both sides
    if min(size) < 1:
        what = f"'{os.fspath(source)}' ({width}x{height} px)" if source is not None else f"a {width}x{height} px input"
        least = _rounded_up(0.5 / max(1, min(width, height)))
        raise ConfigError(
            f"{what} at {_outscale(f'{factor:g}', cli)} would give a {size[0]}x{size[1]} px result, less than 1 px "
            f"on a side; use {_outscale(least, cli)} or more"
        )
    native = width * scale, height * scale  # made first, then resized: --outscale 0.001 did not make it smaller
    if native[0] * native[1] > size[0] * size[1] and native[0] * native[1] * RESULT_BYTES > total_ram():
        raise ConfigError(
            f"the model's x{scale} result would be {native[0]}x{native[1]} px before it is resized to {size[0]}x"
            f"{size[1]}, more than the memory this process may use ({total_ram() / 2**30:.1f} GiB) can hold; use a "
            "smaller input"
        )
    if size[0] * size[1] * RESULT_BYTES > total_ram():
        fix = f"lower {option_name('outscale', cli)}" if outscale else "use a smaller input or scale"
        raise ConfigError(
            f"the result would be {size[0]}x{size[1]} px, more than the memory this process may use "
            f"({total_ram() / 2**30:.1f} GiB) can hold; {fix}"
        )
    return size


def _outscale(value: str, cli: bool) -> str:
    """``--outscale 0.5`` / ``outscale=0.5``: the number as written (``:g``), not its repr."""
    return f"{option_name('outscale', cli)} {value}" if cli else f"outscale={value}"


def _rounded_up(value: float) -> str:
    """``value`` to 3 significant digits, rounded up: the smallest --outscale to suggest must work itself."""
    step = 10.0 ** (math.floor(math.log10(value)) - 2)
    return f"{math.ceil(value / step - 1e-9) * step:.3g}"


@dataclass(frozen=True)
class ScaleOnly:
    """What planning outputs needs of an Upscaler, known before its model is loaded (a zoo name and scale)."""

    scale: int
    outscale: float | None = None
    cli: bool = False  # the options came from the command line (``UpscaleOptions.cli``)

    def output_size(self, width: int, height: int, source: str | os.PathLike[str] | None = None) -> tuple[int, int]:
        return result_size(width, height, self.scale, self.outscale, source, cli=self.cli)


class Upscaler:
    """Upscale pictures, PIL images or arrays with a network that describes itself (``archs.SRNetwork``).

    ``model`` is a zoo name (default ``sst-light-291``, the bundled weights), a ``ModelSpec``, a weights file
    (a ``pathlib.Path``, or text that is no zoo name: an existing file, a name ending ``.pth``, ``.safetensors``
    ... or an ``hf://`` reference, as ``load_model`` takes them), or a loaded module, which is used in place:
    moved to the device and precision and put in eval mode (two Upscalers may share one only with the same device
    and precision). ``weights`` loads a local file or ``hf://`` reference into the architecture of ``model`` or
    ``config``; with neither, the file itself says (sst-cli's own safetensors, DAT checkpoints, ...).
    The remaining keywords are ``UpscaleOptions``. ``on_message`` receives warnings such as out-of-memory
    retries; ``attention`` (an ``AttentionReport``) says which kernel runs and whether a request fell back.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | ModelSpec | nn.Module | None = None,
        scale: int | None = None,
        *,
        weights: str | os.PathLike[str] | None = None,
        config: ConfigSource | None = None,
        hub_repo: str | None = None,
        options: UpscaleOptions | None = None,
        on_message: Callable[[str], None] | None = None,
        **option_values: Any,
    ) -> None:
        if options is not None and option_values:
            raise ConfigError("pass either options=UpscaleOptions(...) or option keywords, not both")
        self.options = options if options is not None else UpscaleOptions(**option_values)
        self.phases = Phases()  # seconds per phase of this upscaler's life (device, model, network, ...)
        with self.phases.timed("device"):
            self.device = resolve_device(self.options.device)
            wanted = resolve_precision(self.options.precision, self.device)
        _refuse_settings_early(model, weights, config, self.options.settings)
        self.dtype = torch.float32  # loaded in float32, cast once the model says it takes bf16 (_settle_precision)
        with self.phases.timed("model"):
            self.model = self._load(model, scale, weights, config, hub_repo)
        self.descriptor: ModelDescriptor = describe(self.model)
        self.scale = self.descriptor.scale
        self._settle_precision(wanted)
        self.attention: AttentionReport | None = None
        self.on_message = on_message
        network = network_of(self.model)
        _check_settings(self.options.settings, self.descriptor.settings, self.descriptor.architecture)
        if isinstance(network, SRNetwork):
            network.configure(**self.options.settings)
            network.set_attention_backend(self.options.attention)
            if self.descriptor.attention_head_sizes:
                with self.phases.timed("kernel"), builds_said_to(self._say):  # built on a first run: seconds
                    self.attention = describe_attention(
                        self.options.attention, self.device, self.dtype, self.descriptor.attention_head_sizes
                    )
        self._said_plans: set[tuple[TileSize, int, int]] = set()  # (tile, overlap, batch) already described
        self._said_budget = False  # that the memory budget is below the smallest pass: said once
        self._said_rounding: set[str] = set()  # that the window grid changed the tile or overlap asked for: once each
        self.planner = Planner(
            self.model, self.descriptor, self.options, self.device, self.dtype, self._forward, self._say
        )
        self.compiled: CompiledNetwork | None = None
        self._said_eager = False
        self.expect(0.0)

    def expect(self, megapixels: float) -> None:
        """Announce the input megapixels a batch will upscale, so that ``compile="auto"`` can decide whether
        compiling repays itself (``compile="on"`` compiles whatever this says)."""
        if self.compiled is not None or not wants_compile(self.options.compile, self.device, megapixels):
            return
        if self.descriptor.position_dependent:
            if not self._said_eager:
                o = self.options
                asked = option_name("compile", o.cli) if o.cli else f"compile={o.compile!r}"
                self._say(f"{asked}: this network's output depends on tile positions, which compiling would fix; eager")
            self._said_eager = True
            return
        fixed_tiles = isinstance(self.options.tile, int) and self.options.tile > 0
        self.compiled = CompiledNetwork(
            self.model,
            self.device,
            self._say,
            cuda_graphs=fixed_tiles,
            prime=self._prime,
            on_eager=lambda: self._use_attention(self.options.attention),
        )

    def _use_attention(self, backend: str) -> None:
        network = network_of(self.model)
        if isinstance(network, SRNetwork):
            network.set_attention_backend(backend)
            if self.descriptor.attention_head_sizes:
                self.attention = describe_attention(
                    backend, self.device, self.dtype, self.descriptor.attention_head_sizes
                )

    def _prime(self) -> None:
        """Before compiling: on the CPU, SDPA for ``auto`` attention (sst-cli's C kernel is opaque to the compiler,
        a graph break at every attention); then one eager forward on a tiny input, so that kernel choices made
        on first use are cached before tracing."""
        if self.device.type == "cpu" and self.options.attention == "auto":
            self._use_attention("sdpa")
        side = max(16, self.descriptor.size_multiple)
        x = torch.zeros(1, 3, side, side, device=self.device, dtype=self.dtype)
        with torch.inference_mode(), fp32_mode(self.device, self.dtype):
            self.model(x)

    def _settle_precision(self, wanted: torch.dtype) -> None:
        """bf16 only for models whose network vouches for it on this device: ``auto`` stays in fp32, ``bf16`` is
        refused. Cast after asking, not before: a round trip through bf16 would have rounded every weight of a
        model left in fp32."""
        if wanted != torch.bfloat16:
            return
        failure = bf16_failure(self.model, self.device)
        if failure is not None:
            if self.options.precision != "auto":
                fp32 = option_value("precision", "fp32", self.options.cli)
                raise ConfigError(f"{self.descriptor.architecture} {failure}: use {fp32}")
            return
        self.model = self.model.to(dtype=torch.bfloat16)
        self.dtype = torch.bfloat16

    def _say_rounding(self, tile: bool = True) -> None:
        """Say, once each and only when an image is tiled, that the model's window grid changes the tile (``tile``:
        the tile asked for is what runs) or the overlap the user asked for: an image that runs whole uses neither,
        yet it was said on making the Upscaler, whatever then ran."""
        o, align = self.options, self.descriptor.size_multiple
        why = f"{self.descriptor.architecture}'s windows need multiples of {align} px"  # as spelt: SwinIR, SSTReal
        said = []
        if tile and isinstance(o.tile, int) and o.tile and align_tile_size(o.tile, align) != o.tile:
            said.append(f"tile {o.tile} px becomes {align_tile_size(o.tile, align)} px: {why}")
        if o.tile_overlap is not None and align > 1 and align_overlap(o.tile_overlap, align) != o.tile_overlap:
            said.append(f"tile overlap {o.tile_overlap} px becomes {align_overlap(o.tile_overlap, align)} px: {why}")
        for text in said:
            if text not in self._said_rounding:
                self._said_rounding.add(text)
                self._say(text)

    def _load(
        self,
        model: str | os.PathLike[str] | ModelSpec | nn.Module | None,
        scale: int | None,
        weights: str | os.PathLike[str] | None,
        config: ConfigSource | None,
        hub_repo: str | None,
    ) -> nn.Module:
        if scale is not None:
            check_scale_type(scale)
        if model is not None and not isinstance(model, str | os.PathLike | ModelSpec | nn.Module):
            raise ConfigError(
                f"model must be a zoo name, a weights file, a ModelSpec or a torch module, got {type(model).__name__}"
            )
        if isinstance(model, os.PathLike) or (isinstance(model, str) and names_weights(model)):  # weights as model
            if weights is not None:
                raise ConfigError("pass the weights file once: as the model or as weights=, not both")
            model, weights = None, model
        if isinstance(model, nn.Module):
            if weights is not None or config is not None:
                raise ConfigError("pass weights/config only with a model name, not with a loaded module")
            if scale is not None and scale != describe(model).scale:
                raise ConfigError(f"the module upscales x{describe(model).scale}, not x{scale}")
            return model.to(self.device, self.dtype).eval()
        if isinstance(model, ModelSpec):
            if scale is not None or weights is not None or config is not None or hub_repo is not None:
                raise ConfigError("a ModelSpec already says what to load: pass nothing else about the model")
            spec = model
        else:
            if isinstance(model, str):
                refuse_unknown_model(model)
            spec = ModelSpec(model, scale, weights, config, hub_repo)
        return spec.load(DEFAULT_MODEL, DEFAULT_SCALE, device=self.device, dtype=self.dtype)

    def _say(self, text: str) -> None:
        if self.on_message is not None:
            self.on_message(text)

    # ----------------------------------------------------------------- tiling
    def plan(self, height: int, width: int) -> TilePlan:
        """Tile, overlap and batch for an image of this size (``planner.Planner.plan``)."""
        return self.planner.plan(height, width)

    @property
    def seams(self) -> SeamGuide:
        """What this network's tiles need to stay within 60 dB of the whole image (``seams.py``)."""
        return self.planner.seams

    def images_per_pass(self, height: int, width: int, limit: int = 8) -> int:
        """How many whole images of this size one forward pass takes (``planner.Planner.images_per_pass``)."""
        return self.planner.images_per_pass(height, width, limit)

    def _forward(self, batch: torch.Tensor, origins: list[tuple[int, int]] | None = None) -> torch.Tensor:
        """One batch of tiles through the network; ``origins`` (LR, in the whole image) for networks whose
        descriptor says their output depends on position."""
        x = batch.to(self.device, self.dtype, non_blocking=True)
        network = network_of(self.model)
        weight = next(network.parameters(), None)
        if weight is not None and (weight.dtype != self.dtype or weight.device.type != self.device.type):
            raise ConfigError(
                f"this Upscaler's module is now {weight.dtype} on {weight.device}, not {self.dtype} on {self.device}: "
                "another Upscaler sharing it moved it; give each Upscaler its own module"
            )
        located: AbstractContextManager[None] = nullcontext()
        if origins is not None and isinstance(network, SRNetwork):
            located = network.at_tile_origins(origins)
        with torch.inference_mode(), fp32_mode(self.device, self.dtype), located:
            y = self.model(x) if self.compiled is None else self.compiled(x)
        return y.float().cpu()

    def _on_oom(self, tile: TileSize, batch: int, failed: int, overlap: int, tried: list[tuple[TileSize, int]]) -> None:
        """After a pass of ``failed`` tiles ran out of memory: free the device's cache, note the pass in ``tried``
        (its last entry is the pass now running, its count not yet known) and say what runs next."""
        release_memory(self.device)
        tried[-1] = (tried[-1][0], failed)
        tried.append((tile, 0))
        self._say_rounding(tile=False)  # halved from what ran, not the tile asked for; the overlap asked for is kept
        if failed > 1:
            self._say(
                f"out of memory with {failed} tiles of {tile_label(tile)} in one pass: retrying with {batch} per pass "
                "(later images start there)"
            )
            return
        one = ", one per pass" if self.options.batch > 1 else ""
        self._say(f"out of memory: retrying with {tile_label(tile)} tiles{one} (later images start at that size)")
        if self.descriptor.exact_context is None:
            self._say_seams(tile, overlap)

    def _say_seams(self, tile: TileSize, overlap: int) -> None:
        """For a network whose tiles cannot be exact: why, and the seams measured for such tiles."""
        d = self.descriptor
        why = d.seam_note or "its tiles cannot equal the whole image"
        self._say(f"{d.architecture}: {why}; {self.planner.seams_advice(min(tile_sides(tile)), overlap)}")

    def run(self, image: torch.Tensor, on_tile: TileCallback | None = None) -> Upscaled:
        """(3, H, W) float RGB tensor in 0..1 -> (3, H*scale, W*scale) float32, tiled as planned."""
        check_run_input(image)
        plan = self.plan(image.shape[-2], image.shape[-1])
        self._say_plan(plan, image.shape[-2], image.shape[-1])
        tried = [(plan.tile, 0)]  # (tile, tiles in the pass) of each pass that ran out of memory, then this one
        try:
            with self.phases.timed(self._network_phase()):
                out, used, batch = run_tiles_adaptive(
                    self._forward,
                    image,
                    self.scale,
                    tile=plan.tile,
                    overlap=plan.overlap,
                    align=plan.align,
                    batch=plan.batch,
                    blend=plan.blend,
                    on_tile=on_tile,
                    is_oom=_never if plan.whole_only else is_out_of_memory,
                    on_oom=lambda tile, batch, failed: self._on_oom(tile, batch, failed, plan.overlap, tried),
                    origins=self.descriptor.position_dependent,
                )
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            if plan.whole_only:
                raise self._exact_out_of_memory(exc) from exc
            tried[-1] = (tried[-1][0], 1)  # a pass of several tiles would have been retried with fewer
            raise self._out_of_memory(exc, tried) from exc
        if (used, batch) != (plan.tile, plan.batch):  # out of memory as planned: later images start from what ran
            self.planner.lower_ceiling(
                self.planner.pass_bytes(used, plan.overlap, batch, image.shape[-2], image.shape[-1])
            )
        self._check_finite(out)
        return Upscaled(out, used)

    def _out_of_memory(self, exc: BaseException, tried: list[tuple[TileSize, int]]) -> OutOfMemory:
        """The error when even the smallest pass ran out of memory, saying which passes did (``tried``)."""
        asked = _allocation_said(exc)
        last = tried[-1][0]
        smallest = "the whole image" if not tile_sides(last)[0] else f"one {tile_label(last)} tile per pass"
        history = f"; tried {_passes_tried(tried)}" if len(tried) > 1 else ""
        return OutOfMemory(
            f"out of memory on {self.device.type} even with {smallest}, the smallest pass the network allows"
            f"{asked}{history}: a device with more memory, or a smaller model, is needed"
        )

    def _exact_out_of_memory(self, exc: BaseException) -> OutOfMemory:
        """The error when ``exact`` needs the whole image (no context makes this network's tiles exact) and it does
        not fit: tiles, which would stray from it, are not run instead."""
        asked = _allocation_said(exc)
        exact = option_flag("exact", self.options.cli)
        return OutOfMemory(
            f"out of memory on {self.device.type} running the whole image{asked}: {exact} needs the whole image in "
            f"memory at once, since no context makes {self.descriptor.architecture}'s tiles equal it; drop {exact} "
            "to run it in tiles (with the context measured to keep them within 60 dB of the whole image), or use a "
            "device with more memory"
        )

    def _check_finite(self, out: torch.Tensor) -> None:
        if not torch.isfinite(out).all():
            fp32 = option_value("precision", "fp32", self.options.cli)
            hint = f" (bf16 overflowed: try {fp32})" if self.dtype != torch.float32 else ""
            raise NonFiniteOutput(f"the network produced NaN or Inf values{hint}")

    def _network_phase(self) -> str:
        """The first pass pays for kernel choices, lazy CUDA loading and any compiling: kept apart from the rest."""
        return "network" if any(p.startswith("network") for p in self.phases.seconds) else "network (first pass)"

    def _run_stacked(self, colours: list[torch.Tensor]) -> list[torch.Tensor]:
        """Whole same-size images in one forward pass; one by one (tiled as planned) if that runs out of memory."""
        try:
            with self.phases.timed(self._network_phase()):
                out = self._forward(torch.stack(colours))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            out = None  # outside the except block, so the failed pass's tensors are freed
        if out is None:  # later passes take half as many (a ceiling, as for tiles)
            release_memory(self.device)
            half = max(1, len(colours) // 2)
            self.planner.lower_ceiling(half * self.planner.activation_bytes(*colours[0].shape[-2:]))
            self._say(
                f"out of memory with {len(colours)} images in one pass: running them one by one (later passes "
                f"take at most {half})"
            )
            return [self.run(colour).image for colour in colours]
        self._check_finite(out)
        return [image.clone() for image in out]  # inference tensors cannot be clamped in place later

    def _say_plan(self, plan: TilePlan, height: int, width: int) -> None:
        """Say, once per plan, when tiles make the run expensive or the batch had to shrink to fit memory."""
        key = (plan.tile, plan.overlap, plan.batch)
        rows, cols = tile_sides(plan.tile)
        if plan.needs and not self._said_budget:
            self._said_budget = True
            budget = self.planner.budget()
            said = f"{budget >> 20} MiB" if budget >= 2**20 else f"{budget} byte{'s' * (budget != 1)}"  # 5B: meant
            how = f"in {tile_label(plan.tile)} tiles" if plan.tile else "on the whole image"
            self._say(
                f"the memory budget of {said} is less than the smallest pass needs ({-(-plan.needs >> 20)} MiB): it "
                f"runs anyway, {how}"
            )
        if not plan.tile or (rows >= height and cols >= width):
            return
        self._say_rounding()
        if key in self._said_plans:
            return
        if plan.blend:
            self._say_seams(plan.tile, plan.overlap)
        self._said_plans.add(key)
        cost = plan.cost(height, width)
        if cost >= 2.0:
            cli = self.options.cli
            no_overlap = option_value("tile_overlap", 0, cli)
            cheaper = "" if self.options.exact else f", and {no_overlap} costs nothing extra but can leave faint seams"
            self._say(
                f"{tile_label(plan.tile)} tiles with {plan.overlap} px of context compute each pixel {cost:.1f} "
                "times (expect about that many times the whole image's time); larger tiles are faster if memory "
                f"allows ({option_name('max_memory', cli)}){cheaper}"
            )
        if plan.batch < self.options.batch:
            self._say(
                f"batch {self.options.batch} becomes {plan.batch}: more {tile_label(plan.tile)} tiles per "
                "pass do not fit the memory budget"
            )

    # ----------------------------------------------------------------- images
    def output_size(self, width: int, height: int, source: str | os.PathLike[str] | None = None) -> tuple[int, int]:
        """(width, height) of the result for an input of that size (``result_size``; ``source`` names the input's
        file in its refusals)."""
        return result_size(width, height, self.scale, self.options.outscale, source, cli=self.options.cli)

    def _resize_to_outscale(self, t: torch.Tensor, height: int, width: int) -> torch.Tensor:
        outscale = self.options.outscale
        if outscale is None or outscale == self.scale:
            return t
        size = self.output_size(width, height)[::-1]
        return F.interpolate(t[None], size=size, mode="bicubic", antialias=True, align_corners=False)[0]

    def upscale_picture(self, picture: Picture, on_tile: TileCallback | None = None) -> tuple[Picture, TileSize]:
        """Colour through the network; alpha through the network as gray, or resized, or passed if constant.

        Returns the upscaled picture (metadata carried over) and the tile side used for the colour.
        """
        alpha_pass = picture.alpha is not None and self.options.alpha == "model" and not _constant(picture.alpha)
        count = _TwoPasses(on_tile) if on_tile is not None and alpha_pass else None
        result = self.run(_colour_tensor(picture), count.colour if count else on_tile)
        return self._finish(picture, result.image, count.alpha if count else on_tile), result.tile

    def _finish(self, picture: Picture, colour: torch.Tensor, on_tile: TileCallback | None) -> Picture:
        """The upscaled picture from the network's colour output: resized to ``outscale``, alpha upscaled."""
        h, w = picture.color.shape[:2]
        color_out = self._resize_to_outscale(colour, h, w).clamp_(0, 1)
        alpha_out = None
        if picture.alpha is not None:
            alpha_out = self._upscale_alpha(picture.alpha, on_tile)
        return replace(picture, color=color_out.permute(1, 2, 0).contiguous().numpy(), alpha=alpha_out)

    def _upscale_alpha(self, alpha: np.ndarray, on_tile: TileCallback | None) -> np.ndarray:
        h, w = alpha.shape
        a = torch.from_numpy(np.ascontiguousarray(alpha, dtype=np.float32))[None]
        if _constant(alpha):
            width, height = self.output_size(w, h)  # rounded as the colour's size is
            return np.full((height, width), float(a[0, 0, 0]), dtype=np.float32)
        if self.options.alpha == "model":
            up = self.run(a.expand(3, h, w).contiguous(), on_tile).image.mean(0, keepdim=True)
        else:
            size = (h * self.scale, w * self.scale)
            up = F.interpolate(a[None], size=size, mode="bicubic", align_corners=False)[0]
        return self._resize_to_outscale(up, h, w).clamp_(0, 1)[0].numpy()

    def upscale_file(
        self,
        source: str | os.PathLike[str],
        target: str | os.PathLike[str],
        *,
        format: str | None = None,
        quality: int | None = None,
        overwrite: bool = False,
        on_tile: TileCallback | None = None,
    ) -> None:
        """Upscale one image file into ``target``, exactly as ``sst upscale`` does: EXIF orientation applied,
        ICC profile, EXIF, 16 bits and transparency kept, the file written atomically. The format comes from
        ``format`` or the target's extension (a ``format`` the extension contradicts is refused, as by
        ``sst upscale``), else from the source as ``sst upscale`` chooses it (BMP and GIF,
        which sst-cli does not write, become PNG). ``quality``: JPEG / WebP quality (default 95; a lossless WebP
        stays lossless unless one is given)."""
        _check_paths(source=source, target=target)
        check_format_fits(format, target)
        if quality is not None:
            check_quality(quality)
        if os.path.lexists(target) and target in InputFiles([source]):
            raise OutputIsInput(f"'{os.fspath(target)}' is the input itself: write the result elsewhere")
        folder = os.path.dirname(os.fspath(target)) or "."
        if not os.path.isdir(folder):
            raise ImageError(f"cannot write '{os.fspath(target)}': the folder '{folder}' does not exist")
        why = "it is a folder" if os.path.isdir(target) else not_a_file(Path(target))
        if why is not None:
            raise ImageError(f"cannot write '{os.fspath(target)}': {why}")
        picture = read_image(source)
        named = format or os.path.splitext(os.fspath(target))[1] or None  # None: as the CLI chooses (BMP -> PNG)
        width, height = picture.color.shape[1], picture.color.shape[0]
        chosen, why = choose_format(ImageInfo.of(picture), named, self.output_size(width, height, source))
        if why:
            raise ImageError(f"cannot write '{os.fspath(target)}': {why}; choose another format")
        picture = for_format(picture, chosen, f"cannot write '{os.fspath(target)}' from '{os.fspath(source)}'")
        if not overwrite and os.path.lexists(target):
            raise OutputExists(f"'{os.fspath(target)}' already exists (pass overwrite=True to replace it)")
        self._notify(
            frames_note(source, probe_image(source).frames),  # as sst upscale says it: the rest are not read
            clipping_note(source, picture.clipped) if picture.clipped else None,
            sixteen_bits_note(source, picture.sixteen_bits_in) if picture.sixteen_bits_in else None,
        )
        upscaled, _ = self.upscale_picture(picture, on_tile)
        write_image(target, upscaled, format=chosen, quality=quality, overwrite=overwrite)

    @overload
    def upscale(self, image: Image.Image, on_tile: TileCallback | None = None) -> Image.Image: ...

    @overload
    def upscale(self, image: np.ndarray, on_tile: TileCallback | None = None) -> np.ndarray: ...

    def upscale(self, image: Image.Image | np.ndarray, on_tile: TileCallback | None = None) -> Image.Image | np.ndarray:
        """Upscale a PIL image (returns PIL, with its ICC profile, EXIF and dpi in ``.info``) or an array (returns
        an array of the same dtype and layout). A (C, H, W) torch tensor goes to ``run``.

        A PIL image is read as its file would be: turned upright by its EXIF orientation (reset to 1 in the
        result's EXIF); P, CMYK, YCbCr, LAB and HSV come back RGB (RGBA with transparency), 1 as L, La as LA,
        RGBa as RGBA; I (taken as 16-bit values 0..65535, said when all lie in 0..255: ``convert("L")`` an 8-bit
        one first) and I;16B as I;16; F stays F, in 0..1.
        """
        if isinstance(image, Image.Image):
            picture = picture_from_pil(loaded(image))
            self._notify(_current_frame_note(image), *pil_notes(image.mode, picture))
            return to_pil(self.upscale_picture(picture, on_tile)[0], image.mode)
        array = image_array(image, "upscale")
        picture = picture_from_array(array)
        self._notify(clipped_note(picture.clipped, FLOATS_OUTSIDE))
        return to_array(self.upscale_picture(picture, on_tile)[0], array)

    def _notify(self, *notes: str | None) -> None:
        """Notices about the caller's input (samples clipped, ...): through ``on_message``, else as a UserWarning at
        the caller's line (stacklevel 3: called from the public methods only), since a float image in 0..255 (a
        common slip) would otherwise come back white without a word."""
        for note in filter(None, notes):
            if self.on_message is None:
                warnings.warn(note, stacklevel=3)
            else:
                self.on_message(note)

    def upscale_batch(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Upscale same-size arrays (as ``upscale`` takes them), several whole images per forward pass where
        memory allows (``images_per_pass``); result i is what ``upscale(images[i])`` gives up to float32 rounding
        (matrix products round differently for another batch size: ~1e-7 of the range)."""
        arrays = [image_array(image, "upscale_batch") for image in images]
        pictures = [picture_from_array(array, f"images[{i}]") for i, array in enumerate(arrays)]
        if len({p.color.shape for p in pictures}) > 1:
            raise ConfigError("upscale_batch takes images of one size; upscale the others separately")
        if not pictures:
            return []
        per_pass = self.images_per_pass(*pictures[0].color.shape[:2])
        if per_pass == 1:
            return [self.upscale(array) for array in arrays]
        for picture in pictures:
            self._notify(clipped_note(picture.clipped, FLOATS_OUTSIDE))
        results = []
        for start in range(0, len(pictures), per_pass):
            chunk = pictures[start : start + per_pass]
            colours = self._run_stacked([_colour_tensor(p) for p in chunk])
            for picture, colour, like in zip(chunk, colours, arrays[start : start + per_pass], strict=True):
                results.append(to_array(self._finish(picture, colour, None), like))
        return results


def _allocation_said(exc: BaseException) -> str:
    """`` (a single allocation of 2.5 GiB)`` where the error says how much it asked for, else nothing."""
    allocation = allocation_tried(exc)
    return f" (a single allocation of {allocation})" if allocation else ""


def _never(exc: BaseException) -> bool:
    """``is_oom`` for a run that must not be retried in smaller passes."""
    return False


def _passes_tried(passes: Sequence[tuple[TileSize, int]]) -> str:
    """(tile, tiles in one pass) of the passes a run tried, in order, in words: ``96 px tiles 4, 2 and 1 per pass,
    then 48 px tiles 1 per pass``."""
    counts: dict[TileSize, list[int]] = {}
    for tile, batch in passes:
        counts.setdefault(tile, []).append(batch)
    said = []
    for tile, batches in counts.items():
        if not tile_sides(tile)[0]:
            said.append("the whole image")
            continue
        listed = ", ".join(map(str, batches[:-1])) + f" and {batches[-1]}" if len(batches) > 1 else str(batches[0])
        said.append(f"{tile_label(tile)} tiles {listed} per pass")
    return ", then ".join(said)


def _check_settings(asked: dict[str, Any], known: tuple[str, ...], title: str) -> None:
    """Refuse model settings a model does not have, naming them and the models that do."""
    foreign = [name for name in asked if name not in known]
    if foreign:
        names = " and ".join(f"{name} (--{name.replace('_', '-')})" for name in foreign)
        raise ConfigError(
            f"{names} {'applies' if len(foreign) == 1 else 'apply'} to generative models (sst-real) only; "
            f"{title} has no such setting: leave {'it' if len(foreign) == 1 else 'them'} out"
        )


def refuse_foreign_settings(spec: ModelSpec, options: UpscaleOptions) -> None:
    """``ig_lambda`` / ``seed`` a zoo model does not take, refused before a batch plans its outputs: with every
    output already there the model was never loaded, and the files were said to exist instead."""
    _refuse_settings_early(spec, None, None, options.settings)


def _refuse_settings_early(
    model: str | os.PathLike[str] | ModelSpec | nn.Module | None,
    weights: str | os.PathLike[str] | None,
    config: ConfigSource | None,
    asked: dict[str, Any],
) -> None:
    """For a zoo model, refuse foreign settings before anything is downloaded or read."""
    if not asked:
        return
    if isinstance(model, ModelSpec):
        name, weights, config = model.model, model.weights, model.config
    elif isinstance(model, os.PathLike) or (isinstance(model, str) and names_weights(model)):
        return  # a weights file: the architecture is only known once it is read
    elif model is None or isinstance(model, str):
        name = model
    else:
        return
    if weights is not None or config is not None:
        return  # the architecture is only known once the file is read
    from .archs import get_architecture
    from .zoo import get_variant

    arch = get_architecture(get_variant(name or DEFAULT_MODEL).arch)
    _check_settings(asked, arch.settings, arch.title)


def _current_frame_note(image: Image.Image) -> str | None:
    """An animated or multi-page PIL image is upscaled at the frame it stands at: said, as ``sst upscale`` says of
    the files whose first frame alone it reads."""
    frames = int(getattr(image, "n_frames", 1) or 1)
    if frames <= 1:
        return None
    current = image.tell() + 1
    return f"the image has {frames} frames (an animation, or pages); only its current one, {current}, is upscaled"


def _colour_tensor(picture: Picture) -> torch.Tensor:
    colour = torch.from_numpy(np.ascontiguousarray(picture.color.transpose(2, 0, 1), dtype=np.float32))
    if picture.alpha is None:
        return colour
    return fill_hidden_colour(colour, torch.from_numpy(np.ascontiguousarray(picture.alpha, dtype=np.float32)))


def fill_hidden_colour(colour: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """(C, H, W) colour whose fully transparent pixels take the colour of the visible pixels nearest them.

    That colour is never seen, but the network sees it beside the edge: left as files store it (mostly black),
    it bleeds into the upscaled edge as a dark halo. The fill is a pull-push pyramid: visible colours averaged
    down to one pixel, then each level's gaps filled from the coarser one. Visible pixels are unchanged.
    """
    hidden = alpha <= 0
    if not bool(hidden.any()) or bool(hidden.all()):
        return colour
    weight = (~hidden).to(colour.dtype)[None]
    levels = [(colour * weight, weight)]
    while levels[-1][1].shape[-2:] != (1, 1):
        c, w = levels[-1]
        levels.append((F.avg_pool2d(c[None], 2, ceil_mode=True)[0], F.avg_pool2d(w[None], 2, ceil_mode=True)[0]))
    c, w = levels[-1]
    filled = c / w
    for c, w in reversed(levels[:-1]):
        coarse = F.interpolate(filled[None], size=c.shape[-2:], mode="nearest")[0]
        filled = torch.where(w > 0, c / w.clamp_min(1e-12), coarse)
    return torch.where(hidden[None], filled, colour)


def _check_paths(**paths: object) -> None:
    """``upscale_file`` takes paths: a file object or bytes met a bare TypeError from ``os.path``."""
    for role, value in paths.items():
        if not isinstance(value, str | os.PathLike):
            raise ConfigError(
                f"upscale_file takes paths (str or os.PathLike), but its {role} is a {type(value).__name__}: for an "
                "image in memory, upscale(Image.open(...)) returns a PIL image to save where you like"
            )
