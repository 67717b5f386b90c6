"""The ``sst`` program's allocator setting: large blocks freed are returned to the system at once, so that the
heap's holes do not add to a forward pass's peak (``sst_cli.allocator``)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from sst_cli import allocator
from sst_cli.cli import shutdown

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt setting"
)

# Frees a mapped 16 MiB block (glibc then raises its threshold past it), then allocates, fills and frees 8 MiB:
# prints how much of those 8 MiB the process still holds.
CHILD = """
import ctypes, sys
from sst_cli.allocator import keep_large_blocks_off_the_heap
if sys.argv[1] == "on":
    assert keep_large_blocks_off_the_heap()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096
def fill_and_free(size: int) -> None:
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
fill_and_free(16 << 20)
before = resident()
fill_and_free(8 << 20)
print(resident() - before)
"""


def kept_after_free(tmp_path: Path, setting: str) -> int:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}
    env["PYTHONPATH"] = str(Path(__file__).parents[1])
    done = subprocess.run(
        [sys.executable, str(script), setting], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return int(done.stdout)


@glibc_only
def test_a_large_block_freed_is_returned_at_once(tmp_path: Path) -> None:
    """Without the setting glibc kept the 8 MiB in its heap (the threshold had risen past them): in a forward pass,
    such blocks and the holes between them made the same run peak anywhere from 130 to 490 MB."""
    assert kept_after_free(tmp_path, "off") >= 6 << 20  # the behaviour this guards against is really there
    assert kept_after_free(tmp_path, "on") < 1 << 20


@glibc_only
def test_the_users_own_allocator_settings_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert not allocator.keep_large_blocks_off_the_heap()
    assert "THP_MEM_ALLOC_ENABLE" not in os.environ


def test_nothing_is_set_where_glibc_is_not_the_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    allocator._glibc.cache_clear()
    try:
        assert not allocator.keep_large_blocks_off_the_heap()
    finally:
        allocator._glibc.cache_clear()
    assert "THP_MEM_ALLOC_ENABLE" not in os.environ


def test_only_the_sst_program_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``entry_point`` (the ``sst`` program) sets it; ``main``, which scripts and tests call in their own process,
    leaves their allocator alone."""
    import sst_cli.cli as cli

    calls: list[bool] = []
    monkeypatch.setattr(cli, "keep_large_blocks_off_the_heap", lambda: calls.append(True) or True)
    monkeypatch.setattr(shutdown.os, "_exit", lambda code: None)
    monkeypatch.setattr(shutdown.atexit, "_run_exitfuncs", lambda: None)
    monkeypatch.setattr(sys, "argv", ["sst", "--version"])
    with pytest.raises(SystemExit):
        cli.main()
    assert calls == []
    with pytest.raises(SystemExit):
        cli.entry_point()
    assert calls == [True]
