"""Inference speed and memory: the paper's protocol (Table S4), a reference path, tiled throughput.

Protocol (Lee et al., Table S4): restore a 1280x720 output at each scale from a random LR input of
``ceil(1280/s) x ceil(720/s)`` pixels (427x240 at x3 gives 1281x720: no LR size gives 1280 exactly),
warm-up runs, then the median of 10 timed runs (``torch.cuda.synchronize`` around each on CUDA) and
``torch.cuda.max_memory_allocated`` after a reset (weights, input and activations). On the CPU the
memory figure is the growth of the peak resident set from the first warm-up run on (``VmHWM`` after
resetting it through ``/proc/self/clear_refs``; with no warm-up run, from the first timed run, first-use
allocations included), or None where that is not available. Weights are
random (seeded), which is fine for timing. Nothing here prints: results come back as dataclasses.

A network's ``reference_path()`` runs it the way the authors' code does (RIB factors recomputed in every
forward, concatenation and padding by separate copies), for the side-by-side ratio.
"""

from __future__ import annotations

import copy
import functools
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from .allocator import give_back_freed
from .archs import SRNetwork
from .archs.attention import check_backend, describe_attention
from .checks import check_bench_runs, check_choice, compile_mode, option_name
from .choices import BENCH_PRECISIONS, PRECISIONS
from .compiling import compile_network
from .errors import ConfigError, WeightsNotFound
from .runtime import (
    device_name,
    fp32_mode,
    free_memory,
    is_out_of_memory,
    package_version,
    resolve_device,
    resolve_precision,
    synchronize,
    total_ram,
)
from .tiling import TileSize, plan_tiles, tile_sides
from .upscaler import RESULT_BYTES, Upscaler
from .zoo import check_scale, create_model, get_variant

PAPER_SIZE = (1280, 720)  # (width, height) of the restored output
PAPER_MODELS = ("sst-light", "sst", "sst-l")
PAPER_SCALES = (2, 3, 4)
MIB = 1 << 20
Say = Callable[[str], None]  # one line of progress text


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class BenchSettings:
    """What to measure. ``size``/``tiled`` are output sizes (width, height); ``tile`` is in LR pixels."""

    models: tuple[str, ...] = PAPER_MODELS
    scales: tuple[int, ...] = PAPER_SCALES  # with ``weights``: one scale is checked against the file's, else unused
    precisions: tuple[str, ...] = BENCH_PRECISIONS
    size: tuple[int, int] | None = PAPER_SIZE
    runs: int = 10
    warmup: int = 3
    device: str = "auto"
    attention: str = "auto"
    reference: bool = False
    tiled: tuple[int, int] | None = None
    tile: int | Literal["auto"] = "auto"
    compile: str = "none"
    tf32: bool = False
    input: str | None = None
    channels_last: bool | None = None  # None: the model's default (SST: channels-last; SSTReal: on the CPU)
    seed: int = 0
    weights: str | None = None  # a checkpoint (any architecture) instead of zoo models with random weights
    config: str | None = None  # constructor keywords for ``weights`` (JSON file), when the file needs them
    variant: str | None = None  # the zoo model whose architecture ``weights`` are (SST files need it: windows)

    def __post_init__(self) -> None:
        # Kept in the canonical spelling ("FP32" is "fp32") and once each: the tables and the fp32/bf16 comparison
        # match rows on (model, scale, precision), and a model or precision named twice was timed twice.
        models = tuple(dict.fromkeys(get_variant(name).name for name in self.models))
        precisions = tuple(dict.fromkeys(check_choice(p, PRECISIONS, "precision") for p in self.precisions))
        object.__setattr__(self, "models", models)  # frozen: set once, here
        object.__setattr__(self, "scales", tuple(dict.fromkeys(self.scales)))
        object.__setattr__(self, "precisions", precisions)
        object.__setattr__(self, "compile", compile_mode(self.compile))
        self.validate()

    def validate(self) -> BenchSettings:
        """Refuse bad values with one sentence each, before any model is built."""
        for name in self.models:
            get_variant(name)
        for scale in self.scales:
            check_scale(scale)
        for precision in self.precisions:
            check_choice(precision, PRECISIONS, "precision")
        if not (self.models and self.scales and self.precisions):
            raise ConfigError("give at least one model, scale and precision")
        check_bench_runs(self.runs, self.warmup)
        if self.size is None and self.tiled is None:
            raise ConfigError("nothing to measure: give an output size, a tiled size, or both")
        for option, size in (("--size", self.size), ("--tiled", self.tiled)):
            if size is not None and min(size) < 1:
                raise ConfigError(f"{option} must be positive on both sides, got {size[0]}x{size[1]}")
        compile_mode(self.compile)
        if self.tile != "auto" and (not isinstance(self.tile, int) or self.tile < 0):
            raise ConfigError(f"--tile must be 'auto', 0 or a positive size, got {self.tile!r}")
        check_backend(self.attention)
        if self.input is not None and not Path(self.input).is_file():
            raise ConfigError(f"the input image {self.input} is not a file")
        if self.config is not None and self.weights is None:  # ``sst bench`` refuses it first, as --config
            raise ConfigError("config describes the architecture of weights; give the weights too")
        check_weights_file(self.weights)
        return self


def check_weights_file(weights: str | None, *, cli: bool = False) -> None:
    """A local ``weights`` file must be there (an ``hf://`` reference is fetched later). ``cli``: name it
    ``--weights``, as ``sst bench`` spells it, not ``weights``; the CLI asks before making ``BenchSettings``."""
    remote = weights is not None and weights.strip().lower().startswith("hf://")
    if weights is not None and not remote and not Path(weights).is_file():
        raise WeightsNotFound(f"{option_name('weights', cli)}: weights file not found: {weights}")  # exit 1


def quick_cpu_settings(**overrides: Any) -> BenchSettings:
    """A CPU run of a few minutes on 2 cores: sst-light, 320x180 output, x2 and x4, fp32 and bf16, 3 runs."""
    base: dict[str, Any] = {"models": ("sst-light",), "scales": (2, 4), "size": (320, 180), "runs": 3, "warmup": 1}
    return BenchSettings(**(base | overrides))


def lr_size(width: int, height: int, scale: int) -> tuple[int, int]:
    """LR (width, height) whose x``scale`` output covers ``width x height``: ceil of each side."""
    return -(-width // scale), -(-height // scale)


# ----------------------------------------------------------------------------- results
@dataclass
class Measurement:
    """One (model, scale, precision, path) timing. ``path`` is ``ours`` or ``reference``."""

    model: str
    scale: int
    precision: str
    path: str
    lr: tuple[int, int]
    output: tuple[int, int]
    median_ms: float
    times_ms: list[float]
    warmup_s: float
    memory_mib: float | None
    params: int
    speedup: float | None = None  # reference median / ours median (on the ``ours`` row)
    max_abs_diff: float | None = None  # ours vs reference output (on the ``reference`` row)
    psnr_vs_fp32: float | None = None  # bf16 output vs the fp32 output, raw values, peak 1.0


@dataclass
class TiledMeasurement:
    """Throughput of the Upscaler's tiled path on a large output, CPU canvas and transfers included."""

    model: str
    scale: int
    precision: str
    lr: tuple[int, int]
    output: tuple[int, int]
    tile: TileSize
    overlap: int
    tiles: int
    median_s: float
    times_s: list[float]
    megapixels_per_s: float
    memory_mib: float | None


@dataclass
class BenchReport:
    """Everything one ``run_bench`` measured, with the facts needed to compare it later."""

    device: str
    device_type: str
    torch: str
    date: str
    threads: int
    protocol: str
    memory_kind: str
    sst_cli_version: str
    settings: dict[str, Any]  # ``BenchSettings`` as plain data: what the protocol line says, for programs
    kernels: dict[str, str] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    results: list[Measurement] = field(default_factory=list)
    tiled: list[TiledMeasurement] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- measuring
def _status_kib(field_name: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class _PeakMemory:
    """CUDA: ``max_memory_allocated`` since a reset. CPU: peak RSS growth since a reset of ``VmHWM``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.base_kib: int | None = None

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        give_back_freed()  # memory freed by earlier runs but kept by the C allocator would hide this run's peak
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
                fh.write("5")  # Linux: reset the peak RSS to the current RSS
            self.base_kib = _status_kib("VmRSS")
        except OSError:
            self.base_kib = None

    def peak_mib(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / MIB
        peak = _status_kib("VmHWM")
        if peak is None or self.base_kib is None:
            return None
        return max(0, peak - self.base_kib) / 1024


def memory_kind(device: torch.device, warmup: int = 1) -> str:
    """What the memory column measures. With no warm-up run the CPU peak is reset before the first timed run,
    so it counts first-use allocations (and with --compile, compiling): saying "from the first warm-up run"
    there was untrue."""
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated (weights + input + activations), MiB"
    if _status_kib("VmHWM") is None:
        return "not available on this system"
    if warmup == 0:
        return (
            "peak RSS growth including first-use allocations (no warm-up run; VmHWM reset via "
            "/proc/self/clear_refs), MiB"
        )
    return "peak RSS growth from the first warm-up run on (VmHWM reset via /proc/self/clear_refs), MiB"


def time_runs(
    forward: Callable[[], torch.Tensor], device: torch.device, runs: int, warmup: int
) -> tuple[list[float], float, float | None, torch.Tensor]:
    """Warm up, then time ``runs`` calls. Returns (seconds per run, warm-up seconds, peak MiB, last output).

    The CUDA peak (live tensors) is reset after the warm-up. The CPU peak is the resident set's: it is
    reset after the first warm-up run (first-use allocations excluded), so that later warm-up runs,
    whose memory the C allocator may keep, count too.
    """
    memory = _PeakMemory(device)
    start = time.perf_counter()
    for i in range(warmup):
        forward()
        if i == 0 and device.type != "cuda":
            memory.reset()
    synchronize(device)
    warmup_s = time.perf_counter() - start
    if device.type == "cuda" or warmup == 0:
        memory.reset()
    times, out = [], None
    for _ in range(runs):
        synchronize(device)
        t0 = time.perf_counter()
        out = forward()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    assert out is not None
    return times, warmup_s, memory.peak_mib(), out


def psnr_unit(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR of raw float outputs with peak 1.0 (random-weight outputs are not clamped to [0, 1])."""
    mse = F.mse_loss(a.double(), b.double()).item()
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def _input_image(settings: BenchSettings, width: int, height: int) -> torch.Tensor:
    """(3, H, W) float32 in [0, 1]: seeded noise, or ``settings.input`` resized to cover and centre-cropped."""
    if settings.input is None:
        return torch.rand(3, height, width, generator=torch.Generator().manual_seed(settings.seed))
    from .image_io import read_image

    color = torch.from_numpy(read_image(Path(settings.input)).color.copy()).permute(2, 0, 1)
    factor = max(width / color.shape[2], height / color.shape[1])
    size = (max(height, round(color.shape[1] * factor)), max(width, round(color.shape[2] * factor)))
    resized = F.interpolate(color[None], size=size, mode="bicubic", antialias=True, align_corners=False)[0]
    top, left = (size[0] - height) // 2, (size[1] - width) // 2
    return resized[:, top : top + height, left : left + width].clamp(0, 1).contiguous()


def _make_model(name: str, scale: int, seed: int) -> SRNetwork:
    torch.manual_seed(seed)
    return create_model(name, scale).eval()


def _planned(settings: BenchSettings, cli: bool) -> list[tuple[str, int, SRNetwork]]:
    """(label, scale, network) of each network to time: the weights file's own, loaded; zoo models built on the
    meta device, which is enough to plan their memory (``_network`` builds each for real when its turn comes)."""
    if settings.weights is not None:
        from .loader import load_model

        wanted = settings.scales[0] if len(settings.scales) == 1 else None
        model = load_model(settings.weights, wanted, config=settings.config, variant=settings.variant, cli=cli)
        return [(Path(settings.weights.split("@", 1)[0]).stem, model.scale, model)]
    with torch.device("meta"):
        return [(name, scale, create_model(name, scale)) for name in settings.models for scale in settings.scales]


def _network(name: str, scale: int, planned: SRNetwork, seed: int) -> SRNetwork:
    """The fp32 CPU network to time: a zoo model's random (seeded) weights, or the loaded file's."""
    on_meta = any(p.is_meta for p in planned.parameters())
    return _make_model(name, scale, seed) if on_meta else planned


def _concrete_precisions(settings: BenchSettings, device: torch.device) -> tuple[BenchSettings, str | None]:
    """``settings`` with ``auto`` resolved as upscale resolves it (bf16 on a GPU that has it, else fp32), so the
    rows, the JSON and the fp32/bf16 comparison name what ran; and what ``auto`` chose (None: not asked)."""
    if "auto" not in settings.precisions:
        return settings, None
    chose = "bf16" if resolve_precision("auto", device) == torch.bfloat16 else "fp32"
    precisions = tuple(dict.fromkeys(chose if p == "auto" else p for p in settings.precisions))
    return replace(settings, precisions=precisions), chose


def check_memory(settings: BenchSettings, device: torch.device, planned: list[tuple[str, int, SRNetwork]]) -> None:
    """Refuse, before any of it is allocated, a ``size`` whose whole-image pass or a ``tiled`` whose input and
    result cannot fit: allocations that large made the machine swap, or the system kill the process, instead of
    failing. The pass is the network's own estimate (as tiles are planned); a tiled result is counted as
    ``sst upscale`` counts it (``RESULT_BYTES`` a pixel, against the memory this process may use)."""
    for name, scale, network in planned:
        for precision in settings.precisions:
            dtype = resolve_precision(precision, device)
            what = f"a whole-image pass of {name} x{scale} {precision}"
            if settings.size is not None:
                _check_pass(settings, network, scale, what, dtype, device)
        if settings.tiled is not None:
            lr_w, lr_h = lr_size(*settings.tiled, scale)
            needed = 3 * 4 * lr_w * lr_h + RESULT_BYTES * lr_w * lr_h * scale * scale
            _refuse_over("--tiled", settings.tiled, needed, total_ram(), f"the x{scale} result", "this process may use")


def _check_pass(
    settings: BenchSettings, network: SRNetwork, scale: int, what: str, dtype: torch.dtype, device: torch.device
) -> None:
    """One whole-image pass: its activations, input and output on ``device``; float32 copies kept on the host."""
    assert settings.size is not None
    size = settings.size
    lr_w, lr_h = lr_size(*size, scale)
    pixels = lr_w * lr_h * (1 + scale * scale)  # input and output
    on_device = network.activation_bytes(lr_h, lr_w, dtype) + 3 * pixels * (torch.finfo(dtype).bits // 8)
    outputs = 1 + settings.reference  # ours, and the reference path's to compare with
    on_host = 3 * 4 * lr_w * lr_h * (1 + scale * scale * outputs)  # the float32 noise and outputs
    if device.type == "cpu":
        _refuse_over("--size", size, on_device + on_host, free_memory(device), what, "of free RAM")
        return
    _refuse_over("--size", size, on_device, free_memory(device), what, f"free on {device_name(device)}")
    _refuse_over("--size", size, on_host, free_memory(torch.device("cpu")), f"{what} (host copies)", "of free RAM")


def _refuse_over(option: str, size: tuple[int, int], needed: int, limit: int, what: str, where: str) -> None:
    """One sentence naming the option, what it needs and the limit it is over."""
    if needed > limit:
        raise ConfigError(
            f"{option} {size[0]}x{size[1]}: {what} needs about {needed / 2**30:.1f} GiB, more than the "
            f"{limit / 2**30:.1f} GiB {where}; give a smaller {option}"
            + (" (--tiled WxH times large outputs in tiles)" if option == "--size" else "")
        )


@contextmanager
def _compiled(model: SRNetwork, mode: str) -> Iterator[nn.Module]:
    """``model`` compiled with ``mode`` inside the block, eager again after it (the reference path runs next)."""
    if mode == "none":
        yield model
        return
    compiled, undo = compile_network(model, None if mode == "default" else mode)
    try:
        yield compiled
    finally:
        undo()


@contextmanager
def _out_of_memory_says(what: str, device: torch.device) -> Iterator[None]:
    """An allocator failure while timing is one sentence (it was PyTorch's traceback)."""
    try:
        yield
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        raise ConfigError(f"{what}: out of memory on {device_name(device)}; time a smaller --size or --tiled") from None


def run_bench(settings: BenchSettings, on_progress: Say | None = None, *, cli: bool = False) -> BenchReport:
    """Measure every (model, scale, precision) of ``settings``; see the module docstring for the protocol.
    ``cli``: loading advice names ``--model`` and ``--config``, not ``variant`` and ``config``."""
    settings.validate()
    say = on_progress or (lambda _text: None)
    device = resolve_device(settings.device)
    settings, chose = _concrete_precisions(settings, device)
    report = BenchReport(
        device=device_name(device),
        device_type=device.type,
        torch=torch.__version__,
        date=datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        threads=torch.get_num_threads(),
        protocol=_protocol(settings, device),
        memory_kind=memory_kind(device, settings.warmup if settings.size is not None else 1),  # tiled warms up
        sst_cli_version=package_version(),
        settings=asdict(settings),
    )
    if chose is not None:
        report.notices.append(f"--precision auto: {chose} on {report.device}")
    if settings.compile == "reduce-overhead" and device.type != "cuda":  # timed as asked, but said: it adds nothing
        report.notices.append(
            f"--compile reduce-overhead: its CUDA graphs run on CUDA GPUs only; on {report.device} it times "
            "as --compile default"
        )
    if settings.compile != "none" and settings.warmup == 0 and settings.size is not None:
        report.notices.append(
            f"--compile {settings.compile} with --warmup 0: the first timed run includes compiling the model "
            "(its time and memory); give --warmup 1 or more to time the compiled model alone"
        )
    planned = _planned(settings, cli)
    check_memory(settings, device, planned)
    for name, scale, shape in planned:
        base = _network(name, scale, shape, settings.seed)
        outputs: dict[str, tuple[Measurement, torch.Tensor]] = {}
        for precision in settings.precisions:
            dtype = resolve_precision(precision, device)
            model = copy.deepcopy(base).to(device, dtype)
            model.set_attention_backend(settings.attention)
            model.channels_last = settings.channels_last  # a layout preference; networks that have none ignore it
            head_sizes = model.describe().attention_head_sizes
            if head_sizes:  # networks running the shared attention kernels say which one runs
                kernel = describe_attention(settings.attention, device, dtype, head_sizes)
                report.kernels[f"{name} {precision}"] = kernel.line
                report.notices.extend(n for n in kernel.notices if n not in report.notices)
            with _out_of_memory_says(f"{name} x{scale} {precision}", device):
                if settings.size is not None:
                    rows, out = _measure_forward(model, name, scale, precision, dtype, device, settings, say)
                    report.results.extend(rows)
                    outputs[precision] = rows[0], out
                if settings.tiled is not None:
                    report.tiled.append(_measure_tiled(model, name, scale, precision, device, settings, say))
            del model
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if "fp32" in outputs and "bf16" in outputs:
            outputs["bf16"][0].psnr_vs_fp32 = psnr_unit(outputs["bf16"][1], outputs["fp32"][1])
    return report


def _measure_forward(
    model: SRNetwork,
    name: str,
    scale: int,
    precision: str,
    dtype: torch.dtype,
    device: torch.device,
    settings: BenchSettings,
    say: Say,
) -> tuple[list[Measurement], torch.Tensor]:
    """Our path (and the reference path with ``settings.reference``); returns the rows and our output."""
    assert settings.size is not None
    lr_w, lr_h = lr_size(*settings.size, scale)
    x = _input_image(settings, lr_w, lr_h)[None].to(device, dtype)
    params = sum(p.numel() for p in model.parameters())
    rows: list[Measurement] = []
    outputs: list[torch.Tensor] = []
    for path in ("ours", "reference") if settings.reference else ("ours",):
        say(f"{name} x{scale} {precision} {path}: {lr_w}x{lr_h} -> {lr_w * scale}x{lr_h * scale}")
        ours = path == "ours"
        with (
            _compiled(model, settings.compile if ours else "none") as forward,
            torch.inference_mode(),
            fp32_mode(device, dtype, allow_tf32=settings.tf32),
            nullcontext() if ours else model.reference_path(),
        ):
            times, warm, memory, out = time_runs(functools.partial(forward, x), device, settings.runs, settings.warmup)
        outputs.append(out.float().cpu())
        rows.append(
            Measurement(
                model=name,
                scale=scale,
                precision=precision,
                path=path,
                lr=(lr_w, lr_h),
                output=(lr_w * scale, lr_h * scale),
                median_ms=statistics.median(times) * 1e3,
                times_ms=[t * 1e3 for t in times],
                warmup_s=warm,
                memory_mib=memory,
                params=params,
            )
        )
    if settings.reference:
        rows[0].speedup = rows[1].median_ms / rows[0].median_ms
        rows[1].max_abs_diff = (outputs[0] - outputs[1]).abs().max().item()
    return rows, outputs[0]


def _measure_tiled(
    model: SRNetwork,
    name: str,
    scale: int,
    precision: str,
    device: torch.device,
    settings: BenchSettings,
    say: Say,
) -> TiledMeasurement:
    assert settings.tiled is not None
    lr_w, lr_h = lr_size(*settings.tiled, scale)
    image = _input_image(settings, lr_w, lr_h)
    with _compiled(model, settings.compile) as forward:
        upscaler = Upscaler(
            forward, device=str(device), precision=precision, attention=settings.attention, tile=settings.tile
        )
        plan = upscaler.plan(lr_h, lr_w)
        tiles = len(plan_tiles(lr_h, lr_w, plan.tile, plan.overlap, plan.align))
        rows, cols = tile_sides(plan.tile)
        warm_image = (
            image[:, : min(lr_h, rows + 2 * plan.overlap), : min(lr_w, cols + 2 * plan.overlap)] if rows else image
        )
        say(f"{name} x{scale} {precision} tiled: {lr_w}x{lr_h} -> {lr_w * scale}x{lr_h * scale}, {tiles} tile(s)")
        for _ in range(max(1, settings.warmup)):
            upscaler.run(warm_image)
        used = plan.tile
        memory = _PeakMemory(device)
        memory.reset()
        times = []
        for _ in range(settings.runs):
            synchronize(device)
            t0 = time.perf_counter()
            used = upscaler.run(image).tile
            synchronize(device)
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        return TiledMeasurement(
            model=name,
            scale=scale,
            precision=precision,
            lr=(lr_w, lr_h),
            output=(lr_w * scale, lr_h * scale),
            tile=used,
            overlap=plan.overlap,
            tiles=tiles,
            median_s=median,
            times_s=times,
            megapixels_per_s=lr_w * scale * lr_h * scale / 1e6 / median,
            memory_mib=memory.peak_mib(),
        )


def _protocol(settings: BenchSettings, device: torch.device) -> str:
    parts = []
    if settings.size is not None:
        w, h = settings.size
        parts.append(
            f"output {w}x{h} (LR = ceil({w}/s) x ceil({h}/s)), {settings.warmup} warm-up + median of "
            f"{settings.runs} timed runs, batch 1"
        )
    if settings.tiled is not None:
        asked = "the whole image" if settings.tile == 0 else f"tile {settings.tile}"
        parts.append(f"tiled {settings.tiled[0]}x{settings.tiled[1]} output, {asked} asked (the table: what ran)")
    parts.append(f"weights {settings.weights}" if settings.weights is not None else "random weights (seeded)")
    if device.type == "cuda" and "fp32" in settings.precisions:  # TF32 exists on NVIDIA GPUs only
        parts.append("fp32 with TF32 allowed" if settings.tf32 else "fp32 with TF32 off")
    if settings.compile != "none":
        parts.append(f"torch.compile mode {settings.compile}")
    if settings.channels_last is not None:
        parts.append("channels-last " + ("on" if settings.channels_last else "off"))
    if settings.input is not None:
        parts.append(f"input {settings.input}")
    return "; ".join(parts)
