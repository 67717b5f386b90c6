"""The batch on a local Ray (2 CPUs), against one process: same bytes, failures by file, resume by skipping.
Those tests are skipped where Ray is not installed (the optional extra ray); a fake Ray covers dying actors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from conftest import GOLDEN, needs_golden
from PIL import Image

from sst_cli import cluster
from sst_cli.batch import BatchResult, WriteOptions, upscale_files
from sst_cli.cluster import RayOptions, upscale_files_ray
from sst_cli.errors import ConfigError
from sst_cli.filerun import FileResult
from sst_cli.loader import ModelSpec
from sst_cli.upscaler import UpscaleOptions

pytestmark = needs_golden


def mini() -> ModelSpec:
    """The golden mini x3, made when a test runs: a ModelSpec checks its files, and made at import it stopped the
    whole suite's collection where ../shared is absent, instead of these tests being skipped."""
    return ModelSpec(weights=str(GOLDEN / "mini_x3.pth"), config=str(GOLDEN / "mini_x3.json"))


OPTIONS = UpscaleOptions(device="cpu")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="1 or more"):
        RayOptions(actors=0)


def test_ray_batch_matches_one_process(tmp_path: Path, local_ray: None) -> None:
    rng = np.random.default_rng(3)
    (tmp_path / "in").mkdir()
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(tmp_path / "in" / f"q{i}.png")
    (tmp_path / "in" / "broken.png").write_bytes(b"not an image")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each actor (one CPU each): sums depend on the thread count
    try:
        single = upscale_files(
            [str(tmp_path / "in")], tmp_path / "one", model=mini(), options=OPTIONS, writing=WriteOptions()
        )
    finally:
        torch.set_num_threads(threads)
    (tmp_path / "two").mkdir()
    kept = tmp_path / "two" / "q0_mini_x3_x3.png"
    kept.write_bytes(b"earlier run")
    writing = WriteOptions(skip_existing=True)

    def on_ray() -> BatchResult:
        return upscale_files_ray(
            [str(tmp_path / "in")],
            tmp_path / "two",
            model=mini(),
            options=OPTIONS,
            writing=writing,
            ray_options=RayOptions(),
        )

    result = on_ray()
    assert (single.done, single.failed) == (4, 1)
    assert (result.done, result.skipped, result.failed) == (3, 1, 1)
    assert [r.source.name for r in result.failures] == ["broken.png"]
    assert kept.read_bytes() == b"earlier run"
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
    for name in ("q1_mini_x3_x3.png", "q2_mini_x3_x3.png", "q3_mini_x3_x3.png"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    again = on_ray()
    assert (again.done, again.skipped, again.failed) == (0, 4, 1)  # resume: nothing left to compute


# ------------------------------------------------------------------------------------------ a fake Ray


class _RayError(Exception):
    pass


class _ActorDied(_RayError):
    pass


class _Ref:
    def __init__(self, actor: Any, plan: Any) -> None:
        self.actor, self.plan = actor, plan


class _FakeRay:
    """Enough of Ray for the driver loop: tasks run at once; the actors numbered in ``dead`` are dead for good."""

    exceptions = SimpleNamespace(RayError=_RayError, RayActorError=_ActorDied)

    def __init__(self, dead: set[int], message: str) -> None:
        self.dead = dead
        self.message = message  # what a dead actor's error says
        self.actors: list[Any] = []
        self.sent: list[tuple[int, str]] = []  # (actor number, file name) of every task

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def remote(self, cls: type) -> Any:
        fake = self

        class Actor:
            def __init__(self) -> None:
                self.number = len(fake.actors)
                fake.actors.append(self)
                self.one = SimpleNamespace(remote=self.task)

            def task(self, plan: Any) -> _Ref:
                fake.sent.append((self.number, plan.job.source.name))
                return _Ref(self, plan)

        maker = SimpleNamespace(remote=lambda *args: Actor())
        return SimpleNamespace(options=lambda **kwargs: maker)

    def wait(self, refs: list[Any], num_returns: int) -> tuple[list[Any], list[Any]]:
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref: _Ref) -> FileResult:
        actor, plan = ref.actor, ref.plan
        if actor.number in self.dead:
            raise _ActorDied(self.message)
        return FileResult(plan.job.source, plan.target, "done", None, None, plan.megapixels)

    def kill(self, actor: Any) -> None:
        pass


def _fake_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead: set[int], message: str = "The actor died unexpectedly."
) -> tuple[_FakeRay, Any]:
    fake = _FakeRay(dead, message)
    monkeypatch.setattr(cluster, "_import_ray", lambda: fake)
    rng = np.random.default_rng(4)
    (tmp_path / "in").mkdir()
    for i in range(8):
        Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(tmp_path / "in" / f"q{i}.png")
    result = upscale_files_ray(
        [str(tmp_path / "in")], tmp_path / "out", model=mini(), options=OPTIONS, writing=WriteOptions(),
        ray_options=RayOptions(actors=2),
    )  # fmt: skip
    return fake, result


def test_a_dead_actor_gets_no_more_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead actor was put back after its restart: each file sent to it failed at once, so most files failed."""
    fake, result = _fake_batch(tmp_path, monkeypatch, {0})
    assert (result.done, result.failed) == (8, 0), [r.reason for r in result.failures]
    assert [actor for actor, _ in fake.sent].count(0) == 1 + cluster.RESTARTS  # its first life, then its restarts


def test_files_fail_with_a_reason_once_every_actor_is_dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, result = _fake_batch(tmp_path, monkeypatch, {0, 1})
    assert (result.done, result.failed) == (0, 8)
    assert "every Ray actor died" in result.failures[-1].reason


def test_a_ray_error_without_a_message_fails_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reason took the message's first line, and an empty message has none: the driver died of IndexError."""
    _, result = _fake_batch(tmp_path, monkeypatch, {0, 1}, message="")
    assert (result.done, result.failed) == (0, 8)
    assert all("every Ray actor died" in f.reason for f in result.failures)
