"""Several worker processes in one batch (``--workers 2`` on the CPU) against one process, with the golden mini x3
checkpoint; option checks need no model. Each pool start imports torch twice, so runs are few and shared."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import GOLDEN, needs_golden
from PIL import Image
from typer.testing import CliRunner

from sst_cli.cli import app
from sst_cli.cores import usable_cores
from sst_cli.errors import ConfigError
from sst_cli.parallel import plan_workers

MODEL = ["--weights", str(GOLDEN / "mini_x3.pth"), "--config", str(GOLDEN / "mini_x3.json"), "--device", "cpu"]
ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def images(folder: Path, count: int, size: tuple[int, int] = (16, 12), seed: int = 5) -> list[Path]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"p{i}.png"
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ------------------------------------------------------------------------------------------ option checks


@pytest.mark.parametrize(
    ("device", "workers", "words"),
    [
        ("cpu", 0, "--workers must be 1 or more"),
        ("cpu,cpu", 1, "list GPUs only"),
        ("cuda:0,", 1, "empty entry"),
        ("cuda:0,cuda:1", 2, "--workers applies to one device"),
        ("tpu", 2, "unknown device"),
    ],
)
def test_bad_worker_options_are_one_sentence(device: str, workers: int, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        plan_workers(device, workers)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given where CUDA is absent")
def test_cuda_all_without_cuda_is_refused() -> None:
    with pytest.raises(ConfigError, match="cuda:all needs CUDA GPUs"):
        plan_workers("cuda:all")
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        plan_workers("cuda:0,cuda:1")


def test_cpu_workers_plan_one_device_each() -> None:
    assert plan_workers("cpu", 3).devices == ("cpu", "cpu", "cpu")
    assert not plan_workers("cpu").parallel


@needs_golden
def test_cli_refuses_workers_zero_before_loading(tmp_path: Path) -> None:
    images(tmp_path / "in", 1)
    result = runner.invoke(app, ["upscale", str(tmp_path / "in"), *MODEL, "--workers", "0"])
    assert result.exit_code == 2
    assert "--workers must be 1 or more" in result.output


# ------------------------------------------------------------------------------------------ real workers


@needs_golden
def test_two_workers_match_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit-identical outputs, one summary, every file in the JSON log, a failing file reported, an existing
    output skipped (resume), no temporaries left."""
    monkeypatch.chdir(tmp_path)
    images(tmp_path / "in", 5)
    (tmp_path / "in" / "broken.png").write_bytes(b"not an image")
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, usable_cores() // 2))  # as each of the two workers: sums depend on threads
    try:
        single = runner.invoke(app, ["upscale", "in", "-o", "one", *MODEL, "--json-log"])
    finally:
        torch.set_num_threads(threads)
    assert single.exit_code == 1, single.output
    (tmp_path / "two").mkdir()
    kept = tmp_path / "two" / "p0_mini_x3_x3.png"
    kept.write_bytes(b"from an earlier run")
    result = runner.invoke(
        app, ["upscale", "in", "-o", "two", *MODEL, "--workers", "2", "--skip-existing", "--json-log"]
    )
    assert result.exit_code == 1, result.output
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    summaries = [e for e in events if e["event"] == "summary"]
    assert len(summaries) == 1
    summary = summaries[0]
    assert (summary["done"], summary["skipped"], summary["failed"]) == (4, 1, 1)
    assert [f["input"] for f in summary["failures"]] == [os.path.join("in", "broken.png")]
    done = {e["input"]: e["status"] for e in events if e["event"] == "file_done"}
    assert len(done) == 6 and sorted(done.values()) == ["done"] * 4 + ["failed", "skipped"]
    starts = [e["input"] for e in events if e["event"] == "file_start"]
    assert sorted(starts) == sorted(done)  # each file started once, and only once
    assert kept.read_bytes() == b"from an earlier run"
    assert listing(tmp_path / "two") == listing(tmp_path / "one")  # no temporaries, nothing extra
    for name in listing(tmp_path / "one"):
        if name != kept.name:
            assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name


@needs_golden
def test_what_every_worker_says_is_said_once(tmp_path: Path) -> None:
    """Each worker's Upscaler says that the window grid rounds the tile and overlap, the first time it tiles: with
    two workers the user read each warning twice."""
    images(tmp_path / "in", 2, size=(72, 70))
    result = runner.invoke(
        app,
        ["upscale", str(tmp_path / "in"), "-o", str(tmp_path / "out"), *MODEL, "--workers", "2", "--tile", "40",
         "--tile-overlap", "5", "--json-log"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    said = [json.loads(line)["message"] for line in result.stdout.splitlines() if '"message"' in line]
    assert len([text for text in said if " becomes " in text]) == 2 and len(set(said)) == len(said), said


@needs_golden
@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGTERM, which Windows cannot catch")
def test_sigterm_stops_every_worker_and_leaves_nothing_partial(tmp_path: Path) -> None:
    images(tmp_path / "in", 12, size=(96, 96))
    command = [sys.executable, "-m", "sst_cli", "upscale", "in", "-o", "out", *MODEL, "--workers", "2", "--json-log"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    for line in process.stdout:  # wait until the workers compute: the first file has started
        if '"file_start"' in line:
            break
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # seen once in CI: say which process was still there, and what it said
        alive = process.poll() is None
        tree = subprocess.run(["ps", "-eo", "pid,ppid,stat,etime,args"], capture_output=True, text=True).stdout
        ours = [line for line in tree.splitlines() if str(process.pid) in line.split()[:2] or "multiprocessing" in line]
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"no exit 120 s after SIGTERM (parent alive: {alive}); processes: {ours}; stderr: {stderr[-3000:]}")
    assert process.returncode == 143, stderr
    assert "--skip-existing to resume" in stderr
    summary = [json.loads(line) for line in stdout.splitlines() if '"summary"' in line]
    assert len(summary) == 1 and summary[0]["interrupted"] is True
    out = tmp_path / "out"
    names = listing(out) if out.is_dir() else []
    assert not [n for n in names if n.startswith(".")], names  # no temporaries
    assert len(names) == summary[0]["done"] < 12
    for name in names:  # whatever was written is complete
        with Image.open(out / name) as picture:
            assert picture.size == (288, 288)
            picture.load()


def _sigint_disposition(answers: object) -> None:
    answers.put(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)  # type: ignore[attr-defined]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signal dispositions")
def test_workers_start_with_ctrl_c_ignored_until_their_handler_is_set() -> None:
    """A Ctrl-C while a worker was still importing printed its KeyboardInterrupt traceback."""
    import multiprocessing

    from sst_cli.parallel import _children_ignore_ctrl_c

    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    before = signal.getsignal(signal.SIGINT)
    with _children_ignore_ctrl_c():
        child = context.Process(target=_sigint_disposition, args=(answers,))
        child.start()
    assert signal.getsignal(signal.SIGINT) is before  # the parent's own handler is back at once
    assert answers.get(timeout=60) is True
    child.join(60)


def _work_dying_on_p2(index: int, plan: object) -> object:
    """The worker's task, except that the worker process dies (as when killed for memory) on p2.png once its
    start has reached the parent. Runs in the worker: the parent hands it over in place of ``_work``."""
    from sst_cli import parallel

    if plan.job.source.name == "p2.png":  # type: ignore[attr-defined]
        events = parallel._state["events"]
        events.put(("start", index, os.getpid()))
        events.close()
        events.join_thread()
        os._exit(9)
    return parallel._work(index, plan)  # type: ignore[arg-type]


@needs_golden
def test_a_dead_worker_fails_only_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker process dying failed every file left in the batch, even files finished or never started."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sst_cli.parallel._work", _work_dying_on_p2)
    images(tmp_path / "in", 6)
    result = runner.invoke(app, ["upscale", "in", "-o", "out", *MODEL, "--workers", "2", "--json-log"])
    assert result.exit_code == 1, result.output
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    summary = next(e for e in events if e["event"] == "summary")
    assert (summary["done"], summary["failed"]) == (5, 1), summary["failures"]
    assert [f["input"] for f in summary["failures"]] == [os.path.join("in", "p2.png")]
    assert "stopped unexpectedly" in summary["failures"][0]["reason"]
    starts = [e["input"] for e in events if e["event"] == "file_start"]
    assert len(starts) == len(set(starts)) == 6  # each file started once, even when computed again
    names = listing(tmp_path / "out")
    assert names == [f"p{i}_mini_x3_x3.png" for i in (0, 1, 3, 4, 5)]  # no temporaries
    for name in names:
        with Image.open(tmp_path / "out" / name) as picture:
            assert picture.size == (48, 36)
            picture.load()


def test_a_lost_files_hint_fits_overwrite() -> None:
    """After --overwrite it said to rerun with --skip-existing, which keeps the lost file's earlier output."""
    from sst_cli.inputs import Job
    from sst_cli.parallel import _lost
    from sst_cli.preflight import _Plan

    plan = _Plan(Job(Path("a.png"), Path(".")))
    assert str(_lost(plan, False).reason).endswith("; rerun with --skip-existing to resume")
    assert str(_lost(plan, True).reason).endswith(
        "; rerun with --overwrite (not --skip-existing: it would keep the earlier outputs of the files not done)"
    )


def _work_dying_at_once(index: int, plan: object) -> object:
    os._exit(9)  # before the file's start is sent, as a worker whose driver crashes on the first call


@needs_golden
def test_pools_that_keep_dying_are_restarted_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sst_cli.parallel._work", _work_dying_at_once)
    images(tmp_path / "in", 3)
    result = runner.invoke(app, ["upscale", "in", "-o", "out", *MODEL, "--workers", "2", "--json-log"])
    assert result.exit_code == 1, result.output
    summary = next(json.loads(line) for line in result.stdout.splitlines() if '"summary"' in line)
    assert (summary["done"], summary["failed"]) == (0, 3)
    assert {f["reason"].split(";")[0] for f in summary["failures"]} == {
        "not computed: worker processes stopped unexpectedly 3 times (killed, or out of memory)"
    }
