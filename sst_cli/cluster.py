"""The same batch on a Ray cluster (``pip install -e ".[ray]"``), for jobs that outgrow one machine.

The driver finds the inputs and plans every output exactly as a local batch does (names claimed, existing
outputs skipped with ``skip_existing``, so a rerun resumes); Ray actors, each holding one loaded
``Upscaler``, compute the files one at a time and write them atomically. Paths must be ones every node
sees (a shared file system); ``fsspec`` URLs are not supported yet. A file whose task fails for a reason
that may pass (its actor died, a RuntimeError or out of memory) is tried once more; an actor that dies
again after its restart gets no more files, and only when every actor is gone do the files left fail.
Failures are reported by file like a local batch. Nothing here prints.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, SstError, one_line

if TYPE_CHECKING:
    from .filerun import BatchEvents, BatchResult, FileResult
    from .loader import ModelSpec
    from .naming import WriteOptions
    from .preflight import _Plan
    from .upscaler import UpscaleOptions


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide: ``address`` as ``ray.init`` takes it (None: a local Ray, ``auto``: the running
    cluster, ``ray://head:10001``); ``actors`` (default: one per GPU, else one per CPU); ``gpus_per_actor``
    (default: 1 where the cluster has GPUs and the device is not the CPU)."""

    address: str | None = None
    actors: int | None = None
    gpus_per_actor: float | None = None

    def __post_init__(self) -> None:
        if self.actors is not None and self.actors < 1:
            raise ConfigError(f"the number of Ray actors must be 1 or more, got {self.actors}")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray: pip install 'ray>=2.9' (sst-cli's ray extra)") from None
    return ray


def _sst_error_names() -> frozenset[str]:
    """Class names of sst-cli's own errors: these repeat on a retry (bad file, existing output), so none is retried."""
    names: set[str] = set()
    todo: list[type] = [SstError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)


RESTARTS = 1  # how often Ray restarts an actor that died; one that dies again gets no more files


class _Actor:
    """One Ray actor: one loaded Upscaler, computing planned files."""

    def __init__(self, spec: ModelSpec, options: UpscaleOptions, naming: Any, writing: WriteOptions) -> None:
        import torch

        from .filerun import _BatchRun
        from .upscaler import Upscaler

        if options.device == "cpu":
            torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        self.run = _BatchRun(Upscaler(spec, options=options), naming, writing, None, lambda text: None)

    def one(self, plan: _Plan) -> FileResult:
        return self.run.one(plan)


def upscale_files_ray(
    inputs: Sequence[str],
    output: str | os.PathLike[str] | None,
    *,
    model: ModelSpec,
    options: UpscaleOptions,
    writing: WriteOptions,
    ray_options: RayOptions | None = None,
    recursive: bool = False,
    include_outputs: bool = False,
    events: BatchEvents | None = None,
    inputs_checked: bool = False,
) -> BatchResult:
    """``upscale_files`` with the computing done by Ray actors; the same planning, results and events.

    ``ray.init`` is called with ``ray_options.address`` unless Ray is already initialised (then that
    session is used and left running). Raises BatchInterrupted on Ctrl-C after killing the actors; a
    killed actor may leave a temporary file, which the next run in that folder removes.
    """
    from .batch import plan_batch
    from .filerun import BatchEvents, BatchInterrupted, BatchResult, FileResult, _BatchRun
    from .files import removing_unused_folders
    from .naming import resume_hint

    ray = _import_ray()
    ray_options = ray_options or RayOptions()
    events = events or BatchEvents()
    jobs, naming, planner = plan_batch(
        inputs, output, model=model, options=options, writing=writing, recursive=recursive,
        include_outputs=include_outputs, events=events, on_cpu=True, inputs_checked=inputs_checked,
    )  # fmt: skip
    with removing_unused_folders(naming.folders(jobs)):  # made when planned: kept only if written into
        if naming.file is not None and writing.format is None:
            writing = replace(writing, format=naming.file.suffix.lstrip("."))
        started = time.perf_counter()
        run = _BatchRun(planner, naming, writing, None, events.note or (lambda text: None))
        plans = run.preflight(jobs)
        total = len(plans)
        records: dict[int, FileResult] = {}

        def finish(index: int, record: FileResult, announced: bool) -> None:
            if not announced and events.file_start is not None:
                events.file_start(plans[index].job, index, total)
            records[index] = record
            if events.file_done is not None:
                events.file_done(record, index, total)

        def result() -> BatchResult:
            return BatchResult([records[i] for i in sorted(records)], time.perf_counter() - started)

        todo: deque[int] = deque()
        for index, plan in enumerate(plans):
            if plan.skip is None and plan.failure is None:
                todo.append(index)
            else:
                finish(index, run.one(plan), False)
        if not todo:
            return result()

        if not ray.is_initialized():
            ray.init(address=ray_options.address, log_to_driver=False, include_dashboard=False)
        resources = ray.cluster_resources()
        gpus = ray_options.gpus_per_actor
        if gpus is None:
            gpus = 1.0 if resources.get("GPU", 0) >= 1 and options.device != "cpu" else 0.0
        count = ray_options.actors or max(1, int(resources.get("GPU", 0) // gpus if gpus else resources.get("CPU", 1)))
        count = min(count, len(todo))
        device = "cuda" if gpus else "cpu"
        actor_class = ray.remote(_Actor).options(num_cpus=1, num_gpus=gpus, max_restarts=RESTARTS)
        actor_options = replace(options, device=device)
        actors = [actor_class.remote(model, actor_options, naming, writing) for _ in range(count)]
        idle = list(actors)
        running: dict[Any, tuple[Any, int]] = {}
        tries: dict[int, int] = {}
        deaths: dict[Any, int] = {}  # per actor; past RESTARTS it is dead for good and gets no more files
        permanent = _sst_error_names()
        try:
            while todo or running:
                if not idle and not running:  # every actor died past its restart: nothing can compute the rest
                    reason = f"every Ray actor died (killed, or out of memory); {resume_hint(writing.overwrite)}"
                    while todo:
                        index = todo.popleft()
                        plan = plans[index]
                        finish(
                            index,
                            FileResult(plan.job.source, plan.target, "failed", reason, "ActorDied"),
                            index in tries,
                        )
                    break
                while todo and idle:
                    actor, index = idle.pop(), todo.popleft()
                    if index not in tries and events.file_start is not None:
                        events.file_start(plans[index].job, index, total)
                    tries[index] = tries.get(index, 0) + 1
                    running[actor.one.remote(plans[index])] = (actor, index)
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    actor, index = running.pop(ref)
                    try:
                        record = ray.get(ref)
                        retry = record.status == "failed" and record.error_type not in permanent
                        idle.append(actor)
                    except ray.exceptions.RayError as exc:
                        if isinstance(exc, ray.exceptions.RayActorError):
                            deaths[actor] = deaths.get(actor, 0) + 1
                        if deaths.get(actor, 0) <= RESTARTS:  # Ray restarts a dead actor this many times
                            idle.append(actor)
                        plan = plans[index]
                        reason = f"its Ray task failed: {one_line(exc)}"
                        record = FileResult(plan.job.source, plan.target, "failed", reason, type(exc).__name__)
                        retry = True
                    if retry and tries[index] < 2:
                        todo.append(index)
                    else:
                        finish(index, record, True)
        except KeyboardInterrupt as stop:
            current = plans[next(iter(running.values()))[1]].job if running else None
            raise BatchInterrupted(result(), current, total, getattr(stop, "exit_code", 130)) from None
        finally:
            for actor in actors:
                ray.kill(actor)
        return result()
