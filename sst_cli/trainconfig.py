"""The settings of one training run and the checks that need neither torch nor data (``sst train``'s refusals
answer at once; ``train.py`` runs them too for API callers)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .checks import check_number, check_whole, option_name
from .errors import ConfigError, WeightsNotFound
from .recipe import CHECKPOINT_EVERY, EMA_DECAY, MAX_ITERS, PATCH
from .zoo import SCALES

if TYPE_CHECKING:
    from .archs.sst import SSTConfig

PRECISIONS = ("auto", "bf16", "fp32")  # auto: bf16 autocast on a GPU that has it, else fp32
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt")


def state_path(out: str | os.PathLike[str]) -> Path:
    """Where the training state of a run writing ``out`` lives by default: beside it, ``<stem>.state.pth``."""
    out = Path(out)
    return out.with_name(out.stem + ".state.pth")


@dataclass(frozen=True)
class TrainConfig:
    """One training run. ``model`` is a zoo name or an explicit architecture; ``None`` fields pick defaults."""

    data: tuple[Path, ...]
    out: Path
    iters: int
    model: str | SSTConfig = "sst-light"
    scale: int | None = None  # default: the SSTConfig's scale, or 4 for a zoo name
    patch: int = PATCH
    batch: int | None = None  # default BATCH_CUDA on a GPU, BATCH_CPU on the CPU
    lr: float | None = None  # default LR_SCRATCH, or LR_FROM_INIT with ``init``
    warmup: int | None = None  # iterations; default WARMUP_FRACTION of ``iters``
    ema_decay: float = EMA_DECAY
    seed: int = 0
    device: str = "auto"
    checkpoint_every: float = CHECKPOINT_EVERY  # seconds between state saves (0: not by time)
    checkpoint_iters: int = 0  # also save every this many steps (0: not by steps)
    time_limit: float | None = None  # seconds of training in this session
    init: Path | None = None  # weights or a training state of another scale to start from
    resume: bool = False  # continue the run saved in ``state``
    state: Path | None = None  # the training state file; default ``state_path(out)``
    overwrite: bool = False
    half: bool = False  # save the final weights as float16
    precision: str = "auto"  # "bf16" (autocast, fp32 master weights), "fp32", or auto
    compile: bool = False  # run the network through torch.compile
    report_every: int | None = None  # steps between progress reports; default 1 on a CPU, 50 on a GPU

    def __post_init__(self) -> None:
        """Accept str / PathLike paths and one folder or any sequence of folders from API callers (``data='/x'``
        was read as the folders '/' and 'x'); ``--precision`` in any letter
        case, as the other commands take it (``FP32`` was refused)."""
        folders = (self.data,) if isinstance(self.data, str | os.PathLike) else self.data  # one folder, not letters
        object.__setattr__(self, "data", tuple(Path(p) for p in folders))
        if isinstance(self.precision, str):
            object.__setattr__(self, "precision", self.precision.strip().lower())
        object.__setattr__(self, "out", Path(self.out))
        for name in ("init", "state"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))

    @property
    def state_file(self) -> Path:
        """Where the training state is read (``resume``) and written."""
        return self.state if self.state is not None else state_path(self.out)

    def check(self, cli: bool = False) -> None:
        """Refuse invalid settings before torch is imported or any image is read. ``cli``: name the options as
        the command line spells them (``--lr``), not as the keywords an API caller gave (``lr``)."""
        self._check_numbers(cli)

        def named(name: str) -> str:
            return option_name(name, cli)

        checks = [
            (self.iters >= 1, f"{named('iters')} must be at least 1, got {self.iters}"),
            (
                self.iters <= MAX_ITERS,
                f"{named('iters')} must be at most {MAX_ITERS:,} (the paper trains 500,000), got {self.iters}",
            ),
            (
                self.scale is None or self.scale in SCALES,
                f"{named('scale')} must be one of {', '.join(map(str, SCALES))}, got {self.scale}",
            ),
            (self.patch >= 1, f"{named('patch')} must be at least 1 LR pixel, got {self.patch}"),
            (self.batch is None or self.batch >= 1, f"{named('batch')} must be at least 1, got {self.batch}"),
            (self.warmup is None or self.warmup >= 0, f"{named('warmup')} must be >= 0 iterations, got {self.warmup}"),
            (
                0 <= self.seed < 2**32,
                f"{named('seed')} must be between 0 and 2**32 - 1 (numpy's range), got {self.seed}",
            ),
            (
                self.checkpoint_iters >= 0,
                f"{named('checkpoint_iters')} must be >= 0 steps, got {self.checkpoint_iters}",
            ),
            (
                self.report_every is None or self.report_every >= 1,
                f"{named('report_every')} must be at least 1 step, got {self.report_every}",
            ),
            (
                self.precision in PRECISIONS,
                f"{named('precision')} must be one of {', '.join(PRECISIONS)}, got {self.precision!r}",
            ),
            (
                not (self.resume and self.init),
                f"{named('resume')} continues the saved run, which began already: drop {named('init')}",
            ),
            (
                not (self.resume and self.overwrite),
                f"{named('resume')} and {named('overwrite')} exclude each other: continue or restart",
            ),
            (bool(self.data), f"give at least one {named('data')} folder"),
            (
                self.out.suffix.lower() in WEIGHT_SUFFIXES,
                f"{named('out')} {self.out}: name it .safetensors (recommended), .pth or .pt",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self._check_paths(cli)

    def _check_numbers(self, cli: bool) -> None:
        """The whole-number settings are integers; the float settings finite, and where only some values mean
        anything, one of those (``--lr inf`` was 'must be positive', ``--checkpoint-every inf`` and ``--time-limit
        inf`` were taken)."""
        for name in ("iters", "scale", "patch", "batch", "warmup", "seed", "checkpoint_iters", "report_every"):
            if getattr(self, name) is not None:  # before any comparison: ``iters="3"`` met a bare TypeError
                check_whole(getattr(self, name), name, cli=cli)
        if self.lr is not None:
            check_number(self.lr, "lr", cli=cli)
        check_number(self.ema_decay, "ema_decay", cli=cli, least=0, below=1)
        check_number(self.checkpoint_every, "checkpoint_every", cli=cli, least=0, unit="seconds")
        if self.time_limit is not None:  # in seconds: ``sst train`` checks its minutes before converting them
            check_number(self.time_limit, "time_limit", cli=cli, unit="seconds")

    def _check_paths(self, cli: bool) -> None:
        """The weights written, the state and the weights started from are three different files, and the
        state is a .pth (``--state im0.png --overwrite`` replaced a training image). ``cli``: as in ``check``;
        ``sst train --resume STATE`` sets the keywords ``resume=True, state=STATE``."""
        out, init = option_name("out", cli), option_name("init", cli)
        state = self.state_file
        resumed_by = cli and self.resume and self.state is not None  # --resume STATE, as the user typed it
        state_option = option_name("resume" if resumed_by else "state", cli)
        for option, path in ((out, self.out), (state_option, state)):
            if path.is_dir():
                raise ConfigError(f"{option} {path}: a folder; name the file to write")
        if state.suffix.lower() not in (".pth", ".pt"):
            if self.resume:
                writer = "sst train" if cli else "train"
                raise ConfigError(f"{state_option} {state}: a training state is a .pth that {writer} wrote beside "
                                  f"{out} (weights to start from go to {init})")  # fmt: skip
            raise ConfigError(f"{state_option} {state}: name it .pth (a training state is a PyTorch checkpoint)")
        named = [(out, self.out), (state_option, state)] + ([(init, self.init)] if self.init else [])
        for i, (option, path) in enumerate(named):
            for other, same in named[i + 1 :]:
                if os.path.realpath(path) == os.path.realpath(same):
                    raise ConfigError(f"{option} and {other} name the same file, {path}: give each its own")
        if self.init is not None and not self.init.is_file():
            raise WeightsNotFound(f"{init} {self.init}: no such weights file")  # exit 1, as a missing --weights
