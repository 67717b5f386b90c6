"""The command-line process ends at once after its command, skipping Python's tear-down of torch, yet loses
nothing: atexit work runs, the standard streams are complete, the exit status is kept, and a thread still
running is waited for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sst_cli.cli import shutdown

CHILD = """
import atexit, sys, threading, time
import torch  # the tear-down this skips is torch's
atexit.register(lambda: open("atexit-ran", "w").close())
if sys.argv[1] == "thread":
    def late() -> None:
        time.sleep(1.0)
        open("thread-finished", "w").close()
    threading.Thread(target=late).start()
    sys.argv = ["sst", "--version"]
else:
    sys.argv = ["sst", *sys.argv[1:]]
from sst_cli.cli import entry_point
entry_point()
"""


def child(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    return subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )


def test_a_finished_command_keeps_its_output_status_and_atexit_work(tmp_path: Path) -> None:
    done = child(tmp_path, "models", "info", "sst-light-291")
    assert done.returncode == 0, done.stderr
    assert "sst-cli CPU demo weights" in done.stdout and done.stdout.endswith("\n")  # the last line is there too
    assert (tmp_path / "atexit-ran").exists()
    refused = child(tmp_path, "upscale", "--scale", "abc", "x.png")
    assert refused.returncode == 2 and "Invalid value for '--scale'" in refused.stderr


def test_a_thread_still_running_is_waited_for(tmp_path: Path) -> None:
    done = child(tmp_path, "thread")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "thread-finished").exists()


def test_ends_at_once_only_when_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    ended: list[int] = []
    ran: list[bool] = []
    monkeypatch.setattr(shutdown.os, "_exit", ended.append)
    monkeypatch.setattr(shutdown.atexit, "_run_exitfuncs", lambda: ran.append(True))
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    shutdown.end_process(None)
    shutdown.end_process(3)
    assert ended == [0, 3] and ran == [True, True]
    monkeypatch.delitem(sys.modules, "torch")  # without torch, Python's own exit is quick: nothing to skip
    shutdown.end_process(0)
    assert ended == [0, 3]


def test_main_in_a_process_that_goes_on_only_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the ``sst`` program ends its process: ``main`` called by a test or a script raises SystemExit (this
    process has torch imported, so ending at once would end pytest)."""
    from sst_cli.cli import main

    monkeypatch.setattr(sys, "argv", ["sst", "--version"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code in (0, None)
