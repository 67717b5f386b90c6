"""Pins: where each official file was found (repository and commit, or release URL) and its sha256.

Stored in ``$HF_HOME/sst-cli/pins.json`` beside the Hugging Face cache, so that a second run and offline runs
(``HF_HUB_OFFLINE=1``) go straight to the cached file with no API call, and every load is checked against the
sha256 recorded on download. Files downloaded from the authors' release live in ``$HF_HOME/sst-cli/release/``.
Deleting the folder forgets the pins (the next run finds the files again).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..errors import WriteError
from ..files import atomic_write_text, locked_if_possible
from .manifest import Entry
from .progress import note
from .refs import COMMIT_RE, SHA256_RE

PINS_FORMAT = 1
_RACY_NS = 2_000_000_000  # a file modified this recently is not remembered as hashed
_LOCK_TIMEOUT_S = 10.0


def sst_home() -> Path:
    """``$HF_HOME/sst-cli`` (read at call time: tests and callers may change huggingface_hub's constants)."""
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "sst-cli"


def pins_path() -> Path:
    return sst_home() / "pins.json"


def release_dir() -> Path:
    return sst_home() / "release"


@dataclass(frozen=True)
class Pin:
    """Where a file was found: ``source`` "hub" (``repo_id`` at ``commit``, file ``filename``) or "release"
    (``url``, kept as ``release_dir()/filename``); ``sha256`` of its content; ``stat`` (size, mtime_ns) of the
    local copy when it was last hashed, so that unchanged files are not hashed again on every load."""

    source: str
    filename: str
    sha256: str
    repo_id: str | None = None
    commit: str | None = None
    url: str | None = None
    stat: tuple[int, int] | None = None

    def valid(self) -> bool:
        if not SHA256_RE.match(self.sha256) or not self.filename or ".." in self.filename.split("/"):
            return False
        if self.source == "hub":
            return bool(self.repo_id) and bool(self.commit) and bool(COMMIT_RE.match(self.commit or ""))
        return self.source == "release" and bool(self.url) and "/" not in self.filename

    def with_stat(self, path: Path) -> Pin:
        st = path.stat()
        return replace(self, stat=(st.st_size, st.st_mtime_ns))

    def unchanged(self, path: Path) -> bool:
        """True when ``path`` still has the size and mtime it had when it was hashed."""
        try:
            st = path.stat()
        except OSError:
            return False
        return self.stat is not None and tuple(self.stat) == (st.st_size, st.st_mtime_ns)


def pin_key(entry: Entry) -> str:
    """Pins are keyed by official file name (unique in the manifest), or ``repo:OWNER/REPO`` when the file name
    is not known (the repository's one checkpoint is taken)."""
    return entry.filename if entry.filename else f"repo:{entry.repo_id}"


def read_pins() -> dict[str, Pin]:
    """All readable pins; a missing, damaged or foreign file reads as none (pins are only a shortcut)."""
    try:
        data = json.loads(pins_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != PINS_FORMAT or not isinstance(data.get("pins"), dict):
        return {}
    pins = {}
    for key, raw in data["pins"].items():
        try:
            stat = raw.get("stat")
            pin = Pin(**{**raw, "stat": tuple(stat) if stat else None})
        except (TypeError, AttributeError):
            continue
        if pin.valid():
            pins[key] = pin
    return pins


def get_pin(key: str) -> Pin | None:
    return read_pins().get(key)


def _write(pins: dict[str, Pin]) -> None:
    data = {
        "format": PINS_FORMAT,
        "_comment": "written by sst-cli: where each weights file was found and its sha256; safe to delete",
        "pins": {key: {k: v for k, v in asdict(pin).items() if v is not None} for key, pin in sorted(pins.items())},
    }
    atomic_write_text(pins_path(), json.dumps(data, indent=2) + "\n")


def save_pin(key: str, pin: Pin) -> None:
    """Record ``pin`` (read-modify-write of the small JSON under a lock; a failure to write only costs a later
    lookup)."""
    try:
        with locked_if_possible(pins_path(), _LOCK_TIMEOUT_S):
            pins = read_pins()
            pins[key] = pin
            _write(pins)
    except WriteError as exc:  # the download is fine; later runs look for it again (pull says when it matters)
        note(f"{key} is downloaded, but where it came from could not be recorded ({exc}): make that file "
             "writable, or later runs may have to look for it again")  # fmt: skip


def hashed_path() -> Path:
    return sst_home() / "hashed.json"


def _stat_key(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _hashed_files() -> dict[str, dict]:
    """The entries of ``hashed.json`` (path -> sha256 and stat); a missing or damaged file reads as none."""
    try:
        files = json.loads(hashed_path().read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}


def known_sha256(path: Path) -> str | None:
    """The sha256 recorded for ``path`` when it was last hashed, if its size, mtime and inode are unchanged: a
    cached multi-GB checkpoint is then not read whole on every run (the zoo's pins judge files the same way)."""
    raw = _hashed_files().get(str(path.resolve()))
    stat = _stat_key(path)
    if raw is None or stat is None or raw.get("stat") != stat:
        return None
    sha = raw.get("sha256")
    return sha if isinstance(sha, str) and SHA256_RE.match(sha) else None


def remember_sha256(path: Path, sha256: str) -> None:
    """Record ``path``'s sha256 with its stat; entries of files that are gone are dropped. Only a shortcut: a
    failure to write costs a hash on the next run."""
    stat = _stat_key(path)
    if stat is None or time.time_ns() - stat[1] < _RACY_NS:
        return  # changed within the file system's clock step: a change now could keep this mtime (racy git)
    with contextlib.suppress(WriteError, OSError), locked_if_possible(hashed_path(), _LOCK_TIMEOUT_S):
        files = {k: v for k, v in _hashed_files().items() if Path(k).exists()}
        files[str(path.resolve())] = {"sha256": sha256, "stat": stat}
        text = json.dumps({"_comment": "written by sst-cli: files already hashed; safe to delete", "files": files})
        atomic_write_text(hashed_path(), text + "\n")


def drop_pin(key: str) -> None:
    with locked_if_possible(pins_path(), _LOCK_TIMEOUT_S):
        pins = read_pins()
        if pins.pop(key, None) is not None:
            with contextlib.suppress(WriteError):
                _write(pins)
