"""The network edge: is a host reachable (answered in seconds, not after ~25 s of library retries), one sentence
per failure, and the release download (huggingface_hub's own HTTP helper: retries, resume, progress)."""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import socket
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import CheckpointError, ConfigError, WeightsNotFound, WriteError, causes
from .advice import own_weights
from .library import NETWORK_MODULES, progress, remove_stale_partials
from .library import endpoint as endpoint
from .refs import sha256_of

DEFAULT_PROBE_TIMEOUT = 3.0


def offline() -> bool:
    """HF_HUB_OFFLINE (as huggingface_hub read it): no request at all, cached files only."""
    from huggingface_hub import constants

    is_offline = getattr(constants, "is_offline_mode", None)  # huggingface_hub >= 1.x; older: the constant
    return bool(is_offline() if callable(is_offline) else constants.HF_HUB_OFFLINE)


def host_of(url: str) -> str:
    return urlsplit(url).netloc or url


def _probe_timeout() -> float:
    try:
        return max(0.1, float(os.environ.get("SST_NET_TIMEOUT", DEFAULT_PROBE_TIMEOUT)))
    except ValueError:
        return DEFAULT_PROBE_TIMEOUT


def _address(url: str) -> tuple[str, int] | None:
    """Host and port a request for ``url`` connects to first: the proxy's when one applies."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parts.hostname):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_parts.hostname:
            return proxy_parts.hostname, proxy_parts.port or _default_port(proxy_parts.scheme)
    return parts.hostname, parts.port or _default_port(parts.scheme)


def _default_port(scheme: str) -> int:
    """The port a URL of ``scheme`` without one connects to (an https:// proxy listens on 443, like any TLS server)."""
    return 443 if scheme == "https" else 80


def reachable(url: str, timeout: float | None = None) -> bool:
    """True when a TCP connection to ``url``'s host (or its proxy) opens within ``timeout`` seconds.

    Name resolution runs in a daemon thread so that a resolver that hangs cannot hold the caller longer
    than ``timeout`` (SST_NET_TIMEOUT, default 3 s) either.
    """
    address = _address(url)
    if address is None:
        return False
    limit = _probe_timeout() if timeout is None else timeout
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection(address, timeout=limit).close()
            result.append(True)
        except (OSError, ValueError):
            result.append(False)

    thread = threading.Thread(target=probe, name="sst-net-probe", daemon=True)
    thread.start()
    thread.join(limit + 0.2)
    return bool(result and result[0])


def clean(text: object, limit: int = 200) -> str:
    """An exception's text on one line, shortened: library messages span lines and carry URLs and advice."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def reason(exc: BaseException, repo_id: str | None = None) -> str:
    """A short phrase for what went wrong in a request (no trailing advice: the caller adds what to do);
    ``repo_id``: the repository asked, named where access was refused."""
    from huggingface_hub.utils import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from .discover import Refused
    from .library import NoAnswer

    if isinstance(exc, NoAnswer | Refused):
        return str(exc)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set"
    if isinstance(exc, LocalEntryNotFoundError):  # a subclass of EntryNotFoundError: test it first
        answer = _answer_behind(exc)  # the library wraps a failed HEAD of the file in "could not be reached"
        return reason(answer, repo_id) if answer is not None else "the server could not be reached"
    if denied(exc):
        code = f" (HTTP {status})" if status else ""
        return f"access{f' to {repo_id}' if repo_id else ''} is gated or unauthorised{code}"
    if isinstance(exc, RepositoryNotFoundError):
        return "the repository does not exist (or is private: set HF_TOKEN)"
    if isinstance(exc, RevisionNotFoundError):
        return "the revision does not exist"
    if isinstance(exc, EntryNotFoundError):
        return "the file does not exist there"
    if isinstance(exc, HfHubHTTPError) and status is not None:
        return f"the server answered HTTP {status}"
    module = type(exc).__module__.split(".", 1)[0]
    if module in NETWORK_MODULES or isinstance(exc, ConnectionError | TimeoutError):
        return f"the connection failed or was cut off ({type(exc).__name__}: {clean(exc, 120)})"
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        return "the download was incomplete (the server sent fewer bytes than announced)"
    return f"{type(exc).__name__}: {clean(exc, 120)}"


def denied(exc: BaseException) -> bool:
    """True when the server refused access (HTTP 401 / 403, a gated repository): the next step is a token or
    accepting terms, not trying again later. A private repository answered as "not found" is not counted here."""
    from huggingface_hub.utils import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    if isinstance(exc, LocalEntryNotFoundError):
        answer = _answer_behind(exc)
        return answer is not None and denied(answer)
    if isinstance(exc, GatedRepoError):
        return True
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status in (401, 403) and not isinstance(exc, RepositoryNotFoundError)


def access_advice(repo_id: str) -> str:
    """What to do when ``repo_id`` refused access, naming the Hub actually asked (HF_ENDPOINT may be a mirror)."""
    host = host_of(endpoint())
    return f"set HF_TOKEN to a token that can read {repo_id} (and accept its terms on {host} if it is gated)"


def _answer_behind(exc: BaseException) -> BaseException | None:
    """The HTTP error with a status code that ``exc`` was raised from, if any (its cause chain)."""
    behind = itertools.islice(causes(exc), 1, None)  # not ``exc`` itself
    return next((e for e in behind if getattr(getattr(e, "response", None), "status_code", None) is not None), None)


_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def storage_error(exc: BaseException, folder: str | os.PathLike[str]) -> WriteError | None:
    """A download that failed because ``folder`` (the cache) cannot be written, as one sentence; None otherwise.

    The Hub is not to blame there, and trying again later will not help."""
    from ..files import _os_reason

    for current in causes(exc):
        if isinstance(current, OSError) and current.errno in _STORAGE_ERRNOS:
            return WriteError(
                f"cannot write the download to {folder}: {_os_reason(current)}; free space there, or set "
                "HF_HUB_CACHE (HF_HOME for the authors' release files) to a folder that can be written"
            )
    return None


def is_missing(exc: BaseException) -> bool:
    """True when the server said the repository, revision or file does not exist (not a transient failure)."""
    from huggingface_hub.utils import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, LocalEntryNotFoundError):  # "not cached and the server could not be reached"
        answer = _answer_behind(exc)
        return answer is not None and is_missing(answer)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(exc, EntryNotFoundError | RepositoryNotFoundError | RevisionNotFoundError) or status == 404


def as_config_error(exc: BaseException, what: str) -> ConfigError | None:
    from huggingface_hub.utils import HFValidationError

    if isinstance(exc, HFValidationError):
        return ConfigError(f"invalid Hub repository id or revision in {what}: {clean(exc, 150)}")
    return None


def download_url(url: str, destination: Path, *, expected_sha256: str | None = None, label: str) -> str:
    """Download ``url`` to ``destination`` atomically and return its sha256.

    huggingface_hub's ``http_get`` does the transfer (retries and resumes with Range requests on dropped
    connections, progress to the current display). The bytes go to a unique temporary file beside the
    destination, are hashed, checked against ``expected_sha256`` when known, and only then renamed into place:
    a failed or rejected download leaves nothing behind, and one a killed process left is removed an hour later
    (by the next download into that folder). Raises the transfer's exception, or CheckpointError.
    """
    from huggingface_hub.file_download import http_get

    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(destination.parent)  # left by killed downloads: nothing else would ever remove them
    temp = destination.with_name(f".{destination.name}.{secrets.token_hex(4)}.incomplete")
    try:
        with temp.open("wb") as fh, progress(http_get) as kwargs:
            http_get(url, fh, displayed_filename=destination.name, **kwargs)
        actual = sha256_of(temp)
        if expected_sha256 and actual != expected_sha256:
            raise CheckpointError(
                f"{label} downloaded from {url} has sha256 {actual}, not the expected {expected_sha256}: "
                f"the file was discarded; try again later, or download it yourself and pass {own_weights()}"
            )
        os.replace(temp, destination)
        return actual
    finally:
        temp.unlink(missing_ok=True)


def no_network(hosts: list[str], what: str, pull_hint: str | None, *, pulling: bool = False) -> WeightsNotFound:
    """The one sentence for a machine that reaches none of the hosts that could serve ``what``; ``pulling``: the
    command that failed is the download itself, so only trying it again helps."""
    where = " or ".join(dict.fromkeys(hosts))
    if pulling:
        return WeightsNotFound(
            f"no network: cannot reach {where} to download {what}: connect to the internet and run this command again"
        )
    offline_hint = "set HF_HUB_OFFLINE=1 to use cached weights only"
    later = f", run `{pull_hint}` once online" if pull_hint else ""
    return WeightsNotFound(
        f"no network: cannot reach {where} to download {what}: connect to the internet{later}, {offline_hint}, "
        f"or pass {own_weights()}"
    )
