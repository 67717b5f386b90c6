"""The atomic writer (sst_cli.files): what other processes and threads see while it works."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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


def test_a_long_name_that_passed_the_check_is_written(tmp_path: Path) -> None:
    """80 CJK characters (244 bytes) passed the 255-byte check, but their temporary name, cut at 200 characters,
    was 262 bytes: the write failed with "File name too long" after all the computing."""
    target = tmp_path / ("写" * 80 + ".png")
    files.check_file_target(target, "the output")
    for tag in ("", ".old"):  # a file's temporary, and the name a replaced folder is moved aside to
        name = files.temp_name(target, tag).name
        assert len(os.fsencode(name)) <= files.name_max(tmp_path) and name.endswith(f"{tag}{files.TEMP_SUFFIX}")
    files.atomic_write(target, lambda fh: fh.write(b"x"), overwrite=False)
    assert target.read_bytes() == b"x"
    report = tmp_path / ("报" * 84)  # 252 bytes
    for text in ("old", "new"):  # the second build moves the first aside under a ".old" temporary name
        with files.atomic_folder(report, may_replace=lambda _path: True) as folder:
            (folder / "index.html").write_text(text)
    assert (report / "index.html").read_text() == "new" and sorted(tmp_path.iterdir()) == sorted([target, report])
