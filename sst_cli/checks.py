"""Checks of option values that need no torch: one place for each rule, so that a refused option answers at once.

The library's options objects (``UpscaleOptions``, ``TrainConfig``, ``BenchSettings``),
``runtime.resolve_device`` / ``resolve_precision`` and ``parallel.plan_workers`` call these, and the CLI calls them
before it imports torch (about a second, more on a busy machine). What only PyTorch can say (is there a CUDA GPU?
how many?) stays in ``runtime``.
"""

from __future__ import annotations

import math
import re
import sys
from numbers import Integral, Real

from .choices import ALPHA_MODES, BACKENDS, COMPILE_CHOICES, COMPILE_MODE_ALIASES, COMPILE_MODES, PRECISIONS
from .errors import ConfigError

MAX_TILE = 1 << 20  # a tile side beyond any picture (a million pixels): the whole image is what it means
MIN_OUTSCALE = 1 / MAX_TILE  # smaller leaves less than a pixel of any picture's side

_NO_CUDA = "device {name!r} was requested but PyTorch sees no CUDA GPU here; use {cpu}"
_NO_MPS = (
    "device {name!r} (Apple GPU) is not available here (it needs Apple Silicon and a PyTorch built with MPS); use {cpu}"
)


_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
MIN_UNITLESS = 1 << 20  # a size without a unit under 1 MiB is a unit left out: no network runs in so little


def parse_size(text: str | None, option: str = "--max-memory") -> int | None:
    """'4G', '512M', '1.5GiB', '2000000', '5B' -> bytes (binary units); None stays None. A number without a unit
    under ``MIN_UNITLESS`` bytes is refused: ``--max-memory 5`` meant 5G, and ran on 5 bytes (silently when the
    picture ran whole; tiled as small as the window grid allows otherwise)."""
    if text is None:
        return None
    match = _SIZE.fullmatch(text.strip())
    size = int(float(match[1]) * _UNITS[match[2].lower()]) if match else 0
    if size <= 0:
        raise ConfigError(f"{option} must be a size such as 4G or 512M, got {text!r}")
    if match and not match[2] and not match[3] and size < MIN_UNITLESS:
        number = match[1]
        guess = "G" if size < 64 else "M" if size < 1 << 16 else ""  # 5 -> 5G, 512 -> 512M
        meant = f"did you mean {number}{guess}? " if guess else ""
        raise ConfigError(
            f"{option} {number}: {size} byte{'s' * (size != 1)}; {meant}give a unit: 512M, 2G "
            f"({number}B if bytes are meant)"
        )
    return size


def memory_bytes(value: float | str | None, option: str = "max_memory") -> int | None:
    """A memory budget in bytes: a whole number as it is, a size text as ``--max-memory`` takes it ('4G'); an API
    caller's ``max_memory="2G"`` met "'<=' not supported between instances of 'str' and 'int'"."""
    if value is None or isinstance(value, str):
        return parse_size(value, option)
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ConfigError(f"{option} must be a number of bytes or a size such as '4G' or '512M', got {value!r}")
    return int(value)  # 4e9 and 1.5 * 2**30 as whole bytes, as before sizes were taken


def check_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    """The choice ``value`` names, in its canonical (lower-case) spelling, else a ConfigError that lists them.

    Letter case does not matter, as for ``--device CPU`` and ``--format PNG``: ``--precision FP32`` was refused.
    """
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in choices:
        raise ConfigError(f"unknown {what} {value!r}; choose one of {', '.join(choices)}")
    return text


def check_scale_type(scale: object) -> None:
    """An API caller's ``scale="4"`` was told "sst exists at x2 / x3 / x4, not x4"."""
    if isinstance(scale, bool) or not isinstance(scale, int):
        raise ConfigError(f"scale must be an integer such as 4, got {scale!r}")


def no_cuda(name: str, cli: bool = False) -> ConfigError:
    return ConfigError(_NO_CUDA.format(name=name, cpu=option_value("device", "cpu", cli)))


def no_mps(name: str, cli: bool = False) -> ConfigError:
    return ConfigError(_NO_MPS.format(name=name, cpu=option_value("device", "cpu", cli)))


def check_device_name(name: str, platform: str = sys.platform, *, cli: bool = False) -> None:
    """Refuse a device this platform never has, without asking PyTorch: Apple's MPS anywhere but macOS, CUDA on
    macOS (PyTorch has no CUDA build there). Whether a GPU is really there is ``runtime.resolve_device``'s.
    ``cli``: suggest ``--device cpu``, not the keyword ``device='cpu'`` an API caller gives."""
    kind = name.strip().lower().split(":", 1)[0]
    if kind == "mps" and platform != "darwin":
        raise no_mps(name, cli)
    if kind == "cuda" and platform == "darwin":
        raise no_cuda(name, cli)


def check_devices(device: str, workers: int) -> None:
    """What ``--device`` (one device, a comma list, or ``cuda:all``) and ``--workers`` can be refused for without
    PyTorch: workers below 1, an empty list entry, workers with a list, a device the platform never has."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers must be 1 or more, got {workers!r}")
    text = device.strip().lower()
    if text == "cuda:all":
        return
    names = [part.strip() for part in text.split(",")]
    if len(names) > 1:
        if any(not name for name in names):
            raise ConfigError(f"the device list {device!r} has an empty entry; write it like cuda:0,cuda:1")
        if workers != 1:
            raise ConfigError("--workers applies to one device; a device list already runs one worker per device")
    for name in names:
        check_device_name(name, cli=True)  # --workers and device lists are the command line's


def option_name(name: str, cli: bool) -> str:
    """An option's name as its caller wrote it: ``--ig-lambda`` on the command line, ``ig_lambda`` in Python."""
    return "--" + name.replace("_", "-") if cli else name


def option_flag(name: str, cli: bool) -> str:
    """A switch turned on as its caller writes it: ``--resume`` on the command line, ``resume=True`` in Python."""
    return option_name(name, cli) if cli else f"{name}=True"


def check_is_number(value: object, name: str, *, cli: bool = False) -> None:
    """A number, not text or a bool: an API caller's ``"5e-4"`` met a bare TypeError in the comparison after."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{option_name(name, cli)} must be a number, got {value!r}")


def check_whole(value: object, name: str, *, cli: bool = False) -> None:
    """An integer, not a bool, text or a float: ``iters=3.5`` trained 4 iterations, ``patch=8.0`` failed inside
    torch after the images were decoded, ``tile_overlap="x"`` met a bare TypeError."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{option_name(name, cli)} must be a whole number, got {value!r}")


def check_count(value: object, name: str, *, cli: bool = False, least: int = 0) -> None:
    """A whole-number option's value (``check_whole``), ``least`` or more, else a ConfigError naming the option as
    its caller wrote it (``--batch 0``, ``batch=0``)."""
    check_whole(value, name, cli=cli)
    assert isinstance(value, Integral)
    if value < least:
        wanted = "0 or more" if least == 0 else f"at least {least}"
        raise ConfigError(f"{option_name(name, cli)} must be {wanted}, got {value}")


def check_quality(quality: object, *, cli: bool = False) -> None:
    """A JPEG / WebP quality: a whole number from 1 to 100 (not a bool), else a ConfigError naming the option as its
    caller wrote it. ``upscale_file(quality=90.5)`` failed only once written, after the network had run,
    ``quality="90"`` met a bare TypeError, and ``quality=True`` ran as 1."""
    if isinstance(quality, bool) or not isinstance(quality, Integral):
        raise ConfigError(f"{option_name('quality', cli)} must be a whole number from 1 to 100, got {quality!r}")
    if not 1 <= int(quality) <= 100:
        raise ConfigError(f"{option_name('quality', cli)} must be between 1 and 100, got {quality}")


def option_value(name: str, value: object, cli: bool) -> str:
    """An option given a value as its caller writes it: ``--device cpu`` on the command line, ``device='cpu'`` in
    Python, for messages that suggest one."""
    return f"{option_name(name, cli)} {value}" if cli else f"{name}={value!r}"


def check_number(
    value: float,
    name: str,
    *,
    cli: bool = False,
    least: float | None = None,
    below: float | None = None,
    unit: str = "",
) -> None:
    """A float option's value: finite and above 0, or ``least`` or more (and ``below`` that, when given), else a
    ConfigError naming the option as its caller wrote it (``--lr inf``, ``lr inf``). NaN passed ``x <= 0`` and
    inf ``x > 0``: each rule written once here keeps them out. ``unit``: what the number counts (``seconds``)."""
    check_is_number(value, name, cli=cli)
    low = 0.0 if least is None else least
    inside = value >= low if least is not None else value > low
    if math.isfinite(value) and inside and (below is None or value < below):
        return
    counted = f"a finite number of {unit}" if unit else "a finite number"
    if below is not None:
        wanted = f"a number from {low:g} up to (not including) {below:g}"
    elif least is not None:
        wanted = f"{counted}, {least:g} or more"
    else:
        wanted = f"{counted} above 0"
    raise ConfigError(f"{option_name(name, cli)} {value:g}: must be {wanted}")


def check_bench_runs(runs: int | None = None, warmup: int | None = None) -> None:
    """``sst bench``'s timed and warm-up runs (None: the default, which passes): ``BenchSettings`` and the CLI,
    before it imports torch, call this one rule (``--runs 0`` was refused only after that second)."""
    if runs is not None and runs < 1:
        raise ConfigError(f"--runs must be at least 1, got {runs}")
    if warmup is not None and warmup < 0:
        raise ConfigError(f"--warmup must be 0 or more, got {warmup}")


def check_running_values(
    *,
    precision: str = "auto",
    attention: str = "auto",
    tile: int | str = "auto",
    tile_overlap: int | None = None,
    exact: bool = False,
    batch: int = 1,
    max_memory: int | str | None = None,
    alpha: str = "model",
    outscale: float | None = None,
    ig_lambda: float | None = None,
    seed: int | None = None,
    compile: str = "auto",
    cli: bool = False,
) -> dict[str, str]:
    """Every rule of ``UpscaleOptions`` but the device's (which may need PyTorch to answer); a value left out is
    one that passes. Returns the choices in their canonical spelling (``FP32`` -> ``fp32``) for the caller to keep.
    ``cli``: name the options as the command line spells them (``--tile-overlap``), not as keywords
    (``tile_overlap``); a value of the wrong type (``tile_overlap="x"``) is a ConfigError too, not a TypeError."""
    choices = {
        "precision": check_choice(precision, PRECISIONS, "precision"),
        "attention": check_choice(attention, BACKENDS, "attention backend"),
    }
    tile_name = option_name("tile", cli)
    if tile != "auto" and (isinstance(tile, bool) or not isinstance(tile, Integral) or tile < 0):
        raise ConfigError(f"{tile_name} must be 'auto', 0 (whole image) or a positive size in pixels, got {tile!r}")
    if isinstance(tile, Integral) and tile > MAX_TILE:
        raise ConfigError(f"{tile_name} {tile} px is larger than any picture sst-cli reads; 0 runs the whole image")
    if tile_overlap is not None:
        check_count(tile_overlap, "tile_overlap", cli=cli)
    if not isinstance(exact, bool):  # exact="no" is true: it tiled by the receptive field unasked
        raise ConfigError(f"{option_name('exact', cli)} must be True or False, got {exact!r}")
    if exact and tile_overlap is not None:  # one of them would be ignored without a word
        exact_name, overlap_name = option_name("exact", cli), option_name("tile_overlap", cli)
        raise ConfigError(
            f"{exact_name} and {overlap_name} exclude each other: {exact_name} sets the overlap to the receptive field"
        )
    check_count(batch, "batch", cli=cli, least=1)
    memory_name = option_name("max_memory", cli)
    budget = memory_bytes(max_memory, memory_name)
    if budget is not None and budget <= 0:
        raise ConfigError(f"{memory_name} must be positive, got {max_memory}")
    choices["alpha"] = check_choice(alpha, ALPHA_MODES, "alpha mode")
    scale_name = option_name("outscale", cli)
    if outscale is not None:  # inf was "a positive number"
        check_number(outscale, "outscale", cli=cli)
    if outscale is not None and outscale > MAX_TILE:  # also keeps sizes finite (1e308 overflowed to a traceback)
        raise ConfigError(
            f"{scale_name} {outscale:g} makes even a 1 px picture larger than sst-cli writes (sides up to {MAX_TILE})"
        )
    if outscale is not None and outscale < MIN_OUTSCALE:
        raise ConfigError(
            f"{scale_name} {outscale:g} leaves less than 1 px of any picture's side; it must be "
            f"{MIN_OUTSCALE:.3g} or more"
        )
    if ig_lambda is not None:
        check_is_number(ig_lambda, "ig_lambda", cli=cli)
    if ig_lambda is not None and not math.isfinite(ig_lambda):
        raise ConfigError(f"{option_name('ig_lambda', cli)} {ig_lambda:g}: must be a finite number")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ConfigError(f"{option_name('seed', cli)} must be a non-negative integer, got {seed!r}")
    choices["compile"] = check_choice(compile, COMPILE_CHOICES, "compile choice")
    return choices


def compile_mode(mode: str) -> str:
    """The torch.compile mode ``--compile`` names; ``on`` / ``off`` as ``sst upscale --compile`` takes them."""
    text = mode.strip().lower() if isinstance(mode, str) else mode
    text = COMPILE_MODE_ALIASES.get(text, text)
    if text not in COMPILE_MODES:
        choices = ", ".join([*COMPILE_MODES, *(f"{k} (= {v})" for k, v in COMPILE_MODE_ALIASES.items())])
        raise ConfigError(f"unknown compile mode {mode!r} for --compile; choose one of {choices}")
    return text
