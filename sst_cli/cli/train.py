"""``sst train``: check options, run the training API, show progress, log lines and a summary."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from ..recipe import EMA_DECAY, PATCH, milestones
from ._options import DeviceOption, path_text, refuse_stdio
from .output import as_markup, console, err_console, fail, handle_errors, note

if TYPE_CHECKING:
    from ..train import TrainProgress, TrainResult


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


class TrainReporter:
    """Progress bar on a terminal, a log line every ``log_every`` seconds, notes on stderr."""

    def __init__(self, *, quiet: bool, log_every: float) -> None:
        self.quiet, self.log_every = quiet, log_every
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.last_log = float("-inf")
        self.seen, self.loss_sum, self.loss_count = 0, 0.0, 0  # training L1 since the last log line
        self.started = False  # the data is loaded and the network ready: from here on, stopping saves the state

    @contextmanager
    def running(self, total: int) -> Iterator[None]:
        if self.quiet or not err_console.is_terminal:
            yield
            return
        columns = (
            TextColumn("training"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TimeRemainingColumn(),
        )
        # stdout is not redirected into the bar: a piped log must stay in the pipe (see ``log``)
        with Progress(*columns, console=err_console, transient=True, redirect_stdout=False) as progress:
            self.progress, self.task = progress, progress.add_task("train", total=total, loss="-")
            try:
                yield
            finally:
                self.progress = None

    def start(self, plan: dict[str, Any]) -> None:
        """The resolved settings, once the data is loaded: what is about to run."""
        self.started = True
        if self.quiet:
            return
        iters, scale, patch = plan["iters"], plan["scale"], plan["patch"]
        halved = ", ".join(map(str, milestones(iters)))
        resumed = f", resuming at iteration {plan['iteration']}" if plan["iteration"] else ""
        console.print(
            f"training {plan['model']} x{scale} on {plan['images']} images from {', '.join(plan['data'])}: "
            f"{iters} iterations{resumed}, batch {plan['batch']}, LR patch {patch} (HR {patch * scale}), "
            f"lr {plan['lr']:g} (warm-up {plan['warmup']}, halved at {halved}), EMA {plan['ema_decay']}, "
            f"{plan['device']} ({plan['precision']}{', compiled' if plan['compile'] else ''}), "
            f"loss read every {plan['report_every']} steps",
            markup=False,
            soft_wrap=True,
        )
        self.seen = plan["iteration"]
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=plan["iteration"])

    def note(self, text: str) -> None:
        if not self.quiet:
            note(text)

    def update(self, p: TrainProgress) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=p.iteration, loss=f"{p.loss:.4f}")
        steps, self.seen = p.iteration - self.seen, p.iteration
        self.loss_sum, self.loss_count = self.loss_sum + p.loss * steps, self.loss_count + steps
        now = time.monotonic()
        if self.quiet or (now - self.last_log < self.log_every and p.iteration != p.iters):
            return
        loss = self.loss_sum / max(self.loss_count, 1)
        self.last_log, self.loss_sum, self.loss_count = now, 0.0, 0
        left = _minutes((p.iters - p.iteration) / p.rate) if p.rate > 0 else "?"
        self.log(
            f"iter {p.iteration:>7}/{p.iters}  loss {loss:.4f}  lr {p.lr:.2e}  {p.rate:.2f} it/s  "
            f"elapsed {_minutes(p.elapsed)}  left {left}"
        )

    def log(self, line: str) -> None:
        """A log line on stdout; on a terminal that also shows the bar, above the bar rather than into it."""
        live = self.progress is not None and console.is_terminal
        target = self.progress.console if live and self.progress is not None else console
        target.print(line, markup=False, soft_wrap=True)


def _to_continue(state: str, overwrite: bool) -> str:
    """How to continue a stopped run: ``--resume`` and ``--overwrite`` exclude each other, so a run started over
    is continued without the latter (the state remembers that it may replace --out)."""
    return f"the same command {'without --overwrite, ' if overwrite else ''}plus --resume {state}"


def _summary(result: TrainResult, half: bool, overwrite: bool) -> None:
    tail = result.losses[-100:]
    loss = f"; training L1 {sum(tail) / len(tail):.4f} (mean of the last {len(tail)})" if tail else ""
    kind = "float16" if half else "float32"
    if result.finished:
        console.print(
            f"done: {result.iteration} iterations, {_minutes(result.seconds)} of training{loss}", soft_wrap=True
        )
    else:
        console.print(
            f"stopped by the time limit at iteration {result.iteration} of {result.iters}{loss}; "
            f"continue with {_to_continue(str(result.state), overwrite)}",
            markup=False,
            soft_wrap=True,
        )
    console.print(f"EMA weights ({kind}): {result.out}", markup=False, soft_wrap=True)
    console.print(f"training state: {result.state}", markup=False, soft_wrap=True)


def _stopped_by(code: int) -> str:
    """How a signal's exit code reads: Ctrl-C's 130 is an interrupt, others name their signal."""
    return "interrupted" if code == 130 else f"stopped by signal {code - 128}"


@handle_errors
def train(
    data: Annotated[
        list[Path],
        typer.Option(
            "--data",
            metavar="DIR",
            help="Folder of training images (searched recursively); repeat for several.",
            parser=path_text,
        ),
    ],
    iters: Annotated[
        int, typer.Option("--iters", metavar="N", help="Iterations of the whole run (the lr schedule spans them).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help="Weights to write: .safetensors (recommended), or .pth / .pt (PyTorch, the authors' layout).",
            parser=path_text,
        ),
    ],
    model: Annotated[
        str | None, typer.Option("--model", "-m", metavar="NAME", help="Zoo architecture to train (default sst-light).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", metavar="JSON", help="JSON of SST constructor keywords instead of --model.", parser=path_text
        ),
    ] = None,
    scale: Annotated[
        int | None,
        typer.Option(
            "--scale",
            "-s",
            metavar="N",
            help="Upscaling factor: 2, 3 or 4 (default 4, or --config's upscaling_factor).",
        ),
    ] = (None),
    init: Annotated[
        Path | None,
        typer.Option(
            "--init",
            metavar="FILE",
            help="Start from these weights or training state (e.g. x2 for x3); the upsampler is adapted.",
            parser=path_text,
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume", metavar="STATE", help="Continue the run saved in this training state file.", parser=path_text
        ),
    ] = None,
    state: Annotated[
        Path | None,
        typer.Option(
            "--state",
            metavar="FILE",
            help="Where to keep the training state (default <out stem>.state.pth).",
            parser=path_text,
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Start over, replacing --out and its state.")] = False,
    patch: Annotated[
        int, typer.Option("--patch", metavar="PX", help="LR patch side in pixels (HR = patch x scale).")
    ] = PATCH,
    batch: Annotated[
        int | None, typer.Option("--batch", metavar="N", help="Patches per step (default 16 on GPU, 4 on CPU).")
    ] = (None),
    lr: Annotated[
        float | None,
        typer.Option("--lr", metavar="RATE", help="Peak learning rate (default 5e-4; 2.5e-4 with --init)."),
    ] = None,
    warmup: Annotated[
        int | None, typer.Option("--warmup", metavar="N", help="Linear warm-up iterations (default 4% of --iters).")
    ] = None,
    ema_decay: Annotated[
        float, typer.Option("--ema-decay", metavar="D", help="EMA decay of the saved weights.")
    ] = EMA_DECAY,
    seed: Annotated[
        int, typer.Option("--seed", metavar="N", help="Seed of the initialisation and of the patches.")
    ] = 0,
    device: DeviceOption = "auto",
    checkpoint_every: Annotated[
        float,
        typer.Option(
            "--checkpoint-every", metavar="SECONDS", help="Seconds between saves of the training state (0: off)."
        ),
    ] = 300.0,
    checkpoint_iters: Annotated[
        int, typer.Option("--checkpoint-iters", metavar="N", help="Also save the state every N steps (0: off).")
    ] = 0,
    precision: Annotated[
        str,
        typer.Option(
            "--precision", metavar="auto|fp32|bf16", help="auto (bf16 on a GPU that has it), bf16 (autocast) or fp32."
        ),
    ] = "auto",
    compile_: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="A flag (no value), unlike upscale's --compile auto|on|off: run the network through "
            "torch.compile (pays off on long GPU runs).",
        ),
    ] = False,
    report_every: Annotated[
        int | None,
        typer.Option("--report-every", metavar="N", help="Steps between loss reads (default 1 on CPU, 50 on GPU)."),
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            "--time-limit", metavar="MINUTES", help="Stop cleanly (saving everything) after this many minutes."
        ),
    ] = None,
    half: Annotated[bool, typer.Option("--half", help="Save the final weights as float16.")] = False,
    log_every: Annotated[
        float, typer.Option("--log-every", metavar="SECONDS", help="Seconds between log lines (1 or more).")
    ] = 30.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors and the final summary.")] = False,
) -> None:
    """Train an SST network on your images (L1, AdamW, EMA; the authors' schedule scaled to --iters).

    LR patches are made from random HR crops with MATLAB-compatible bicubic downscaling; benchmark test
    sets (Set5, Set14, B100, Urban100, Manga109, DIV2K valid) are refused as training data. The state is
    saved every --checkpoint-every seconds (or --checkpoint-iters steps), at the end and on Ctrl-C, so the
    same command plus --resume STATE continues across sessions exactly where it stopped.
    Exit status: 0 done (or stopped by --time-limit); 1 a file could not be read or written (an image in
    --data, --init, --resume, a folder) or would be replaced (an existing --out: add --resume or --overwrite),
    or the loss diverged; 2 invalid options (or --batch / --patch too large for the memory); 130 interrupted
    by Ctrl-C, 143 by SIGTERM, 129 by SIGHUP (the state is saved once training has begun).
    """
    from ..checks import check_device_name, check_number
    from ..errors import ConfigError
    from ..trainconfig import TrainConfig

    refuse_stdio(
        {"--data": data, "--out": out, "--config": config, "--init": init, "--resume": resume, "--state": state}
    )
    if model is not None and config is not None:
        raise ConfigError("give --model or --config, not both")
    if resume is not None and state is not None and resume != state:
        raise ConfigError("--resume STATE keeps writing STATE: give --resume or --state, not both")
    if time_limit is not None:  # in minutes here, as typed; TrainConfig holds seconds
        check_number(time_limit, "time_limit", cli=True, unit="minutes")
    check_number(log_every, "log_every", cli=True, least=1, unit="seconds")  # -1 or 0 printed a line every step
    settings = TrainConfig(
        data=tuple(data),
        out=out,
        iters=iters,
        model=model or "sst-light",
        scale=scale,
        patch=patch,
        batch=batch,
        lr=lr,
        warmup=warmup,
        ema_decay=ema_decay,
        seed=seed,
        device=device,
        checkpoint_every=checkpoint_every,
        checkpoint_iters=checkpoint_iters,
        time_limit=None if time_limit is None else time_limit * 60.0,
        init=init,
        resume=resume is not None,
        state=resume if resume is not None else state,
        overwrite=overwrite,
        half=half,
        precision=precision,
        compile=compile_,
        report_every=report_every,
    )
    settings.check(cli=True)  # before torch is imported: a refused option answers at once
    check_device_name(device, cli=True)

    from ..runtime import resolve_device
    from ..train import TrainingInterrupted
    from ..train import train as run_training

    resolve_device(device, cli=True)  # a device PyTorch cannot use, said as the command line spells it

    if config is not None:
        from ..archs.sst import SSTConfig
        from ..loader import read_config_kwargs

        kwargs = read_config_kwargs(config)  # its refusals name the file; the keywords' are given its name here
        try:
            settings = replace(settings, model=SSTConfig.from_kwargs(kwargs))
        except ConfigError as exc:
            raise ConfigError(f"config {config}: {exc}") from exc
    reporter = TrainReporter(quiet=quiet, log_every=log_every)
    with reporter.running(iters):
        try:
            result = run_training(
                settings, on_progress=reporter.update, on_message=reporter.note, on_start=reporter.start, cli=True
            )
        except TrainingInterrupted as stop:
            r, saved = stop.result, as_markup(str(stop.result.state))
            raise fail(
                f"{_stopped_by(stop.exit_code)} at iteration {r.iteration} of {r.iters}; training state saved to "
                f"{saved}: to continue, run {_to_continue(saved, overwrite)}",
                stop.exit_code,
            ) from None
        except KeyboardInterrupt as exc:  # before the loop began, or a second signal: nothing saved by this one
            code = getattr(exc, "exit_code", 130)
            said = (
                "while training, before the state could be saved: the last checkpoint, if any, is kept"
                if reporter.started
                else "before training began: nothing was written"
            )
            raise fail(f"{_stopped_by(code)} {said}", code) from None
    _summary(result, half, overwrite)
