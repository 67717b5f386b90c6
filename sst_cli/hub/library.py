"""huggingface_hub behaving the same on every version sst-cli supports (0.23 to 2.x): the calls that differ.

* Settings are read from ``huggingface_hub.constants`` when a call is made and passed explicitly (endpoint,
  cache folder): releases before 1.0 copy them into each of their modules at import, so a later change (a test,
  a caller setting HF_HUB_CACHE at run time) reached some functions and not others.
* Transient failures (HTTP 429 / 5xx, a connection refused or cut off, a truncated body) are retried here, a
  fixed number of times, whatever the library did first: 2.x retries most requests itself, 1.x not an API
  listing answered with HTTP 500, 0.x hardly any.
* Progress goes to the current display through ``tqdm_class`` where the function takes one (1.x and later);
  before, ``http_get`` makes its bar from ``file_download.tqdm``, which is swapped for the time of the call,
  and a transfer it resumes continues the same bar.
* A download that fails leaves no ``.incomplete`` file in the cache (0.x keeps them to resume later).
* The library's log records (a transfer cut off and resumed, "Retrying in 8s [Retry 5/5]") become notes on the
  current display, once each, instead of lines on stderr that --quiet and --json-log cannot silence; with no
  display set they are left alone, as in any HF tool.
* API calls (listings, model info) have no time limit in the library: a server that accepts the connection and
  never answers held sst-cli forever. ``answered`` bounds them (SST_HUB_TIMEOUT seconds, default 60).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import logging
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .._version import __version__
from ..errors import causes
from .progress import Display, current_display, note, progress_kwargs, tqdm_class

T = TypeVar("T")

RETRY_WAITS: tuple[float, ...] = (1.0, 3.0)  # seconds before the second and the third attempt
BACKED_OFF_S = 5.0  # an HTTP error answered later than this has been through huggingface_hub's retries
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
NETWORK_MODULES = ("httpx", "httpx2", "httpcore", "h11", "requests", "urllib3", "ssl")
_SWAP_LOCK = threading.Lock()
DEFAULT_API_TIMEOUT = 60.0
STALE_PARTIAL_S = 3600.0  # a partial download untouched this long belongs to no running transfer


class NoAnswer(Exception):
    """The server took the connection but did not answer in time (not transient: asking again waits as long)."""


def api_timeout() -> float:
    try:
        return max(0.1, float(os.environ.get("SST_HUB_TIMEOUT", DEFAULT_API_TIMEOUT)))
    except ValueError:
        return DEFAULT_API_TIMEOUT


def answered(call: Callable[[], T], what: str) -> T:
    """``call()`` (Hub API requests) given at most SST_HUB_TIMEOUT seconds, else NoAnswer naming ``what``.

    The call runs in a daemon thread, so a socket that never answers cannot hold the process (its exit included).
    """
    limit = api_timeout()
    outcome: list[tuple[bool, Any]] = []
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome.append((True, context.run(call)))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="sst-hub-request", daemon=True)
    thread.start()
    thread.join(limit)
    if not outcome:
        raise NoAnswer(f"no answer from {what} within {limit:g} s (SST_HUB_TIMEOUT)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def endpoint() -> str:
    """The Hub endpoint (HF_ENDPOINT as huggingface_hub read it), without a trailing slash."""
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def cache_dir() -> str:
    """The Hub cache folder (HF_HUB_CACHE, else HF_HOME/hub) as huggingface_hub read it."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def client() -> Any:
    """An ``HfApi`` for the current endpoint."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint(), library_name="sst-cli", library_version=__version__)


@contextlib.contextmanager
def progress(function: Any) -> Iterator[dict[str, Any]]:
    """The keywords that send ``function``'s progress to the current display (see the module docstring)."""
    kwargs = progress_kwargs(function)
    bar = tqdm_class()
    from huggingface_hub import file_download

    if kwargs or bar is None or not hasattr(file_download, "tqdm"):
        yield kwargs
        return
    opened: list[Any] = []

    def make(*args: Any, initial: int = 0, desc: str | None = None, **options: Any) -> Any:
        last = opened[-1] if opened else None
        if last is not None and not last.closed and last.desc == desc:  # a resumed transfer: the same bar
            last.update(initial - last.n)
            return last
        opened.append(bar(*args, initial=initial, desc=desc, **options))
        return opened[-1]

    with _SWAP_LOCK:
        saved = file_download.tqdm
        setattr(file_download, "tqdm", make)  # noqa: B010 (a module attribute, swapped back below)
        try:
            yield {}
        finally:
            setattr(file_download, "tqdm", saved)  # noqa: B010
            for left in opened:
                left.close()


def hub_download(repo_id: str, filename: str, revision: str | None) -> Path:
    """``hf_hub_download`` into the current cache from the current endpoint, retried, progress to the current
    display; when it fails for good, the ``.incomplete`` files it wrote in that repository's cache are removed.

    Partial files an earlier process left there (killed mid-transfer) are removed first once an hour old: a
    transfer in progress writes to its own all the time. Not enough free disk space for the file, which the
    library only warns about before it starts, stops the download there (an ENOSPC OSError, after a note with
    the sizes); its other warnings become notes on the display, and so does another download in progress from
    the repository (the library waits for its lock without a word)."""
    from huggingface_hub import hf_hub_download

    blobs = Path(cache_dir()) / f"models--{repo_id.replace('/', '--')}" / "blobs"
    started = time.time() - 1.0
    remove_stale_partials(blobs)
    if any(_held(lock) for lock in _locks_of(blobs).glob("*.lock")):
        note(f"another download from {repo_id} into {cache_dir()} is in progress: one of the same file waits for it")
    try:
        with progress(hf_hub_download) as kwargs, warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", UserWarning)
            warnings.filterwarnings("error", message="Not enough free disk space", category=UserWarning)
            try:
                return Path(
                    retried(lambda: hf_hub_download(
                        repo_id, filename, revision=revision, cache_dir=cache_dir(), endpoint=endpoint(),
                        library_name="sst-cli", library_version=__version__, **kwargs,
                    ))
                )  # fmt: skip
            except UserWarning as full:  # said before the transfer: stop there, not when the disk is full
                note(" ".join(str(full).split()))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from full
            finally:
                for warning in dict.fromkeys(" ".join(str(w.message).split()) for w in said):
                    note(warning)
    except BaseException:
        _remove_partials(blobs, lambda mtime: mtime >= started)
        raise


def file_etag(repo_id: str, filename: str, revision: str | None) -> str | None:
    """The Hub's ETag for ``filename`` at ``revision``: for an LFS file its sha256 (the X-Linked-Etag), for a file
    kept in git its git sha1. One HEAD request, retried, given at most SST_HUB_TIMEOUT seconds.

    ``get_hf_file_metadata`` answers it the same way on every supported huggingface_hub (0.23 to 2.x)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint())
    metadata = answered(
        lambda: retried(lambda: get_hf_file_metadata(url, library_name="sst-cli", library_version=__version__)),
        endpoint(),
    )
    return metadata.etag


def remove_stale_partials(folder: Path) -> None:
    """Remove the ``.incomplete`` files a killed process left in ``folder`` (a repository's blobs, or the release
    folder): those untouched for STALE_PARTIAL_S, since a transfer in progress writes to its own all the time."""
    _remove_partials(folder, lambda mtime: mtime < time.time() - 1.0 - STALE_PARTIAL_S)


def _remove_partials(blobs: Path, chosen: Callable[[float], bool]) -> None:
    """Remove the ``.incomplete`` files in ``blobs`` whose modification time ``chosen`` accepts, except those of
    a transfer in progress: huggingface_hub holds ``.locks/<repo>/<etag>.lock`` while it writes one, and a
    second process that failed (or was interrupted while waiting for that lock) removed the first one's file,
    which then could not be moved into place."""
    locks = _locks_of(blobs)
    for partial in blobs.glob("*.incomplete"):
        with contextlib.suppress(OSError):
            if chosen(partial.stat().st_mtime) and not _held(locks / f"{partial.name.split('.', 1)[0]}.lock"):
                partial.unlink()


def _locks_of(blobs: Path) -> Path:
    """The folder of huggingface_hub's locks for the repository whose cached files are in ``blobs``."""
    return blobs.parent.parent / ".locks" / blobs.parent.name


def _held(lock_file: Path) -> bool:
    """True while another download holds ``lock_file`` (huggingface_hub's lock of one file it writes)."""
    from filelock import FileLock, Timeout

    if not lock_file.exists():
        return False
    try:
        with FileLock(lock_file, timeout=0):
            return False
    except Timeout:
        return True


def cached_file(repo_id: str, filename: str, revision: str | None) -> object:
    """``try_to_load_from_cache`` on the current cache: a str path, None, or the library's "known missing"."""
    from huggingface_hub import try_to_load_from_cache

    return try_to_load_from_cache(repo_id, filename, revision=revision, cache_dir=cache_dir())


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status the server answered with, if ``exc`` (or what it wraps) carries one."""
    for error in causes(exc):
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status is not None:
            return int(status)
    return None


def transient(exc: BaseException) -> bool:
    """True for a failure that may pass if asked again: an HTTP 408 / 429 / 5xx answer, a connection that
    failed or broke off, a body shorter than announced (also when the library wrapped it in another error)."""
    for current in causes(exc):
        status = getattr(getattr(current, "response", None), "status_code", None)
        if status in _TRANSIENT_STATUS:
            return True
        if status is not None:
            return False
        module = type(current).__module__.split(".", 1)[0]
        if module in NETWORK_MODULES or isinstance(current, ConnectionError | TimeoutError):
            return True
        if isinstance(current, OSError) and "Consistency check failed" in str(current):
            return True
    return False


class _ToDisplay(logging.Filter):
    """Kept on huggingface_hub's log handlers: while a display is set (a front end downloading), a record becomes a
    note on it (none under --quiet / --json-log) instead of a line on stderr; each line once per display, since a
    transfer cut off again and again logs the same lines on every try. With no display, records pass as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.said: weakref.WeakKeyDictionary[Display, set[str]] = weakref.WeakKeyDictionary()

    def filter(self, record: logging.LogRecord) -> bool:
        display = current_display()
        if display is None:
            return True
        with contextlib.suppress(Exception):  # a log line must never fail a download
            text = " ".join(record.getMessage().split())
            said = self.said.setdefault(display, set())
            if text not in said:
                said.add(text)
                display.note(text)
        return False


def _library_logs_to_display() -> None:
    """Put ``_ToDisplay`` on huggingface_hub's log handlers (its StreamHandler on stderr printed dozens of retry
    lines that --quiet and --json-log promise not to show), once; the filter reads the display of the thread
    that logs, so calls in threads and a display set later need nothing more."""
    from huggingface_hub.utils import logging as hub_logging  # its import adds the StreamHandler

    for handler in hub_logging.get_logger().handlers:
        if not any(isinstance(f, _ToDisplay) for f in handler.filters):
            handler.addFilter(_TO_DISPLAY)


_TO_DISPLAY = _ToDisplay()


def retried(call: Callable[[], T]) -> T:
    """``call()``, attempted again after the waits in RETRY_WAITS while it fails transiently, with
    huggingface_hub's log records sent to the display (see ``_library_logs_to_display``).

    A server error answered, or a time-out reached, after more than BACKED_OFF_S is not asked again:
    huggingface_hub has retried it with its own backoff (5 tries over ~23 s), and three rounds of that kept a
    user waiting 73 s for the same error (a server that stalls: 3 min 20 s). A connection broken mid-transfer is
    asked again (the download resumes).
    """
    _library_logs_to_display()
    for wait in RETRY_WAITS:
        start = time.monotonic()
        try:
            return call()
        except Exception as exc:
            backed_off = _status_of(exc) is not None or _timed_out(exc)
            if not transient(exc) or (backed_off and time.monotonic() - start > BACKED_OFF_S):
                raise
        time.sleep(wait)
    return call()


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a time-out: the server took the connection and stopped answering."""
    return any(isinstance(e, TimeoutError) or "Timeout" in type(e).__name__ for e in causes(exc))
