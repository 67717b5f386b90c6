"""Several worker processes in one batch: one per device of ``--device cuda:0,cuda:1`` / ``cuda:all``, or
``--workers N`` on one device (each CPU worker with its share of the cores).

The parent plans every output (names claimed, existing files skipped or refused) exactly as a one-process
batch does, then hands only the files to compute to a ``ProcessPoolExecutor`` (``spawn`` context: CUDA and
macOS need it). Each worker loads its ``Upscaler`` once. Workers send progress through one
``multiprocessing`` queue; the parent alone calls the front end's callbacks, so there is one progress
display, one summary and the same events as one process. Nothing here prints.

Stopping: Ctrl-C or SIGTERM in the parent cancels the files not started, and each busy worker is
interrupted (a signal on POSIX; a stop flag it checks between tiles everywhere), so its atomic writer
removes the temporary file; an idle worker ignores the signal. The parent then raises ``BatchInterrupted``.

A worker process that dies (killed for memory, a driver crash) breaks the whole pool. Only the file it was
computing fails; the other workers are stopped as above, a file whose output was renamed into place counts
as done, and the files left are handed to a fresh pool, at most as many times as there are workers.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .allocator import keep_large_blocks_off_the_heap, large_blocks_kept_off
from .checks import check_devices
from .cores import usable_cores
from .errors import ConfigError, SstError
from .filerun import BatchEvents, BatchInterrupted, BatchResult, FileResult, OutputWatch, _BatchRun
from .naming import resume_hint

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

    from .inputs import Job
    from .loader import ModelSpec
    from .naming import Naming, WriteOptions
    from .preflight import _Plan
    from .upscaler import UpscaleOptions, Upscaler


@dataclass(frozen=True)
class WorkerPlan:
    """The device of each worker process, in order; more than one entry means a parallel batch."""

    devices: tuple[str, ...]

    @property
    def parallel(self) -> bool:
        return len(self.devices) > 1


def plan_workers(device: str, workers: int = 1) -> WorkerPlan:
    """Turn ``--device`` (one device, a comma list, or ``cuda:all``) and ``--workers`` into one device per worker.

    Checked before anything is loaded: ``workers`` below 1, a device list combined with ``--workers``, an
    unknown or absent device in the list, ``cuda:all`` without CUDA all give a one-sentence ConfigError.
    """
    check_devices(device, workers)  # what needs no torch first: an error then answers at once
    from .runtime import resolve_device

    text = device.strip().lower()
    if text == "cuda:all":
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(
                "--device cuda:all needs CUDA GPUs, but PyTorch sees none here; use --workers N on the CPU"
            )
        if workers != 1:
            raise ConfigError("--workers applies to one device; a device list already runs one worker per device")
        names: list[str] = [f"cuda:{i}" for i in range(count)]
    elif "," in text:
        names = [part.strip() for part in text.split(",")]
    else:
        resolved = resolve_device(text, cli=True)
        return WorkerPlan((str(resolved),) * workers)
    for name in names:
        if name == "auto" or ("," not in name and resolve_device(name, cli=True).type == "cpu"):
            raise ConfigError(f"{name!r} in a device list: list GPUs only, and use --workers N for CPU workers")
    return WorkerPlan(tuple(str(resolve_device(name, cli=True)) for name in names))


# ------------------------------------------------------------------------------------------ the worker side

STOP_WAIT = 30.0  # seconds stopping workers may take (a busy one finishes its current tile) before they are killed

_state: dict[str, Any] = {}  # per worker process: its _BatchRun, event queue, stop flag, busy/stopping flags


def _on_signal(signum: int, frame: object) -> None:
    """Interrupt the file being computed, once; a worker waiting for work, already stopping, or whose file is
    already renamed into place (whole: it is reported done), ignores it."""
    watch: OutputWatch | None = _state.get("watch")
    if _state.get("busy") and not _state.get("stopping") and not (watch is not None and watch.replaced()):
        _state["stopping"] = True
        from .errors import Terminated

        raise Terminated(signum) if signum != signal.SIGINT else KeyboardInterrupt()


def _init_worker(
    devices: Queue[str],
    events: Queue[tuple[Any, ...]],
    stop: Event,
    spec: ModelSpec,
    options: UpscaleOptions,
    naming: Naming,
    writing: WriteOptions,
    threads: int,
    heap_kept_off: bool,
) -> None:
    """Per worker, once: take a device, handle interrupts, set the allocator as the parent's (``allocator``), load
    the Upscaler (errors kept for the first task)."""
    if heap_kept_off:
        keep_large_blocks_off_the_heap()
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _on_signal)
    _state.update(events=events, stop=stop, busy=False, stopping=False)
    device = devices.get()
    try:
        import torch

        from .upscaler import Upscaler

        if device == "cpu":
            torch.set_num_threads(threads)
        upscaler = Upscaler(spec, options=replace(options, device=device))  # load-time notes: said by the parent
        upscaler.on_message = lambda text: events.put(("warning", text))
        _state["run"] = _BatchRun(upscaler, naming, writing, None, lambda text: events.put(("note", text)))
    except BaseException as exc:  # reported by the first task, so that the parent can stop the batch
        _state["load_error"] = (device, exc if isinstance(exc, SstError) else f"{type(exc).__name__}: {exc}")


@dataclass
class _Stopped:
    """A task's answer when it was interrupted (exceptions carrying signal numbers do not pickle reliably)."""

    exit_code: int


def _work(index: int, plan: _Plan) -> FileResult | _Stopped:
    """Compute one planned file in this worker; interrupts become ``_Stopped`` with nothing left behind."""
    if "load_error" in _state:
        device, error = _state["load_error"]
        raise (
            error
            if isinstance(error, SstError)
            else SstError(f"the worker on {device} could not load the model: {error}")
        )
    stop: Event = _state["stop"]
    if stop.is_set():
        return _Stopped(130)
    events: Queue[tuple[Any, ...]] = _state["events"]
    run: _BatchRun = _state["run"]

    def on_tile(done: int, total: int) -> None:
        events.put(("tile", index, done, total))
        if stop.is_set() and not _state["stopping"]:  # where signals cannot reach a worker (Windows)
            _state["stopping"] = True
            raise KeyboardInterrupt

    run.on_tile = on_tile
    events.put(("start", index, os.getpid()))
    _state["watch"] = OutputWatch(plan.job, plan.target, plan.megapixels)
    _state["busy"] = True
    try:
        return run.one(plan)
    except KeyboardInterrupt as exc:
        return _Stopped(getattr(exc, "exit_code", 130))
    finally:
        _state["busy"] = False


# ------------------------------------------------------------------------------------------ the parent side


def run_batch_parallel(
    jobs: Sequence[Job],
    upscaler: Upscaler,
    *,
    spec: ModelSpec,
    workers: WorkerPlan,
    naming: Naming,
    writing: WriteOptions,
    events: BatchEvents,
) -> BatchResult:
    """``run_batch`` over several worker processes: plan every output here (``upscaler`` only needs to know
    the scale), record planned skips and failures here, compute the rest in the workers, report here.

    Files are handed out one at a time, so a fast worker takes more of them. ``file_start`` / ``file_done``
    carry each file's position in ``jobs``; they arrive in the order files start and finish. Raises
    BatchInterrupted (what finished, one file that was running) on Ctrl-C / SIGTERM after every worker has
    stopped, and the SstError of a worker that cannot load the model.
    """
    started = time.perf_counter()
    if naming.file is not None and writing.format is None:
        writing = replace(writing, format=naming.file.suffix.lstrip("."))
    note = events.note or (lambda text: None)
    run = _BatchRun(upscaler, naming, writing, None, note)
    plans = run.preflight(jobs)
    total = len(plans)
    records: dict[int, FileResult] = {}
    started_files: set[int] = set()

    def finish(index: int, record: FileResult) -> None:
        if index not in started_files and events.file_start is not None:
            events.file_start(plans[index].job, index, total)
        started_files.add(index)
        records[index] = record
        if events.file_done is not None:
            events.file_done(record, index, total)

    def result() -> BatchResult:
        return BatchResult([records[i] for i in sorted(records)], time.perf_counter() - started)

    todo = [i for i, plan in enumerate(plans) if plan.skip is None and plan.failure is None]
    for index, plan in enumerate(plans):
        if index not in todo:
            finish(index, run.one(plan))  # no computation: a skip or a failure known from the plan
    if not todo:
        return result()

    devices = workers.devices[: len(todo)]
    threads = max(1, usable_cores() // len(devices))
    context = multiprocessing.get_context("spawn")
    messages: Queue[tuple[Any, ...]] = context.Queue()

    def start_pool() -> tuple[ProcessPoolExecutor, Event]:
        """A pool whose workers each take one of ``devices`` (afresh: those of a broken pool are gone with it)."""
        device_queue: Queue[str] = context.Queue()
        for device in devices:
            device_queue.put(device)
        stop = context.Event()
        pool = ProcessPoolExecutor(
            max_workers=len(devices),
            mp_context=context,
            initializer=_init_worker,
            initargs=(
                device_queue,
                messages,
                stop,
                spec,
                upscaler.options,
                naming,
                writing,
                threads,
                large_blocks_kept_off(),
            ),
        )
        return pool, stop

    pool, stop = start_pool()
    futures: dict[Future[FileResult | _Stopped], int] = {}
    showing: int | None = None  # the file whose tiles the progress display follows
    started_by: dict[int, int] = {}  # file -> process id of the worker that last started it
    watches = {index: OutputWatch(plans[index].job, plans[index].target, plans[index].megapixels) for index in todo}
    restarts = 0  # pools started again after a worker process died
    warned: set[str] = set()  # each worker says what its Upscaler says once; the user hears it once in all

    def drain() -> None:
        nonlocal showing
        while True:
            try:
                event = messages.get_nowait()
            except queue.Empty:
                return
            kind = event[0]
            if kind == "start" and event[1] not in records:
                started_by[event[1]] = event[2]
                showing = event[1]
                if event[1] not in started_files and events.file_start is not None:  # once, even when run again
                    events.file_start(plans[event[1]].job, event[1], total)
                started_files.add(event[1])
            elif kind == "tile" and event[1] == showing and event[1] not in records and events.tile is not None:
                events.tile(event[2], event[3])
            elif kind == "note":
                note(event[1])
            elif kind == "warning" and events.warning is not None and event[1] not in warned:
                warned.add(event[1])
                events.warning(event[1])

    def after_broken_pool() -> list[int]:
        """A worker process died, and the pool with it: stop the others (none may still write a file the next
        pool computes), then fail only the file(s) a dead worker was computing. A file whose output was renamed
        into place counts as done; the others, never started or interrupted on a healthy worker, are returned
        to run again."""
        nonlocal restarts
        processes = _stop_workers(pool, stop)
        drain()
        dead = {process.pid for process in processes if process.exitcode not in (0, None)}
        again: list[int] = []
        for index in futures.values():
            if index in records:
                continue
            written = watches[index].finished()
            if written is not None:
                finish(index, written)
            elif started_by.get(index) in dead:
                finish(index, _lost(plans[index], writing.overwrite))
            else:
                again.append(index)
        started_by.clear()
        if again:
            restarts += 1
            if restarts > len(devices):  # each new pool lost a worker too: give up rather than loop
                reason = (
                    f"not computed: worker processes stopped unexpectedly {restarts} times (killed, or out of "
                    f"memory); {resume_hint(writing.overwrite)}"
                )
                for index in again:
                    finish(index, _lost(plans[index], writing.overwrite, reason))
                return []
        return again

    try:
        queued = list(todo)
        while queued:
            if restarts:
                pool, stop = start_pool()
            with _children_ignore_ctrl_c():
                futures = {pool.submit(_work, index, plans[index]): index for index in queued}
            queued = []
            broken = False
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                drain()
                for future in done:
                    index = futures[future]
                    try:
                        answer = future.result()
                    except BrokenProcessPool:  # every file of the pool ends so: sorted out below
                        broken = True
                        continue
                    if isinstance(answer, _Stopped):  # a worker was signalled on its own (Ctrl-C in its terminal)
                        raise KeyboardInterrupt
                    finish(index, answer)
            if broken:
                queued = after_broken_pool()
        drain()
    except KeyboardInterrupt as interrupt:
        code = getattr(interrupt, "exit_code", 130)
        running = [futures[f] for f in futures if f.running() and futures[f] not in records]
        _stop_workers(pool, stop)
        for future, index in futures.items():  # files that finished while the workers stopped still count
            if index not in records and future.done() and not future.cancelled():
                with contextlib.suppress(BaseException):
                    answer = future.result()
                    if not isinstance(answer, _Stopped):
                        finish(index, answer)
        running = [index for index in running if index not in records]
        current = plans[running[0]].job if running else None
        raise BatchInterrupted(result(), current, total, code) from None
    except BaseException:
        _stop_workers(pool, stop)
        raise
    pool.shutdown(wait=True)
    return result()


@contextlib.contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Start the worker processes with Ctrl-C ignored until their own handler is in place: a Ctrl-C while one
    is still importing printed its KeyboardInterrupt traceback. (An ignored signal stays ignored across exec, and
    Python then leaves it so; the parent's own handler is back as soon as the workers are started.)"""
    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _lost(plan: _Plan, overwrite: bool, reason: str | None = None) -> FileResult:
    """A file whose worker process died (killed, or out of memory at the operating-system level)."""
    hint = resume_hint(overwrite)
    reason = reason or f"its worker process stopped unexpectedly (killed, or out of memory); {hint}"
    return FileResult(plan.job.source, plan.target, "failed", reason, "WorkerLost", plan.megapixels)


def _stop_workers(pool: ProcessPoolExecutor, stop: Event) -> list[multiprocessing.process.BaseProcess]:
    """Cancel queued files, interrupt busy workers, and wait until every worker process has exited (returned)."""
    stop.set()
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public accessor for them
    pool.shutdown(wait=False, cancel_futures=True)
    if sys.platform != "win32":
        for process in processes:
            with contextlib.suppress(OSError, TypeError):
                os.kill(process.pid, signal.SIGINT)  # busy: abandons its file; idle or starting: ignores it
    # shutdown(wait=True) after shutdown(wait=False) returns at once: join the processes themselves, so that
    # none is still starting when this process exits (it then found the queues gone: a traceback each).
    deadline = time.monotonic() + STOP_WAIT
    with contextlib.suppress(BaseException):
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.is_alive():  # stuck past the wait: nothing of it is kept (its temporaries go next run)
                process.kill()
                process.join(5)
    return processes
