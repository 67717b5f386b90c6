"""Where the weights of a zoo name come from, and getting them there: the one decision path.

Order for an official entry (``resolve``):

1. ``--hub-repo`` / ``SST_HUB_REPO``: that repository only (no discovery, no release, nothing pinned).
2. A pin (``pins.py``) whose file is cached: used with no network at all, checked against its sha256.
3. ``HF_HUB_OFFLINE``: stop here with what to do.
4. The Hub (when it answers a quick probe): the pinned commit, else the manifest's verified repository, else
   discovery by file name (``discover.py``); downloaded with ``hf_hub_download`` at that commit, verified
   against the sha256 (manifest, else LFS), pinned.
5. The authors' release (``<release base>/<file name>``) when the Hub has no such file or fails.

``locate`` answers the same question without the network (for ``sst models``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import CheckpointError, ConfigError, WeightsNotFound, WriteError, system_reason
from ..zoo import check_hub_repo
from . import discover, library, net
from .advice import named_repo, own_weights, repo_option
from .manifest import (
    Entry,
    bundled_models,
    hub_collection,
    hub_owner,
    manifest_entry,
    not_trained_message,
    off_hub_message,
    release_base,
    weights_dir_remedy,
)
from .pins import Pin, drop_pin, get_pin, known_sha256, pin_key, pins_path, release_dir, remember_sha256, save_pin
from .progress import note
from .refs import COMMIT_RE, SHA256_RE, HubFile, sha256_of


def _do_instead() -> str:
    return (
        f"pass {named_repo()} if you know a repository that holds it, or download it yourself and pass {own_weights()}"
    )


_UNSET_OFFLINE = "unset it (it keeps huggingface_hub from the network) and run this command again"


@dataclass(frozen=True)
class Location:
    """Where one model's weights at one scale come from.

    ``source``: "bundled", "hub" (``repo_id`` at ``commit``, file ``filename``), "release" (``url``),
    "off-hub" (published elsewhere: ``url`` is the page), "untrained" (sst-cli's own, not made yet) or
    "unresolved" (not looked for yet). ``path`` is the local file when there is one.
    """

    name: str
    scale: int
    source: str
    path: Path | None = None
    repo_id: str | None = None
    commit: str | None = None
    filename: str | None = None
    url: str | None = None
    sha256: str | None = None
    pinned: bool = False
    changed: bool = False  # a pinned file whose size or mtime differ from when it was verified (hashed on use)

    @property
    def cached(self) -> bool:
        return self.path is not None and self.path.is_file()

    @property
    def origin(self) -> str:
        """Where from, in a few words: ``hub OWNER/REPO@1a2b3c4``, ``release URL``, ``bundled``, ..."""
        if self.source == "hub":
            rev = (self.commit[:7] if COMMIT_RE.match(self.commit) else self.commit) if self.commit else "main"
            return f"hub {self.repo_id}@{rev}"
        if self.source == "release":
            return f"release {self.url}"
        if self.source == "off-hub":
            return f"off the hub: {self.url}" if self.url else "off the hub"
        if self.source == "untrained":
            return "not trained yet"
        if self.source == "unresolved":
            return f"hub {self.repo_id}, not downloaded yet" if self.repo_id else "not found yet"
        return self.source


def _explicit_repo(repo_id: str | None) -> str | None:
    """The repository named by the caller, else by SST_HUB_REPO, checked as --hub-repo is: a bad one was taken to
    the Hub ('bad@main does not exist'), or named an hf:// reference the user never wrote."""
    if repo_id:
        return repo_id
    variable = os.environ.get("SST_HUB_REPO") or None
    check_hub_repo(variable, given=f"SST_HUB_REPO={variable!r}")
    return variable


def _commit_of(path: Path | None) -> str | None:
    """The commit of a file in huggingface_hub's cache layout (``.../snapshots/<commit>/<file>``)."""
    if path is None:
        return None
    for parent in path.parents:
        if parent.parent.name == "snapshots":
            return parent.name
    return None


def _lfs_sha256(path: Path) -> str | None:
    """An LFS file's sha256, which huggingface_hub uses as the blob's name in its cache."""
    try:
        name = path.resolve().name if path.is_symlink() else None
    except OSError:
        return None
    return name if name and SHA256_RE.match(name) else None


def _evict(path: Path) -> OSError | None:
    """Remove a rejected file from the cache: the snapshot entry and the blob it points to. Returns the error that
    kept one of them there (a shared cache this user may not change), None once both are gone: the caller's words
    depend on it."""
    try:
        blob = path.resolve() if path.is_symlink() else None
    except OSError:
        blob = None
    try:
        path.unlink(missing_ok=True)
        if blob is not None and blob != path and not _linked_elsewhere(blob):
            blob.unlink(missing_ok=True)
    except OSError as exc:
        return exc
    return None


def _linked_elsewhere(blob: Path) -> bool:
    """Whether another snapshot entry of the repository links to ``blob``: the cache stores equal files once, so a
    mirror's x3 name refused for holding x2 weights took the good x2 file (pulled for offline use) with it."""
    snapshots = blob.parent.parent / "snapshots"
    for entry in snapshots.rglob("*") if snapshots.is_dir() else ():
        with contextlib.suppress(OSError):
            if entry.is_symlink() and entry.resolve() == blob:
                return True
    return False


def _kept_file(stuck: OSError, path: Path) -> Path:
    """The file that stayed when removing cached ``path`` failed: the blob it links to, if only the link went."""
    return Path(stuck.filename) if isinstance(stuck.filename, str) else path


def _evict_or_refuse(path: Path, said: str, again: str) -> None:
    """Remove a cached ``path`` that failed its sha256 (``said``: what is wrong with it); when it cannot be removed,
    refuse, naming the file kept and why: downloading it again into that cache cannot work (``hf_hub_download``
    returns the copy there as it is, or cannot write beside it). ``again``: how to get it once removed."""
    stuck = _evict(path)
    if stuck is None:
        return
    kept = _kept_file(stuck, path)
    variable = "HF_HOME" if release_dir() in path.parents else "HF_HUB_CACHE (or HF_HOME)"
    raise CheckpointError(
        f"{said}, and could not be removed from the cache ({kept}: {system_reason(stuck)}): remove it as a user who "
        f"may write to {kept.parent}, then {again}; or set {variable} to a folder you can write; or pass "
        f"{own_weights()}"
    )


def cached_path(file: HubFile) -> Path | None:
    """Path of ``file`` in the HF cache, or None; never touches the network."""
    try:
        found = library.cached_file(file.repo_id, file.filename, file.revision)
    except Exception as exc:  # HFValidationError for malformed ids
        error = net.as_config_error(exc, file.uri)
        if error is not None:
            raise error from exc
        raise
    # A str is a hit; None is a miss; a sentinel object means "known not to exist at that revision".
    return Path(found) if isinstance(found, str) and os.path.isfile(found) else None


# ----------------------------------------------------------------------------------------------------------------
# Without the network


def _usable_pin(entry: Entry, key: str) -> Pin | None:
    """The pin for ``entry`` unless the manifest has since named another repository or another sha256."""
    pin = get_pin(key)
    if pin is None:
        return None
    if entry.repo_id and pin.source == "hub" and pin.repo_id != entry.repo_id:
        return None
    if entry.sha256 and pin.sha256 != entry.sha256:
        return None
    return pin


def _pinned_location(entry: Entry, pin: Pin) -> Location:
    if pin.source == "hub":
        path = cached_path(HubFile(pin.repo_id or "", pin.filename, pin.commit))
        changed = path is not None and not pin.unchanged(path)
        return Location(entry.name, entry.scale, "hub", path, pin.repo_id, pin.commit, pin.filename,
                        sha256=pin.sha256, pinned=True, changed=changed)  # fmt: skip
    local = release_dir() / pin.filename
    path = local if local.is_file() else None
    changed = path is not None and not pin.unchanged(path)
    return Location(entry.name, entry.scale, "release", path, filename=pin.filename, url=pin.url,
                    sha256=pin.sha256, pinned=True, changed=changed)  # fmt: skip


def locate(name: str, scale: int, *, repo_id: str | None = None) -> Location:
    """Where ``name`` x``scale`` would be loaded from, from the manifest, the pins and the cache only."""
    entry = manifest_entry(name, scale)
    where = (entry.name, entry.scale)
    if entry.bundled and repo_id is None:
        path = entry.bundled_path
        return Location(*where, "bundled", path if path and path.is_file() else None, filename=entry.bundled,
                        sha256=entry.sha256)  # fmt: skip
    if entry.ours:
        return Location(*where, "untrained")
    explicit = _explicit_repo(repo_id)
    if explicit and entry.filename:
        path = cached_path(HubFile(explicit, entry.filename, entry.revision))
        return Location(*where, "hub", path, explicit, _commit_of(path) or entry.revision, entry.filename,
                        sha256=entry.sha256)  # fmt: skip
    if explicit:
        entry = replace(entry, repo_id=explicit)
    elif not entry.on_hub:
        return Location(*where, "off-hub", url=entry.where, filename=entry.filename)
    pin = _usable_pin(entry, pin_key(entry))
    if pin is not None:
        return _pinned_location(entry, pin)
    copies = _cached_copies(entry)
    if copies:  # no pin: the sha256 it must have is the manifest's, else its LFS sha256 (the blob's name)
        path, repo, commit = copies[0]
        return Location(*where, "hub", path, repo, commit, entry.filename, sha256=entry.sha256 or _lfs_sha256(path))
    return Location(*where, "unresolved", repo_id=entry.repo_id, filename=entry.filename, sha256=entry.sha256)


def _cached_copies(entry: Entry) -> list[tuple[Path, str, str]]:
    """(path, repository, commit) of each copy of the entry's file in the Hugging Face cache, in the owner's
    repositories (the manifest's repository only, when it names one), those named like the file first.

    Copies that no pin records: pins.json deleted, another HF_HOME sharing the cache, or ``hf download``."""
    owner = entry.repo_id.split("/", 1)[0] if entry.repo_id else hub_owner()
    if not owner or not entry.filename or "/" in entry.filename:
        return []
    repos = f"models--{entry.repo_id.replace('/', '--')}" if entry.repo_id else f"models--{owner}--*"
    copies = []
    for path in Path(library.cache_dir()).glob(f"{repos}/snapshots/*/{entry.filename}"):
        commit, repo = path.parent.name, path.parents[2].name.removeprefix("models--").replace("--", "/", 1)
        if COMMIT_RE.match(commit) and path.is_file():
            copies.append((path, repo, commit))
    return sorted(copies, key=lambda copy: (discover.name_rank(copy[1], entry.filename or ""), copy[1]))


def _adopt_cached(entry: Entry, key: str, *, pulling: bool) -> Location | None:
    """A cached copy no pin records, verified (manifest sha256, else its LFS sha256) and pinned; None if none.

    A damaged copy is removed, as a pinned one is: left there, offline runs called it "not in the cache" and
    ``hf_hub_download`` at its commit returned it as it was, so the first download failed. Offline, that is the
    error; online, the caller downloads it again (said in a note)."""
    damaged: list[str] = []
    for path, repo, commit in _cached_copies(entry):
        expected = entry.sha256 or _lfs_sha256(path)
        if expected is None:
            continue  # unverifiable (a plain-file cache): the Hub decides
        actual = sha256_of(path)
        if actual != expected:
            damaged.append(_removed_damaged(entry, path, actual, f"the expected {expected}"))
            continue
        save_pin(key, Pin("hub", entry.filename or "", actual, repo_id=repo, commit=commit).with_stat(path))
        return Location(entry.name, entry.scale, "hub", path, repo, commit, entry.filename, sha256=actual,
                        pinned=True)  # fmt: skip
    if damaged and net.offline():
        again = _UNSET_OFFLINE if pulling else f"run `{entry.pull_hint}` with network access, or pass {own_weights()}"
        raise CheckpointError(f"{'; '.join(damaged)}: HF_HUB_OFFLINE is set; {again}")
    for phrase in damaged:
        note(f"{phrase}: downloading them again")
    return None


def _removed_damaged(entry: Entry, path: Path, actual: str, expected: str) -> str:
    """Remove a cached copy that failed its sha256 and say so (the start of a note or an error); one that cannot be
    removed is refused here, whatever the caller would do next (``_evict_or_refuse``)."""
    said = f"the cached {entry.label} weights ({path}) have sha256 {actual}, not {expected}"
    _evict_or_refuse(path, said, f"run `{entry.pull_hint}`")
    return f"{said}, and were removed"


# ----------------------------------------------------------------------------------------------------------------
# Getting the file


def _checked_cached(entry: Entry, key: str, pin: Pin, location: Location, *, pulling: bool) -> Location | None:
    """A pinned, cached file, hashed again when its size or mtime changed since it was verified, and always when
    ``pulling`` (what users run to repair: damage in place keeps both); a damaged one is removed (None when
    ``pulling``: the caller downloads it again)."""
    path = location.path
    assert path is not None
    if pin.unchanged(path) and not pulling:
        return location
    actual = sha256_of(path)
    if actual != pin.sha256:
        drop_pin(key)
        damaged = _removed_damaged(entry, path, actual, f"the {pin.sha256} recorded when they were downloaded")
        if pulling:
            note(f"{damaged}: downloading them again")
            return None
        raise CheckpointError(f"{damaged}: run `{entry.pull_hint}` to download them again")
    save_pin(key, pin.with_stat(path))
    return location


def _fetch_hub(entry: Entry, key: str, found: discover.Found) -> Location:
    """Download a located file at its commit, verify it (manifest sha256, else LFS), pin it.

    ``hf_hub_download`` at a commit returns a copy already cached there as it is, without a request: a damaged
    one (in a sub-folder, or a plain-file cache, which ``_adopt_cached`` cannot judge) is removed and downloaded
    once more, not blamed on the download."""
    note(f"{entry.label}: {found.path} from the Hugging Face repository {found.repo_id} (commit {found.commit[:7]})")
    was_cached = cached_path(HubFile(found.repo_id, found.path, found.commit)) is not None
    path = library.hub_download(found.repo_id, found.path, found.commit)
    expected = entry.sha256 or found.sha256 or _lfs_sha256(path)
    actual = sha256_of(path)
    if expected and actual != expected and was_cached:
        note(f"{_removed_damaged(entry, path, actual, f'the expected {expected}')}: downloading them again")
        path = library.hub_download(found.repo_id, found.path, found.commit)
        actual = sha256_of(path)
    if expected and actual != expected:
        said = f"{found.path} from {found.repo_id}@{found.commit[:7]} has sha256 {actual}, not the expected {expected}"
        _evict_or_refuse(path, said, "try again later")
        raise CheckpointError(
            f"{said}: the file was removed from the cache; try again later, or download it yourself and pass "
            f"{own_weights()}"
        )
    save_pin(key, Pin("hub", found.path, actual, repo_id=found.repo_id, commit=found.commit).with_stat(path))
    return Location(entry.name, entry.scale, "hub", path, found.repo_id, found.commit, found.path, sha256=actual,
                    pinned=True)  # fmt: skip


def _fetch_release(entry: Entry, key: str, url: str) -> Location:
    assert entry.filename is not None
    note(f"{entry.label}: downloading {entry.filename} from the authors' release {url}")
    destination = release_dir() / entry.filename
    label = f"{entry.label} weights"
    actual = library.retried(lambda: net.download_url(url, destination, expected_sha256=entry.sha256, label=label))
    save_pin(key, Pin("release", entry.filename, actual, url=url).with_stat(destination))
    return Location(entry.name, entry.scale, "release", destination, filename=entry.filename, url=url,
                    sha256=actual, pinned=True)  # fmt: skip


def _find_on_hub(entry: Entry, pin: Pin | None) -> discover.Found | None:
    if pin is not None and pin.source == "hub" and pin.repo_id and pin.commit:
        return discover.Found(pin.repo_id, pin.commit, pin.filename, pin.sha256)
    if entry.repo_id and entry.filename:
        commit, siblings = discover.repo_files(entry.repo_id, entry.revision)
        sibling = discover.file_in(siblings, entry.filename)
        return discover.found_file(entry.repo_id, commit, sibling) if sibling is not None else None
    if entry.repo_id:
        return discover.only_checkpoint(entry.repo_id, entry.revision)
    owner = hub_owner()
    if owner is None or entry.filename is None:
        return None
    note(f"{entry.label}: looking for {entry.filename} in the repositories of {owner} on {net.host_of(net.endpoint())}")
    return discover.find_file(entry.filename, owner, hub_collection())


def _not_on_hub(entry: Entry) -> str:
    host = net.host_of(net.endpoint())
    if entry.repo_id:
        return f"{entry.repo_id} on {host} does not hold {entry.what}"
    owner = hub_owner()
    return f"no repository of {owner} on {host} holds it" if owner else f"no repository on {host} is known to hold it"


def _find_and_fetch(entry: Entry, key: str, pin: Pin | None, *, release: bool, pulling: bool) -> Location:
    """Hub first (pinned commit, verified repository or discovery), then the authors' release."""
    problems: list[str] = []
    unreachable: list[str] = []
    transient = False  # a failure that may pass (server error, broken transfer): worth trying again
    refused_by: str | None = None  # the repository that refused access: a token is the next step
    hub = net.endpoint()
    host = net.host_of(hub)
    if net.reachable(hub):
        found: discover.Found | None = None
        try:
            found = library.retried(lambda: library.answered(lambda: _find_on_hub(entry, pin), host))
            if found is not None:
                return _fetch_hub(entry, key, found)
            problems.append(_not_on_hub(entry))
        except (CheckpointError, ConfigError, WeightsNotFound):
            raise
        except Exception as exc:  # huggingface_hub and httpx raise many unrelated types: all become one phrase
            error = net.as_config_error(exc, entry.repo_id or entry.what) or net.storage_error(exc, library.cache_dir())
            if error is not None:
                raise error from exc
            if pin is not None and net.is_missing(exc):  # the pinned commit is gone: look again
                drop_pin(key)
                return _find_and_fetch(entry, key, None, release=release, pulling=pulling)
            repo = found.repo_id if found is not None else entry.repo_id
            problems.append(f"the Hub failed: {net.reason(exc, repo)}")
            if net.denied(exc) and repo:
                refused_by = repo
            elif not (net.is_missing(exc) or net.denied(exc) or isinstance(exc, discover.Refused)):
                transient = True
    else:
        unreachable.append(net.host_of(hub))
        problems.append(f"cannot reach {net.host_of(hub)}")
    base = release_base() if release else None
    url = f"{base}/{entry.filename}" if base and entry.filename else None
    if url is not None:
        if net.reachable(url):
            try:
                return _fetch_release(entry, key, url)
            except CheckpointError:
                raise
            except Exception as exc:
                stuck = net.storage_error(exc, release_dir())
                if stuck is not None:
                    raise stuck from exc
                missing = net.is_missing(exc)
                why = "it is not there (HTTP 404)" if missing else net.reason(exc)
                problems.append(f"the release download {url} failed: {why}")
                transient = transient or not missing
        else:
            unreachable.append(net.host_of(url))
            problems.append(f"cannot reach {net.host_of(url)}")
    if unreachable and len(unreachable) == 1 + (url is not None):
        raise net.no_network(unreachable, f"{entry.label} weights ({entry.what})", entry.pull_hint, pulling=pulling)
    steps = ["try again later"] if transient or unreachable else []
    steps += [net.access_advice(refused_by)] if refused_by else []
    raise WeightsNotFound(
        f"{entry.label} weights ({entry.what}) could not be downloaded: {'; '.join(problems)}: "
        + "".join(f"{step}, " for step in steps)
        + _do_instead()
    )


def _offline_message(entry: Entry, *, pulling: bool) -> str:
    if pulling:
        return f"{entry.label} weights ({entry.what}) cannot be downloaded: HF_HUB_OFFLINE is set; {_UNSET_OFFLINE}"
    return (
        f"{entry.label} weights ({entry.what}) are not in the cache and HF_HUB_OFFLINE is set: run "
        f"`{entry.pull_hint}` with network access, or pass {own_weights()}"
    )


def resolve(name: str, scale: int, *, repo_id: str | None = None) -> Location:
    """The local file of ``name`` x``scale`` (downloading it if needed) and where it came from.

    ``repo_id`` (or SST_HUB_REPO) names the repository to use instead of any other source; an explicit
    ``repo_id`` also bypasses a bundled file.
    """
    return _resolve(name, scale, repo_id=repo_id, pulling=False)


def _resolve(name: str, scale: int, *, repo_id: str | None, pulling: bool) -> Location:
    """``resolve``; ``pulling``: run by ``sst models pull``, whose failures advise running it again, not running
    ``sst models pull``, and which downloads a damaged cached file again instead of refusing it."""
    entry = manifest_entry(name, scale)
    if entry.bundled and repo_id is None:
        return _bundled(entry)
    if entry.ours:
        if repo_id is not None:
            raise ConfigError(
                f"{entry.name} weights are trained by sst-cli and bundled with it, not on the Hugging Face Hub: "
                f"drop {repo_option()}, or choose an official model to download"
            )
        raise WeightsNotFound(not_trained_message(entry))
    explicit = _explicit_repo(repo_id)
    if explicit and entry.filename:
        file = HubFile(explicit, entry.filename, entry.revision, entry.sha256)
        path = download(file, pull_hint=entry.pull_hint + f" --hub-repo {explicit}", pulling=pulling)
        return Location(entry.name, entry.scale, "hub", path, explicit, _commit_of(path), entry.filename,
                        sha256=entry.sha256)  # fmt: skip
    if explicit:  # the file name is unknown: that repository's one checkpoint, pinned under repo:OWNER/REPO
        entry = replace(entry, repo_id=explicit, revision=None)
    elif not entry.on_hub:
        raise WeightsNotFound(off_hub_message(entry))
    key = pin_key(entry)
    pin = _usable_pin(entry, key)
    if pin is not None:
        location = _pinned_location(entry, pin)
        checked = _checked_cached(entry, key, pin, location, pulling=pulling) if location.path else None
        if checked is not None:
            return checked
    adopted = _adopt_cached(entry, key, pulling=pulling) if not explicit else None
    if adopted is not None:
        return adopted
    if net.offline():
        raise WeightsNotFound(_offline_message(entry, pulling=pulling))
    return _find_and_fetch(entry, key, pin, release=not explicit, pulling=pulling)


def pull(name: str, scale: int, *, repo_id: str | None = None) -> Location:
    """``resolve`` for later offline use: a download whose origin could not be recorded (the pins file cannot
    be written) is an error here, since an offline run would not find the file."""
    location = _resolve(name, scale, repo_id=repo_id, pulling=True)
    if location.path is not None and not locate(name, scale, repo_id=repo_id).cached:
        raise WriteError(
            f"{location.path} is downloaded, but where it came from could not be recorded in {pins_path()}, so "
            "an offline run will not find it: make that file writable and pull again, or pass --weights with "
            "that path"
        )
    return location


def forget(name: str, scale: int, *, repo_id: str | None = None) -> str | None:
    """Drop ``name`` x``scale``'s downloaded file and its pin: the file proved not to hold the model (another
    scale, a web page), so it must neither be loaded nor listed as cached again, and the next run looks for it
    again. Returns what became of the cached file, for the caller's message: None where there was none, else
    "was removed from the cache" or why it could not be (a shared cache this user may not change: it was said
    removed though it stayed); bundled files are never touched."""
    location = locate(name, scale, repo_id=repo_id)
    cached = location.path if location.source in ("hub", "release") and location.cached else None
    stuck = _evict(cached) if cached is not None else None
    entry = manifest_entry(name, scale)
    explicit = _explicit_repo(repo_id)
    if not (explicit and entry.filename):  # a named file of --hub-repo is never pinned: keep the authors' pin
        drop_pin(pin_key(replace(entry, repo_id=explicit, revision=None) if explicit else entry))
    if cached is None:
        return None
    if stuck is None:
        return "was removed from the cache"
    kept = _kept_file(stuck, cached)
    return (
        f"could not be removed from the cache ({kept}: {system_reason(stuck)}; remove it as a user who may write there)"
    )


def _bundled(entry: Entry) -> Location:
    path = entry.bundled_path
    assert path is not None
    if not path.is_file():
        raise WeightsNotFound(f"bundled weights {path} for {entry.label} are missing: {weights_dir_remedy()}")
    if entry.sha256 and sha256_of(path) != entry.sha256:
        raise CheckpointError(
            f"bundled weights {path} do not match the sha256 in the manifest (changed or damaged): "
            + weights_dir_remedy()
            + ", or update the manifest if you replaced them on purpose"
        )
    return Location(entry.name, entry.scale, "bundled", path, filename=entry.bundled, sha256=entry.sha256)


def resolve_pretrained(name: str, scale: int, *, repo_id: str | None = None) -> Path:
    """Local path of zoo weights (see ``resolve``); when a download fails, the message names the bundled
    weights that work without it."""
    try:
        location = resolve(name, scale, repo_id=repo_id)
    except WeightsNotFound as exc:
        entry = manifest_entry(name, scale)
        bundled = bundled_models()
        offline = [f"{n} x{s}" for n, s in bundled if s == scale] or [f"{n} x{s}" for n, s in bundled]
        if entry.ours or entry.bundled or not offline:
            raise
        hint = f" (without a download, the bundled {' / '.join(offline)} works: trained by sst-cli, not the paper's)"
        raise WeightsNotFound(str(exc) + hint) from exc
    assert location.path is not None
    return location.path


# ----------------------------------------------------------------------------------------------------------------
# One named file (hf:// references, --hub-repo)


def _download_error(file: HubFile, exc: Exception) -> Exception:
    error = net.as_config_error(exc, file.uri) or net.storage_error(exc, library.cache_dir())
    if error is not None:
        return error
    what = f"{file.filename} from {file.repo_id}" + (f"@{file.revision}" if file.revision else "")
    if net.denied(exc):
        step = net.access_advice(file.repo_id)
    elif net.is_missing(exc):
        step = f"check the repository ({repo_option()}, SST_HUB_REPO or the hf:// reference)"
    else:  # a server error, a broken or refused connection, no answer: the reference may well be right
        step = "try again later"
    return WeightsNotFound(f"cannot download {what}: {net.reason(exc, file.repo_id)}; {step}, or pass {own_weights()}")


def _expected_sha256(path: Path, file: HubFile) -> str | None:
    """The sha256 ``path`` must have: the given one, else its LFS sha256 (the cached blob's name). A file kept in
    git (not LFS) has a git sha1 as its blob name: there is nothing to check it against."""
    return file.sha256 or _lfs_sha256(path)


def _layout_hides_sha256(path: Path, file: HubFile) -> bool:
    """True when nothing here says the sha256 a cached ``path`` must have: none was given and the cache keeps it as
    a plain file (no symlinks: Windows without Developer Mode, a cache copied without its links), so there is no
    blob name to read the LFS sha256 from."""
    return file.sha256 is None and not path.is_symlink()


def _hub_sha256(path: Path, file: HubFile) -> str | None:
    """The LFS sha256 the Hub declares for ``file`` at the commit of its cached copy ``path`` (one request); None for
    a file kept in git (its ETag is a git sha1): there is nothing to check it against."""
    try:
        etag = library.file_etag(file.repo_id, file.filename, _commit_of(path) or file.revision)
    except Exception as exc:  # huggingface_hub/httpx raise many unrelated types; all become one sentence
        raise _download_error(file, exc) from exc
    return etag if etag and SHA256_RE.match(etag) else None


def _plain_file_sha256(path: Path, file: HubFile, *, hint: str, pulling: bool) -> str | None:
    """The sha256 a cached ``path`` whose layout hides it must have: the one remembered when it was last checked
    (it is unchanged since), else the Hub's. Without either, it is refused: README promises a check before use."""
    known = known_sha256(path)
    if known is not None:
        return known
    if not net.offline() and net.reachable(net.endpoint()):
        return _hub_sha256(path, file)
    what = f"{file.filename} from {file.repo_id}" + (f"@{file.revision}" if file.revision else "")
    why = "HF_HUB_OFFLINE is set" if net.offline() else f"no network: cannot reach {net.host_of(net.endpoint())}"
    again = _UNSET_OFFLINE if pulling and net.offline() else f"{hint} with network access (checked once, remembered)"
    raise CheckpointError(
        f"the cached {what} ({path}) cannot be checked against its sha256: the Hugging Face cache holds it as a plain "
        f"file (no symlinks), so only the Hub can say it, and {why}; {again}, or pass {own_weights()}"
    )


def _verified(path: Path, file: HubFile) -> Path:
    """A freshly downloaded ``path``, checked against its expected sha256; removed from the cache if it fails."""
    expected = _expected_sha256(path, file)
    if expected is None and _layout_hides_sha256(path, file):
        expected = _hub_sha256(path, file)
    if expected is None:
        return path
    actual = sha256_of(path)
    if actual == expected:
        remember_sha256(path, actual)
    else:
        said = f"{file.filename} from {file.repo_id} has sha256 {actual}, not the expected {expected}"
        _evict_or_refuse(path, said, "try again later")
        raise CheckpointError(
            f"{said}: the file was removed from the cache; try again later, or download it yourself and pass "
            f"{own_weights()}"
        )
    return path


def _damaged(path: Path, file: HubFile, *, rehash: bool, expected: str | None, again: str) -> str | None:
    """None when a cached ``path`` has its ``expected`` sha256 (or none is known); else, having removed it from the
    cache, a phrase saying what was wrong with it (a disk error, an interrupted copy, an edit by hand); refused
    when it cannot be removed (``_evict_or_refuse``, ``again``). A file hashed before and unchanged since (size,
    mtime, inode) is not read again unless ``rehash``."""
    if expected is None or (not rehash and known_sha256(path) == expected):
        return None
    actual = sha256_of(path)
    if actual == expected:
        remember_sha256(path, actual)
        return None
    said = f"the cached {file.filename} from {file.repo_id} ({path}) has sha256 {actual}, not the expected {expected}"
    _evict_or_refuse(path, said, again)
    return f"{said}, and was removed from the cache"


def download(file: HubFile, *, pull_hint: str | None = None, pulling: bool = False, rehash: bool = False) -> Path:
    """Fetch ``file`` into the standard HF cache (or find it there) and verify its sha256.

    A cached file is first checked against its sha256 (given, else its LFS sha256: the blob's name in the cache,
    or where the cache keeps plain files, the one remembered when it was last checked, else the Hub's; neither
    known: refused), read whole only when it changed since it was last hashed, when ``pulling`` or when
    ``rehash``: a damaged one is removed and downloaded again (refused when offline). A good one is used without
    a request when offline, when its revision is a commit, or when the Hub does not answer the quick probe.
    ``pull_hint``: the command suggested when offline and not cached; ``pulling``: that command is the one running.
    """
    hint = f"run `{pull_hint}`" if pull_hint else "run this command again"
    cached = cached_path(file)
    damaged = None
    if cached is not None:
        expected = _expected_sha256(cached, file)
        if expected is None and _layout_hides_sha256(cached, file):
            expected = _plain_file_sha256(cached, file, hint=hint, pulling=pulling)
        damaged = _damaged(cached, file, rehash=pulling or rehash, expected=expected, again=hint)
    if damaged is not None:
        cached = None
    pinned_commit = bool(file.revision and COMMIT_RE.match(file.revision))
    if cached is not None and (net.offline() or pinned_commit):
        return cached
    what = f"{file.filename} from {file.repo_id}" + (f"@{file.revision}" if file.revision else "")
    if net.offline():
        if damaged is not None:
            again = _UNSET_OFFLINE if pulling else f"{hint} with network access to download it again"
            raise CheckpointError(f"{damaged}: HF_HUB_OFFLINE is set; {again}, or pass {own_weights()}")
        if pulling:
            raise WeightsNotFound(f"{what} cannot be downloaded: HF_HUB_OFFLINE is set; {_UNSET_OFFLINE}")
        raise WeightsNotFound(
            f"{what} is not in the Hugging Face cache (HF_HUB_OFFLINE is set): {hint} with network access, "
            f"or pass {own_weights()}"
        )
    if not net.reachable(net.endpoint()):
        if cached is not None:
            return cached
        if damaged is not None:
            note(damaged)
        raise net.no_network([net.host_of(net.endpoint())], what, pull_hint, pulling=pulling)
    if damaged is not None:
        note(f"{damaged}: downloading it again")
    try:
        local = library.hub_download(file.repo_id, file.filename, file.revision)
    except Exception as exc:  # huggingface_hub/httpx raise many unrelated types; all become one sentence
        raise _download_error(file, exc) from exc
    return cached if local == cached else _verified(local, file)
