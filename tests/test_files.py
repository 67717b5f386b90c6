"""The atomic writer (sst_cli.files): what other processes and threads see while it works."""

from __future__ import annotations

import os
import sys

import pytest

from sst_cli import files


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux shows the umask in /proc/self/status")
def test_the_umask_is_read_without_being_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Setting it to read it (it was set to 0 for that moment) made other threads' new files world-writable."""

    def changed(_mask: int) -> int:
        raise AssertionError("the umask was changed to be read")

    real = os.umask(0o027)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(os, "umask", changed)
            assert files._default_mode() == 0o640
    finally:
        os.umask(real)


def test_where_only_setting_tells_the_umask_is_read_once_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "_proc_umask", lambda: None)
    files._umask_by_setting.cache_clear()
    real = os.umask(0o022)
    try:
        assert files._default_mode() == 0o644
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(real)
        files._umask_by_setting.cache_clear()
