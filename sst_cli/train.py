"""Training SST networks, the engine behind ``sst train``. Nothing here prints: progress goes to callbacks.

The recipe is the authors' (their ``options/train/SSTlight_*.yaml``, repository dslisleedh/SST at 407d7d9):
L1 loss; AdamW, betas (0.9, 0.9), no weight decay; lr 5e-4 from scratch and 2.5e-4 when x3 / x4 start
from x2 / x3 weights; a linear warm-up; the lr halved at fixed fractions of the run (MultiStepLR,
milestones 250k/400k/450k/475k/490k of 500k); an EMA of the weights (decay 0.999), which is what is
saved and used. Pairs are made on the fly: a random HR crop of ``patch * scale`` pixels with a random
flip / transpose, and its LR by MATLAB-compatible bicubic ``imresize`` of the uint8 crop, which is how
the benchmark LR images are made.

A run is resumable across sessions: every ``checkpoint_every`` seconds (or ``checkpoint_iters`` steps), on
Ctrl-C / SIGTERM and at the end a state file (``trainstate.py``; ``<out stem>.state.pth`` unless ``state``
says otherwise) is written atomically, so ``resume=True`` continues exactly: interrupted and resumed gives
the same weights as one straight run, bit for bit.

Speed (issue 29): the images stay on the device as uint8 and patches are cut there (``PatchSampler``);
BF16 autocast keeps fp32 master weights; the loop never waits for the GPU except to report the loss every
``report_every`` steps; ``compile`` runs the network through ``torch.compile``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .archs.sst import SST, SSTConfig
from .checkpoint import read_metadata, read_weights
from .checks import option_flag, option_value
from .compiling import compile_network
from .errors import ConfigError, OutputExists, SstError, Terminated, TrainingDiverged, WriteError
from .files import atomic_save, clean_stale_temporaries, not_a_file, removing_unused_folders, unwritable
from .recipe import (
    BATCH_CPU,
    BATCH_CUDA,
    BETAS,
    LR_FROM_INIT,
    LR_GAMMA,
    LR_SCRATCH,
    WARMUP_FRACTION,
    WEIGHT_DECAY,
    milestones,
)
from .runtime import available_ram, is_out_of_memory, package_version, resolve_device
from .signals import catchable
from .trainconfig import TrainConfig, state_path
from .trainset import Message, PatchSampler, decode_images, find_images, fingerprint, large_enough
from .trainstate import (
    InitReport,
    capture_rng,
    check_resume,
    history_of,
    init_from,
    read_state,
    restore_rng,
    stretch,
    write_state,
)
from .zoo import check_scale, get_variant

__all__ = [
    "InitReport",
    "TrainConfig",
    "TrainResult",
    "TrainingInterrupted",
    "init_from",
    "learning_rate",
    "state_path",
    "train",
]

# A CPU step's peak over what its forward saves for the backward (measured on SST-light: 2.48 GiB at batch 4 and
# patch 64, 2.07 GiB saved).
_STEP_OVERHEAD = 1.2
# Settings kept in the state only, not in the weights' record: the network's config is stored on its own, the
# history has its own key, and ``replaces`` is a path on the user's disk.
_NOT_RECORDED = ("sst_config", "history", "replaces")
REPORT_EVERY_CUDA = 50  # steps between progress reports on a GPU: each one waits for it (on a CPU: every step)


@dataclass(frozen=True)
class TrainProgress:
    """One progress report: ``loss`` is the mean training L1 (pixels in [0, 1]) since the last report."""

    iteration: int
    iters: int
    loss: float
    lr: float
    elapsed: float  # training seconds, earlier sessions included
    rate: float  # iterations per second in this session


@dataclass(frozen=True)
class TrainResult:
    """How a run ended: ``finished`` when it reached ``iters``; ``out`` is None when it was interrupted."""

    out: Path | None
    state: Path
    iteration: int
    iters: int
    seconds: float
    losses: list[float] = field(repr=False)  # per-iteration training L1 of this session
    finished: bool
    stopped_by: str  # "done", "time limit" or "interrupted"
    images: int
    init: InitReport | None = None


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP: the state was saved first; still a KeyboardInterrupt, carrying the result and,
    as ``errors.Terminated`` does, the exit code a shell reports for that signal (130, 143, 129)."""

    def __init__(self, result: TrainResult, signum: int = signal.SIGINT) -> None:
        super().__init__("interrupted")
        self.result, self.signum = result, signum
        self.exit_code = 128 + signum


# --------------------------------------------------------------------------------------------- schedule


def learning_rate(iteration: int, iters: int, base: float, warmup: int) -> float:
    """lr of the step after ``iteration`` completed steps: linear warm-up, halved at MILESTONES of ``iters``."""
    halvings = sum(iteration >= step for step in milestones(iters))
    ramp = min(1.0, (iteration + 1) / warmup) if warmup > 0 else 1.0
    return base * ramp * LR_GAMMA**halvings


# ------------------------------------------------------------------------------------------------ files


def save_weights(
    path: Path, ema: dict[str, torch.Tensor], params: dict[str, torch.Tensor], metadata: dict[str, str], half: bool
) -> None:
    """The final weights: safetensors of the EMA (with sst_config metadata), or a .pth in the authors' layout."""
    dtype = torch.float16 if half else torch.float32

    def cast(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: (v.to(dtype) if v.is_floating_point() else v).detach().cpu().contiguous() for k, v in state.items()}

    if path.suffix.lower() == ".safetensors":
        from safetensors.torch import save_file

        atomic_save(path, lambda tmp: save_file(cast(ema), str(tmp), metadata=metadata))
    else:
        payload = {"params_ema": cast(ema), "params": cast(params), "meta": metadata}
        atomic_save(path, lambda tmp: torch.save(payload, tmp))


# ------------------------------------------------------------------------------------------------ train


def _check_finite(losses: list[float], iteration: int, lr: float, state_file: Path) -> None:
    """A NaN or infinite loss ends the run before anything is saved: the weights are ruined from there on, and
    saving them would replace the last good checkpoint."""
    bad = next((v for v in losses if not math.isfinite(v)), None)
    if bad is not None:
        kept = f"the last checkpoint, {state_file}, is kept" if state_file.is_file() else "nothing was saved"
        raise TrainingDiverged(
            f"training diverged by iteration {iteration}: the loss became {bad} (learning rate {lr:g} too high, or "
            f"bf16 overflowing?); {kept}"
        )


@contextlib.contextmanager
def _stop_requests() -> Iterator[list[int]]:
    """Ctrl-C / SIGTERM / SIGHUP (a closed terminal or SSH session) ask the loop to stop after the current step,
    which saves the state (a second signal stops at once); the list holds the signal's number, 0 until one came.
    Signals set to be ignored stay ignored (``nohup``: ``signals.catchable``)."""
    flag = [0]
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def request(signum: int, frame: object) -> None:
        if flag[0]:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)
        flag[0] = signum

    previous = {sig: signal.signal(sig, request) for sig in catchable("SIGINT", "SIGTERM", "SIGHUP")}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _cudnn_benchmark(device: torch.device) -> Iterator[None]:
    """Let cuDNN pick the fastest convolution kernels: every step has the same shapes."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = saved or device.type == "cuda"
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def _architecture(config: TrainConfig) -> tuple[str, SSTConfig]:
    """(name recorded in files, constructor config) of the network to train."""
    if isinstance(config.model, SSTConfig):
        arch = config.model
        if config.scale is not None:
            arch = replace(arch, upscaling_factor=check_scale(config.scale))
        return "custom", arch
    variant = get_variant(config.model, arch="sst")
    if variant.arch != "sst":
        raise ConfigError(f"sst train trains SST networks; {variant.name} is another architecture")
    built = variant.config(config.scale if config.scale is not None else 4)
    assert isinstance(built, SSTConfig)
    return variant.name, built


def _adamw(model: torch.nn.Module, lr: float) -> torch.optim.AdamW:
    """Fused AdamW: one kernel for all parameters and, unlike the per-tensor path, no ``.item()`` per step.

    torch < 2.4 has no fused kernel on the CPU; there the per-tensor path runs (a CPU does not wait anyway).
    """
    try:
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=WEIGHT_DECAY, fused=True)
    except RuntimeError:
        return torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, weight_decay=WEIGHT_DECAY)


def _network(
    config: TrainConfig,
    arch: SSTConfig,
    device: torch.device,
    saved: dict[str, Any] | None,
    say: Message,
    cli: bool = False,
) -> tuple[SST, InitReport | None]:
    """The seeded network, with the saved run's weights or ``--init``'s; built before any image is decoded, so
    that a bad ``--init`` is refused at once (it was found only after all the data was read)."""
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    np.random.seed(config.seed)
    model = SST(**arch.to_kwargs()).to(device)
    if saved is not None:
        model.load_state_dict(saved["params"])
        return model, None
    if config.init is None:
        return model, None
    init = init_from(model, config.init, cli=cli)
    say(init.summary())
    return model, init


class _TrainingRun:
    """The live objects of one run (network, EMA, optimizer, sampler) and their state file."""

    def __init__(
        self,
        config: TrainConfig,
        settings: dict[str, Any],
        device: torch.device,
        network: tuple[SST, InitReport | None],
        images: list[np.ndarray],
        saved: dict[str, Any] | None,
    ) -> None:
        self.config, self.settings, self.device = config, settings, device
        self.batch, self.warmup, self.base_lr = settings["batch"], settings["warmup"], settings["lr"]
        self.iters = settings["iters"]
        self.state_file = config.state_file
        self.model, self.init = network
        self.live = list(self.model.state_dict().values())  # views of the parameters, updated in place
        source = saved["params_ema"] if saved is not None else self.model.state_dict()
        self.ema = {k: v.detach().to(device=device, dtype=torch.float32, copy=True) for k, v in source.items()}
        self.optimizer = _adamw(self.model, self.base_lr)
        self.sampler = PatchSampler(images, config.patch, settings["scale"], config.seed, device)
        self.iteration, self.elapsed_before = 0, 0.0
        if saved is not None:
            self.optimizer.load_state_dict(saved["optimizer"])
            self.iteration, self.elapsed_before = int(saved["iteration"]), float(saved["elapsed"])
            restore_rng(saved["rng"], self.sampler.generator, device)
        self.bf16 = settings["precision"] == "bf16 autocast"
        self.forward: Callable[[torch.Tensor], torch.Tensor] = self.model
        if config.compile:  # the network only: the optimizer and EMA are already one fused kernel each
            self.forward = compile_network(self.model)[0]
        self.start = time.monotonic()

    def elapsed(self) -> float:
        """Training seconds, earlier sessions included."""
        return self.elapsed_before + time.monotonic() - self.start

    def lr(self) -> float:
        return learning_rate(self.iteration, self.iters, self.base_lr, self.warmup)

    def step(self) -> torch.Tensor:
        """One optimisation step and EMA update; returns the loss without waiting for the GPU."""
        lr = self.lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        lr_img, hr_img = self.sampler.sample(self.batch)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            sr = self.forward(lr_img)  # parameters stay float32: autocast casts copies for the matmuls
        loss = F.l1_loss(sr.float(), hr_img)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.iteration += 1
        decay = min(self.config.ema_decay, (1 + self.iteration) / (10 + self.iteration))  # warmed up for short runs
        with torch.no_grad():
            torch._foreach_lerp_(list(self.ema.values()), self.live, 1.0 - decay)
        return loss.detach()

    def save_state(self) -> None:
        """The resumable state, in the authors' layout (``params``, ``params_ema``) plus what resuming needs."""
        scheduler = {
            "milestones": milestones(self.iters),
            "gamma": LR_GAMMA,
            "warmup": self.warmup,
            "base_lr": self.base_lr,
            "next_lr": self.lr(),
        }
        payload = {
            "params": self.model.state_dict(),
            "params_ema": self.ema,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": scheduler,
            "iteration": self.iteration,
            "elapsed": self.elapsed(),
            "rng": capture_rng(self.sampler.generator, self.device),
            "settings": self.settings,
        }
        write_state(self.state_file, payload)

    def save_weights(self, images: int) -> None:
        """The EMA weights to ``out``, with metadata that says who trained them on what."""
        settings = self.settings
        device = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        metadata = {
            "sst_config": json.dumps(settings["sst_config"]),
            "variant": settings["model"],
            "scale": str(settings["scale"]),
            "trained_by": "sst-cli",
            "sst_cli_version": package_version(),
            "weights": "params_ema",
            "data": ", ".join(settings["data"]),
            "images": str(images),
            "iterations": str(self.iteration),
            "planned_iterations": str(self.config.iters),
            "batch": str(self.batch),
            "patch": str(self.config.patch),
            "lr": str(self.base_lr),
            "ema_decay": str(self.config.ema_decay),
            "seconds": str(round(self.elapsed())),
            "device": device,
            "init": Path(settings["init"]).name if settings["init"] else "",
            "training_settings": json.dumps({k: v for k, v in settings.items() if k not in _NOT_RECORDED}),
            "run": settings.get("run") or "",
        }
        earlier = settings.get("history") or []
        if earlier:  # the flat keys above are the last stretch's: the history says what made the other iterations
            last = stretch(settings, earlier[-1]["iterations"][1] + 1, self.iteration)
            metadata["history"] = json.dumps([s for s in [*earlier, last] if s["iterations"][0] <= s["iterations"][1]])
        if settings["model"] != "custom":  # a zoo name: say whose architecture, and that the weights are ours
            variant = get_variant(settings["model"])
            metadata["architecture"] = variant.base or variant.name
            metadata["source"] = f"trained by sst-cli ({metadata['data']}), not the paper's weights"
        save_weights(self.config.out, self.ema, self.model.state_dict(), metadata, self.config.half)


def _precision(requested: str, device: torch.device) -> str:
    """The precision recorded in the settings: "bf16 autocast" or "fp32"."""
    has_bf16 = device.type != "cuda" or torch.cuda.is_bf16_supported()
    if requested == "bf16" and not has_bf16:
        raise ConfigError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16; use fp32")
    bf16 = requested == "bf16" or (requested == "auto" and device.type == "cuda" and has_bf16)
    return "bf16 autocast" if bf16 else "fp32"


def planned_settings(config: TrainConfig) -> dict[str, Any]:
    """Every setting of a run with its defaults resolved (recorded in its files), without reading any data."""
    config.check()
    name, arch = _architecture(config)
    device = resolve_device(config.device)
    cuda = device.type == "cuda"
    return {
        "model": name,
        "scale": arch.scale,
        "sst_config": arch.to_kwargs(),
        "iters": config.iters,
        "batch": config.batch or (BATCH_CUDA if cuda else BATCH_CPU),
        "patch": config.patch,
        "lr": config.lr or (LR_FROM_INIT if config.init is not None else LR_SCRATCH),
        "warmup": config.warmup if config.warmup is not None else round(WARMUP_FRACTION * config.iters),
        "ema_decay": config.ema_decay,
        "seed": config.seed,
        "data": [str(p) for p in config.data],
        "init": None if config.init is None else str(config.init),
        "device": str(device),
        "precision": _precision(config.precision, device),
        "compile": config.compile,
        "report_every": config.report_every or (REPORT_EVERY_CUDA if cuda else 1),
    }


def _prepare(config: TrainConfig, settings: dict[str, Any], say: Message, cli: bool = False) -> dict[str, Any] | None:
    """The saved state to resume (its settings merged into ``settings``), or None; refuses clobbering a run.
    ``cli``: name the options as the command line spells them (``--resume``), not as keywords (``resume=True``)."""
    state_file = config.state_file
    if not config.resume:
        if not config.overwrite:
            for path in (config.out, state_file):
                if path.exists():
                    raise OutputExists(
                        f"{path} exists: pass {option_flag('resume', cli)} to continue that run, or "
                        f"{option_flag('overwrite', cli)} to start over"
                    )
        settings["run"] = secrets.token_hex(8)  # names the run in its state and weights
        settings["history"] = []
        if config.overwrite and config.out.exists():  # resuming may replace it too: it was asked to
            settings["replaces"] = str(config.out.resolve())
        return None
    saved = read_state(state_file, cli=cli)
    settings["run"] = saved["settings"].get("run")
    settings["replaces"] = saved["settings"].get("replaces")
    run = settings["run"]  # None: a state of an older sst-cli, which named no run
    if run is not None and config.out.exists() and settings["replaces"] != str(config.out.resolve()):
        _check_written_by(config.out, run, state_file)
    for key in ("batch", "lr", "warmup"):  # defaults follow the saved run, not this command's --init
        if getattr(config, key) is None:
            settings[key] = saved["settings"][key]
    changed = check_resume(saved, settings, state_file, cli=cli)
    if changed:
        named = ", ".join("data" if key == "data_files" else key for key in changed)
        say(f"resuming with changed {named}: the run continues, but not exactly as planned")
    settings["history"] = history_of(saved, changed)  # the earlier stretches, for the weights' record
    if int(saved["iteration"]) >= config.iters:
        say(f"{state_file} already reached iteration {saved['iteration']} of --iters {config.iters}: nothing is "
            "left to train (a larger --iters goes on); the weights are written again")  # fmt: skip
    settings["init"] = saved["settings"].get("init")
    return saved


def _check_written_by(out: Path, run: str, state_file: Path) -> None:
    """Resuming writes ``out`` again: refused unless the run in ``state_file`` wrote it; a file that cannot be read
    at all is said to be damaged (it was said to be another run's)."""
    if read_metadata(out).get("run") == run:
        return
    try:
        read_weights(out)
    except SstError as exc:
        raise OutputExists(
            f"--out {exc}: if the run in {state_file} wrote it, delete it and --resume writes it again; otherwise "
            "give this run another --out"
        ) from None
    raise OutputExists(
        f"{out} exists and was not written by the run in {state_file}: give that run's --out, or move the file away"
    )


def train(
    config: TrainConfig,
    *,
    on_progress: Callable[[TrainProgress], None] | None = None,
    on_message: Message | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    cli: bool = False,
) -> TrainResult:
    """Train (or, with ``resume``, continue) one network and save its EMA weights to ``config.out`` (``_train``),
    holding ``--out`` and ``--state`` for the whole run: a second run naming either is refused at once (two runs
    writing one file both ended 'saved', and one of them was lost). Folders made for them are removed again
    when the run ends having written nothing there (refused, failed or interrupted before its first save).
    ``cli``: refusals name the options as ``sst train`` spells them (``--resume``), not as keywords (``resume``)."""
    config.check()  # the two files differ, and other settings, before either is claimed
    made = removing_unused_folders([config.out.parent, config.state_file.parent])
    with made, _claimed([("--out", config.out), ("--state", config.state_file)]):
        return _train(config, on_progress=on_progress, on_message=on_message, on_start=on_start, cli=cli)


@contextlib.contextmanager
def _claimed(paths: list[tuple[str, Path]]) -> Iterator[None]:
    """Hold a lock beside each file this run writes (released by the system if the process dies)."""
    from filelock import FileLock, Timeout

    with contextlib.ExitStack() as held:
        for option, path in paths:
            why = not_a_file(path)  # a device or pipe: said now, not at the first save
            if why is not None:
                raise WriteError(f"{option} {path}: {why}")
            why = unwritable(path.parent)  # made if missing, proved with a real file
            if why is not None:
                raise WriteError(f"{option} {path}: cannot write into '{path.parent}': {why}")
            lock = FileLock(str(path.with_name(f".{path.name}.lock")))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                raise ConfigError(
                    f"{option} {path}: another sst train is writing it now; wait for it, or give this run its own "
                    "--out / --state"
                ) from None
            held.callback(_release, lock)
        yield


def _release(lock: Any) -> None:
    lock.release()
    with contextlib.suppress(OSError):
        os.unlink(lock.lock_file)


def _check_cpu_memory(run: _TrainingRun, cli: bool) -> None:
    """Refuse a batch whose step cannot fit in RAM: on the CPU nothing raises an out-of-memory error, the kernel
    kills the process (``--batch 100000``: exit 137 without a word, after taking all 24 GB). The need is what one
    patch's forward saves for the backward, times the batch, plus the weights, gradients, AdamW moments and EMA;
    measured on a batch of one (the sampler's and torch's random states are left untouched)."""
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    patch = run.config.patch
    keep_rng, hooks = torch.random.fork_rng(devices=[]), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    with keep_rng, hooks, torch.autocast("cpu", dtype=torch.bfloat16, enabled=run.bf16):
        run.model(torch.zeros(1, 3, patch, patch))  # eager: a compiled forward would compile for this batch too
    weights = sum(p.numel() * 4 for p in run.model.parameters())
    need = sum(saved.values()) * run.batch * _STEP_OVERHEAD + 5 * weights
    free = available_ram()
    if need > free:
        batch, patch_option = option_value("batch", run.batch, cli), option_value("patch", patch, cli)
        raise ConfigError(
            f"training with {batch} and {patch_option} needs about {need / 2**30:.1f} GiB of memory on the CPU, "
            f"and {free / 2**30:.1f} GiB are available: lower them"
        )


def _train(
    config: TrainConfig,
    *,
    on_progress: Callable[[TrainProgress], None] | None = None,
    on_message: Message | None = None,
    on_start: Callable[[dict[str, Any]], None] | None = None,
    cli: bool = False,
) -> TrainResult:
    """Train (or, with ``resume``, continue) one network and save its EMA weights to ``config.out``.

    ``on_start`` gets the resolved settings (see ``planned_settings``, plus ``images`` and ``iteration``)
    once the data is loaded and the network is ready. Progress is reported every ``report_every`` steps,
    the only points where the loop waits for the GPU. Raises TrainingInterrupted (a KeyboardInterrupt)
    after saving the state when Ctrl-C or SIGTERM arrives.
    """
    say: Message = on_message or (lambda _text: None)
    settings = planned_settings(config)
    device = torch.device(settings["device"])
    state_file = config.state_file
    files = find_images(config.data, say, cli=cli)
    settings["data_files"] = fingerprint(files)
    saved = _prepare(config, settings, say, cli)
    if settings["warmup"] >= config.iters:
        say(f"--warmup {settings['warmup']} is not shorter than --iters {config.iters}: the peak lr is never reached")
    for folder in dict.fromkeys((config.out.parent, state_file.parent)):
        clean_stale_temporaries(folder, say, held=(config.out, state_file))  # what a killed run left half-written
    usable = large_enough(files, config.patch * settings["scale"], say, cli=cli)  # headers only
    network = _network(config, SSTConfig.from_kwargs(settings["sst_config"]), device, saved, say, cli)
    images = decode_images(usable)
    run = _TrainingRun(config, settings, device, network, images, saved)
    if device.type == "cpu":
        _check_cpu_memory(run, cli)
    if on_start is not None:
        on_start({**settings, "images": len(images), "iteration": run.iteration, "state": str(state_file)})
    first, every = run.iteration, settings["report_every"]
    losses: list[float] = []
    pending: list[torch.Tensor] = []  # losses still on the device, read at the next report
    last_save = run.start
    stopped_by = "done"
    run.model.train()
    # the handlers stay until the final state and weights are written: a signal then lets the write finish
    with _stop_requests() as stop:
        with _cudnn_benchmark(device):
            while run.iteration < config.iters:
                if stop[0]:
                    stopped_by = "interrupted"
                    break
                if config.time_limit is not None and time.monotonic() - run.start >= config.time_limit:
                    stopped_by = "time limit"
                    break
                lr = run.lr()
                try:
                    pending.append(run.step())
                except Exception as exc:  # an allocator failure is the settings' fault: one sentence, not a traceback
                    if not is_out_of_memory(exc):
                        raise
                    batch, patch = (
                        option_value("batch", settings["batch"], cli),
                        option_value("patch", config.patch, cli),
                    )
                    raise ConfigError(
                        f"out of memory at iteration {run.iteration + 1} with {batch} and {patch} on "
                        f"{settings['device']}: lower them (the last checkpoint, if any, is kept)"
                    ) from None
                if run.iteration % every == 0 or run.iteration in (first + 1, config.iters):
                    values = torch.stack(pending).tolist()  # the one place the loop waits for the GPU
                    _check_finite(values, run.iteration, lr, state_file)
                    losses += values
                    pending.clear()
                    if on_progress is not None:
                        now = time.monotonic()
                        rate = (run.iteration - first) / max(now - run.start, 1e-9)
                        mean = sum(values) / len(values)
                        on_progress(TrainProgress(run.iteration, config.iters, mean, lr, run.elapsed(), rate))
                by_steps = config.checkpoint_iters > 0 and run.iteration % config.checkpoint_iters == 0
                by_time = config.checkpoint_every > 0 and time.monotonic() - last_save >= config.checkpoint_every
                if (by_steps or by_time) and run.iteration < config.iters:  # 0 turns either off
                    try:
                        run.save_state()
                        say(f"checkpoint: iteration {run.iteration}, state saved to {state_file}")
                    except WriteError as exc:  # a full disk must not end hours of training: the weights still come
                        say(
                            f"checkpoint at iteration {run.iteration} not saved ({exc}); "
                            "training goes on and tries again"
                        )
                    last_save = time.monotonic()
        if pending:
            losses += torch.stack(pending).tolist()
            _check_finite(losses[-len(pending) :], run.iteration, run.lr(), state_file)
        state_error: WriteError | None = None
        try:
            run.save_state()
        except WriteError as exc:
            if stopped_by == "interrupted":
                raise
            state_error = exc
        result = TrainResult(
            out=None,
            state=state_file,
            iteration=run.iteration,
            iters=config.iters,
            seconds=run.elapsed(),
            losses=losses,
            finished=run.iteration >= config.iters,
            stopped_by=stopped_by,
            images=len(images),
            init=run.init,
        )
        if stopped_by == "interrupted":
            raise TrainingInterrupted(result, stop[0])
        try:
            run.save_weights(len(images))
        except WriteError as exc:
            saved_state = (
                f"the state for --resume was saved to {state_file}"
                if state_error is None
                else ("the state for --resume could not be written either: nothing of this run was saved")
            )
            raise WriteError(f"{exc}; {saved_state}") from None
        if state_error is not None:  # the weights are written; only the state for a later --resume is missing
            raise WriteError(f"{state_error}; the weights were written to {config.out}, the state for --resume was not")
        return replace(result, out=config.out)
