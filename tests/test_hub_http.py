"""The real huggingface_hub client against a fake Hub on 127.0.0.1 (``fakehub.py``): discovery by file name,
pins, offline reuse, sha256 rejection, broken transfers, the release fallback, --hub-repo, no network.

huggingface_hub reads HF_ENDPOINT / HF_HOME / HF_HUB_OFFLINE at import, so in-process tests patch its
``constants`` (and the environment, for consistency); ``test_cli_end_to_end`` runs ``sst upscale`` in a fresh
process with nothing but environment variables. Connections anywhere but 127.0.0.1 fail the test.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import huggingface_hub
import numpy as np
import pytest
from conftest import damage_pickle
from fakehub import FakeHub
from huggingface_hub import constants
from PIL import Image
from typer.testing import CliRunner

from sst_cli import hub
from sst_cli.cli import app
from sst_cli.errors import CheckpointError, WeightsNotFound, WriteError
from sst_cli.hub import library

ROOT = Path(__file__).resolve().parent.parent
OWNER = "dslisleedh"
LIGHT2 = "SSTlight_DFLIP_X2.pth"
SST4 = "SST_DF2K_X4.pth"
runner = CliRunner()

_real_getaddrinfo = socket.getaddrinfo
_real_connect = socket.socket.connect


def _local_only_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host not in ("127.0.0.1", "localhost"):
        raise AssertionError(f"test tried to resolve {host!r}")
    return _real_getaddrinfo(host, *args, **kwargs)


def _local_only_connect(self: socket.socket, address: Any) -> Any:
    if not (isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1")):
        raise AssertionError(f"test tried to connect to {address!r}")
    return _real_connect(self, address)


class _NoSleep:
    """huggingface_hub's ``time`` module without the waits between retries (keeps retry tests fast)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


def _point_at(monkeypatch: pytest.MonkeyPatch, endpoint: str, release: str) -> None:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("SST_RELEASE_URL", release)


@pytest.fixture
def net(monkeypatch: pytest.MonkeyPatch) -> None:
    """Online mode, telemetry off, only 127.0.0.1 reachable, no sst-cli overrides from the shell."""
    monkeypatch.setattr(socket, "getaddrinfo", _local_only_getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", _local_only_connect)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    for var in ("SST_HUB_REPO", "SST_WEIGHTS_DIR", "SST_NET_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fake(net: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A running fake Hub with the release under /release, and huggingface_hub pointed at it."""
    import huggingface_hub.file_download
    import huggingface_hub.utils._http

    server = FakeHub()
    _point_at(monkeypatch, server.url, server.url + "/release")
    monkeypatch.setattr(huggingface_hub.file_download, "time", _NoSleep())
    monkeypatch.setattr(huggingface_hub.utils._http, "time", _NoSleep())
    monkeypatch.setattr(library, "RETRY_WAITS", (0.0, 0.0))  # sst-cli's own retries, without the waits
    yield server
    server.close()


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def _cache_files() -> list[Path]:
    """Every file in the HF cache and sst-cli's folder (temporary files included), pins.json and its locks aside."""
    home = Path(constants.HF_HOME)
    skip = ("pins.json", "pins.json.lock", "hashed.json.lock", "CACHEDIR.TAG")  # locks: kept, as filelock does
    return sorted(p for p in home.rglob("*") if p.is_file() and p.name not in skip and ".locks" not in p.parts)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_sentence(text: str) -> None:
    assert "\n" not in text and "Traceback" not in text


# ------------------------------------------------------------------------------------------------------------
# Discovery


def test_discovery_through_a_collection_pins_repo_commit_and_sha256(fake: FakeHub) -> None:
    data = b"light x2 weights"
    fake.add_repo(f"{OWNER}/SST-all", {LIGHT2: b"decoy with the same name", "README.md": b"hi"})
    named = fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: data, "README.md": b"card"})
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2-outside", {LIGHT2: b"not in the collection"})
    slug = fake.add_collection(OWNER, "sst", "SST", [f"{OWNER}/SST-all", f"{OWNER}/SSTlight_DFLIP_X2"])
    fake.add_collection(OWNER, "other", "Other work", [])

    location = hub.resolve("sst-light", 2)

    assert location.path is not None and location.path.read_bytes() == data
    assert (location.source, location.repo_id, location.commit) == ("hub", named.repo_id, named.commit)
    assert location.origin == f"hub {OWNER}/SSTlight_DFLIP_X2@{named.commit[:7]}"
    assert f"GET /api/collections?owner={OWNER}" in "\n".join(fake.requests)
    assert any(r.startswith(f"GET /api/collections/{slug}") for r in fake.requests)
    pin = json.loads(hub.pins_path().read_text())["pins"][LIGHT2]
    assert pin["repo_id"] == named.repo_id and pin["commit"] == named.commit
    assert pin["sha256"] == hashlib.sha256(data).hexdigest() and pin["source"] == "hub"
    assert hub.pins_path().parent == Path(constants.HF_HOME) / "sst-cli"


def test_discovery_through_the_model_list_when_there_is_no_collection(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTReal_X4", {"model.safetensors": b"other model"})
    repo = fake.add_repo(f"{OWNER}/SST_DF2K_X4", {SST4: b"sst x4"})
    assert hub.resolve_pretrained("sst", 4).read_bytes() == b"sst x4"
    assert hub.read_pins()[SST4].repo_id == repo.repo_id
    assert f"GET /api/models?author={OWNER}" in "\n".join(fake.requests)
    # named like the file: the matching repository is the only one whose files were listed
    listed = [r for r in fake.requests if r.startswith(f"GET /api/models/{OWNER}/")]
    assert len(listed) == 1 and "SST_DF2K_X4" in listed[0]


def test_repository_named_unlike_the_file(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTLarge_Plus_DFLIP_X4", {"SSTLarge_Plus_DFLIP_X4.pth": b"l+"})
    fake.add_repo(f"{OWNER}/paper-checkpoints", {f"x4/{SST4}": b"in a sub-folder", "notes.txt": b"-"})
    location = hub.resolve("sst", 4)
    assert location.repo_id == f"{OWNER}/paper-checkpoints" and location.filename == f"x4/{SST4}"
    assert location.path is not None and location.path.read_bytes() == b"in a sub-folder"


def test_second_run_and_offline_run_use_the_pin_without_requests(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    first = hub.resolve_pretrained("sst-light", 2)
    fake.requests.clear()
    assert hub.resolve_pretrained("sst-light", 2) == first
    assert fake.requests == []  # pinned and cached: no API call, not even a HEAD
    _offline(monkeypatch)
    assert hub.resolve_pretrained("sst-light", 2) == first
    assert fake.requests == []
    located = hub.locate("sst-light", 2)
    assert located.cached and located.pinned and located.origin.startswith(f"hub {OWNER}/SSTlight_DFLIP_X2@")


def test_a_cached_copy_without_a_pin_is_found_offline_verified_and_pinned(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pins.json deleted (its comment says it is safe to), or the file fetched by another HF tool: offline runs
    said "not in the cache" while it was there."""
    repo = fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    first = hub.resolve_pretrained("sst-light", 2)
    hub.pins_path().unlink()
    fake.requests.clear()
    _offline(monkeypatch)
    located = hub.locate("sst-light", 2)  # sst models: cached, not pinned, no hashing
    assert located.cached and not located.pinned
    assert located.origin == f"hub {OWNER}/SSTlight_DFLIP_X2@{repo.commit[:7]}"
    assert hub.resolve_pretrained("sst-light", 2) == first and fake.requests == []
    assert hub.read_pins()[LIGHT2].commit == repo.commit  # verified against its LFS sha256, and pinned again
    hub.pins_path().unlink()
    first.resolve().write_bytes(b"damaged")  # a copy that fails its own sha256 is not taken
    with pytest.raises(CheckpointError, match="and were removed: HF_HUB_OFFLINE is set"):
        hub.resolve_pretrained("sst-light", 2)


def _damaged_without_a_pin(fake: FakeHub) -> tuple[Path, Path]:
    """sst-light x2 pulled, pins.json deleted (or the file came from `hf download`), then its blob cut short."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    path = hub.resolve_pretrained("sst-light", 2)
    hub.pins_path().unlink()
    blob = path.resolve()
    blob.write_bytes(b"weig")
    return path, blob


def test_a_damaged_copy_without_a_pin_is_listed_and_refused_offline_as_damaged(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was listed "cached", info printed its actual sha256 as the right one, and offline runs said "not in the
    cache" and left it there."""
    path, blob = _damaged_without_a_pin(fake)
    _offline(monkeypatch)
    table = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert _table_row(table.output, "sst-light", (4,))[0] == "damaged"
    info = runner.invoke(app, ["models", "info", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    text = " ".join(info.output.split())
    assert f"sha256 {hashlib.sha256(b'weights').hexdigest()}" in text  # the LFS sha256 it must have
    assert "the file no longer has this sha256 (changed or damaged): run `sst models pull sst-light --scale 2`" in text
    with pytest.raises(CheckpointError) as error:
        hub.resolve_pretrained("sst-light", 2)
    message = str(error.value)
    _one_sentence(message)
    assert f"the cached sst-light x2 weights ({path}) have sha256 {hashlib.sha256(b'weig').hexdigest()}" in message
    assert "were removed: HF_HUB_OFFLINE is set; run `sst models pull sst-light --scale 2` with network" in message
    assert not blob.exists() and not path.exists() and hub.read_pins() == {}


@pytest.mark.parametrize("pulling", [True, False])
def test_a_damaged_copy_without_a_pin_is_downloaded_again_in_one_go(fake: FakeHub, pulling: bool) -> None:
    """hf_hub_download at the commit returned the damaged copy as it was: the first pull failed, blaming the
    download ("try again later"), and only the second one worked."""
    _damaged_without_a_pin(fake)
    recorder = _Recorder()
    with hub.show_downloads(recorder):
        location = hub.pull("sst-light", 2) if pulling else hub.resolve("sst-light", 2)
    assert location.path is not None and location.path.read_bytes() == b"weights"
    assert hub.read_pins()[LIGHT2].sha256 == hashlib.sha256(b"weights").hexdigest()
    assert any("and were removed: downloading them again" in e[1] for e in recorder.events if e[0] == "note")


def test_a_damaged_cached_copy_the_cache_scan_misses_is_downloaded_again(fake: FakeHub) -> None:
    """A file in a sub-folder of its repository is not among the copies looked for without a pin: the download
    at its commit returned it damaged, and was blamed for it."""
    fake.add_repo(f"{OWNER}/paper-checkpoints", {f"x4/{SST4}": b"in a sub-folder"})
    path = hub.resolve("sst", 4).path
    assert path is not None
    hub.pins_path().unlink()
    path.resolve().write_bytes(b"in a")
    location = hub.resolve("sst", 4)
    assert location.path is not None and location.path.read_bytes() == b"in a sub-folder"


def test_pinned_file_deleted_from_the_cache_is_fetched_at_the_pinned_commit(fake: FakeHub) -> None:
    repo = fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    first = hub.resolve_pretrained("sst-light", 2)
    first.unlink()
    fake.requests.clear()
    assert hub.resolve_pretrained("sst-light", 2).read_bytes() == b"weights"
    assert fake.api_requests() == []  # straight to the file at the pinned commit
    assert any(f"/resolve/{repo.commit}/{LIGHT2}" in r for r in fake.requests)


def test_cached_file_changed_on_disk_is_rejected(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    path = hub.resolve_pretrained("sst-light", 2)
    blob = path.resolve()
    blob.write_bytes(b"tampered")
    with pytest.raises(CheckpointError, match=r"not the .* recorded when they were downloaded, and were removed"):
        hub.resolve_pretrained("sst-light", 2)
    assert not blob.exists() and LIGHT2 not in hub.read_pins()


def test_pull_downloads_a_cached_file_changed_on_disk_again(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    blob = hub.resolve_pretrained("sst-light", 2).resolve()
    blob.write_bytes(b"tampered")
    location = hub.pull("sst-light", 2)  # what `sst models pull` is for: not an error telling to run it
    assert location.path is not None and location.path.read_bytes() == b"weights"
    assert hub.read_pins()[LIGHT2].sha256 == hashlib.sha256(b"weights").hexdigest()


def _damaged_in_place(fake: FakeHub) -> None:
    """sst-light x2 pulled, then a byte of it changed with its size and mtime kept (a disk error, a flipped bit)."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    blob = hub.resolve_pretrained("sst-light", 2).resolve()
    before = blob.stat()
    blob.write_bytes(b"weightZ")
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_pull_hashes_a_file_damaged_in_place(fake: FakeHub) -> None:
    """Damage that keeps the size and mtime (a disk error, a byte flipped in place) was reported good by pull."""
    _damaged_in_place(fake)
    recorder = _Recorder()
    with hub.show_downloads(recorder):
        location = hub.pull("sst-light", 2)
    assert location.path is not None and location.path.read_bytes() == b"weights"
    assert any("were removed: downloading them again" in e[1] for e in recorder.events if e[0] == "note")


def _kept_message(message: str, kept: Path) -> None:
    """A damaged copy that could not be removed is said as such, naming the file, why, and what to do."""
    _one_sentence(message)
    assert "removed" not in message.replace("could not be removed", "").replace("once removed", "")
    assert f"could not be removed from the cache ({kept}: permission denied): remove it as a user who may " \
        f"write to {kept.parent}, then" in message  # fmt: skip
    assert "or set HF_HUB_CACHE (or HF_HOME) to a folder you can write; or pass --weights PATH" in message


@pytest.mark.parametrize("online", [True, False])
def test_a_damaged_copy_in_a_cache_this_user_cannot_change_is_not_said_removed(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch, read_only: Any, online: bool
) -> None:
    """A shared cache: the copy stayed where it was, yet the message said it "were removed" (offline), and online
    hf_hub_download returned it as it was, so the download was blamed ("try again later")."""
    path, blob = _damaged_without_a_pin(fake)
    read_only(path.parent)
    if not online:
        _offline(monkeypatch)
    fake.requests.clear()
    with pytest.raises(CheckpointError) as error:
        hub.resolve("sst-light", 2)
    _kept_message(str(error.value), path)
    assert f"({path}) have sha256 {hashlib.sha256(b'weig').hexdigest()}" in str(error.value)
    assert "run `sst models pull sst-light --scale 2`" in str(error.value)
    assert blob.read_bytes() == b"weig" and fake.requests == []  # nothing downloaded that could not be kept
    result = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code != 0 and "could not be removed from the cache" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_changed_pinned_file_whose_blob_cannot_be_removed_is_not_said_removed(fake: FakeHub, read_only: Any) -> None:
    """The snapshot's link went, its blob (in a read-only folder) stayed: it is the blob that is named."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    path = hub.resolve_pretrained("sst-light", 2)
    blob = path.resolve()
    blob.write_bytes(b"tampered")
    read_only(blob.parent)
    with pytest.raises(CheckpointError) as error:
        hub.resolve_pretrained("sst-light", 2)
    _kept_message(str(error.value), blob)
    assert "recorded when they were downloaded, and could not be removed" in str(error.value)
    assert blob.read_bytes() == b"tampered"


# ------------------------------------------------------------------------------------------------------------
# Rejections and failures


def test_wrong_sha256_is_rejected_and_nothing_stays(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"}, lfs_sha256={LIGHT2: "0" * 64})
    with pytest.raises(CheckpointError) as info:
        hub.resolve("sst-light", 2)
    message = str(info.value)
    _one_sentence(message)
    assert "0" * 64 in message and hashlib.sha256(b"weights").hexdigest() in message
    assert "removed from the cache" in message
    assert _cache_files() == [] and hub.read_pins() == {}


def test_manifest_sha256_mismatch_rejects_a_release_download(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _manifest(tmp_path, monkeypatch, {"filename": "tiny_x4.pth", "sha256": "1" * 64})
    fake.release["tiny_x4.pth"] = b"release bytes"
    with pytest.raises(CheckpointError, match="the file was discarded"):
        hub.resolve("tiny", 4)
    assert _cache_files() == [] and hub.read_pins() == {}


def test_not_found_anywhere_is_one_clear_sentence(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/Unrelated", {"other.pth": b"x"})
    fake.add_collection(OWNER, "sst", "SST", [f"{OWNER}/Unrelated"])
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve_pretrained("sst", 4)
    message = str(info.value)
    _one_sentence(message)
    assert f"sst x4 weights ({SST4}) could not be downloaded" in message
    assert f"no repository of {OWNER} on 127.0.0.1" in message and "it is not there (HTTP 404)" in message
    assert "--hub-repo OWNER/REPO" in message and "--weights PATH" in message
    assert "bundled sst-light-291 x4 works" in message and "try again later" not in message
    result = runner.invoke(app, ["models", "pull", "sst", "--scale", "4"])
    assert result.exit_code == 1 and "could not be downloaded" in result.output
    assert "Traceback" not in result.output


def test_truncated_body_is_resumed(fake: FakeHub) -> None:
    data = bytes(range(256)) * 64
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: data})
    fake.truncate(1, keep=1000)
    assert hub.resolve_pretrained("sst-light", 2).read_bytes() == data
    assert any(r.startswith("GET") and "/resolve/" in r for r in fake.requests)


def test_body_cut_off_every_time_is_one_sentence_and_leaves_nothing(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"x" * 5000})
    fake.truncate(100, match="", keep=10)  # the hub file and the release both break off
    fake.release[LIGHT2] = b"x" * 5000
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve("sst-light", 2)
    message = str(info.value)
    _one_sentence(message)
    assert "the Hub failed: the connection failed or was cut off" in message
    assert "the release download" in message
    assert _cache_files() == [] and hub.read_pins() == {}


def test_server_errors_on_the_first_requests_are_retried(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    fake.fail(1, 500, match="/api/models?")  # listing: retried by huggingface_hub's backoff
    fake.fail(1, 503, match="/resolve/", methods=("HEAD",))  # metadata: retried
    assert hub.resolve_pretrained("sst-light", 2).read_bytes() == b"weights"
    assert sum(" /api/models?" in r for r in fake.requests) == 2


def test_server_error_on_the_download_is_a_clear_error(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    fake.fail(10, 500, match="/resolve/", methods=("GET",))
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve("sst-light", 2)
    message = str(info.value)
    _one_sentence(message)
    assert "the Hub failed: the server answered HTTP 500" in message and "try again later" in message
    assert _cache_files() == [] and hub.read_pins() == {}


# ------------------------------------------------------------------------------------------------------------
# The release fallback, --hub-repo, other manifest shapes


def test_release_fallback_when_the_hub_has_no_such_file(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.release[SST4] = b"from the release"
    location = hub.resolve("sst", 4)
    assert location.source == "release" and location.url == f"{fake.url}/release/{SST4}"
    assert location.path == hub.release_dir() / SST4 and location.path.read_bytes() == b"from the release"
    assert hub.read_pins()[SST4].source == "release"
    fake.requests.clear()
    _offline(monkeypatch)
    assert hub.resolve_pretrained("sst", 4) == location.path and fake.requests == []
    assert hub.locate("sst", 4).origin == f"release {fake.url}/release/{SST4}"


def test_release_fallback_when_the_hub_cannot_be_reached(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.release[SST4] = b"from the release"
    _point_at(monkeypatch, f"http://127.0.0.1:{_closed_port()}", fake.url + "/release")
    assert hub.resolve("sst", 4).source == "release"


def test_hub_repo_overrides_everything(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"authors"})
    fake.add_repo("someone/mirror", {LIGHT2: b"mirror"})
    fake.release[LIGHT2] = b"release"
    hub.resolve("sst-light", 2)
    pins = hub.read_pins()
    fake.requests.clear()
    location = hub.resolve("sst-light", 2, repo_id="someone/mirror")
    assert location.path is not None and location.path.read_bytes() == b"mirror"
    assert location.repo_id == "someone/mirror" and fake.api_requests() == []
    assert not any("/release/" in r for r in fake.requests) and hub.read_pins() == pins  # nothing pinned
    monkeypatch.setenv("SST_HUB_REPO", "someone/mirror")
    assert hub.resolve_pretrained("sst-light", 2).read_bytes() == b"mirror"
    monkeypatch.delenv("SST_HUB_REPO")
    with pytest.raises(WeightsNotFound, match=r"cannot download .* from nobody/nothing@main: the repository does not"):
        hub.resolve("sst-light", 2, repo_id="nobody/nothing")  # no fallback for an explicit repository


def _manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict) -> None:
    folder = tmp_path / "weights"
    folder.mkdir(exist_ok=True)
    full = {"filename": None, "repo_id": None, "revision": "main", "sha256": None, "bundled": None, **entry}
    data = {"format": 1, "hub_owner": OWNER, "hub_collection": "sst", "models": {"tiny": {"4": full}}}
    (folder / "manifest.json").write_text(json.dumps(data))
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(folder))


def test_known_repository_with_unknown_file_name(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sst-real shape: a repository and no file name: its one checkpoint is taken, .safetensors first."""
    _manifest(tmp_path, monkeypatch, {"repo_id": f"{OWNER}/SSTReal_X4"})
    files = {"README.md": b"card", "net_g_ema.safetensors": b"safetensors", "old.pth": b"pth"}
    repo = fake.add_repo(f"{OWNER}/SSTReal_X4", files)
    location = hub.resolve("tiny", 4)
    assert location.filename == "net_g_ema.safetensors" and location.commit == repo.commit
    assert location.path is not None and location.path.read_bytes() == b"safetensors"
    pin = hub.read_pins()[f"repo:{OWNER}/SSTReal_X4"]
    assert pin.filename == "net_g_ema.safetensors" and pin.sha256 == hashlib.sha256(b"safetensors").hexdigest()
    assert not any("/api/collections" in r for r in fake.requests)  # no discovery: the repository is known
    fake.requests.clear()
    _offline(monkeypatch)
    assert hub.resolve_pretrained("tiny", 4) == location.path and fake.requests == []


def test_known_repository_with_several_checkpoints_asks_for_one(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _manifest(tmp_path, monkeypatch, {"repo_id": f"{OWNER}/SSTReal_X4"})
    fake.add_repo(f"{OWNER}/SSTReal_X4", {"a.pth": b"a", "b.pth": b"b"})
    with pytest.raises(WeightsNotFound, match=r"holds several checkpoints \(a.pth, b.pth\).*--weights hf://"):
        hub.resolve("tiny", 4)


def test_weights_published_off_the_hub_say_where(
    fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = "https://github.com/zhengchen1999/DAT"
    _manifest(tmp_path, monkeypatch, {"filename": "DAT_x4.pth", "hub": False, "where": page, "host": "Google Drive"})
    fake.release["DAT_x4.pth"] = b"never fetched"
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve("tiny", 4)
    message = str(info.value)
    _one_sentence(message)
    assert "not on the Hugging Face Hub" in message and page in message and "Google Drive" in message
    assert "--weights DAT_x4.pth" in message and fake.requests == []
    assert hub.locate("tiny", 4).source == "off-hub"
    fake.add_repo("someone/dat-mirror", {"DAT_x4.pth": b"mirrored"})
    assert hub.resolve_pretrained("tiny", 4, repo_id="someone/dat-mirror").read_bytes() == b"mirrored"


# ------------------------------------------------------------------------------------------------------------
# No network: quick, and one sentence


def test_no_network_is_detected_quickly(net: None, monkeypatch: pytest.MonkeyPatch) -> None:
    _point_at(monkeypatch, f"http://127.0.0.1:{_closed_port()}", f"http://127.0.0.1:{_closed_port()}/release")
    start = time.monotonic()
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve_pretrained("sst-l+", 4)
    assert time.monotonic() - start < 3
    message = str(info.value)
    _one_sentence(message)
    assert message.startswith("no network: cannot reach 127.0.0.1:")
    assert "`sst models pull sst-l+ --scale 4`" in message and "HF_HUB_OFFLINE=1" in message
    with pytest.raises(WeightsNotFound) as info:
        hub.pull("sst-l+", 4)
    message = str(info.value)
    _one_sentence(message)
    assert message.endswith("connect to the internet and run this command again") and "sst models pull" not in message


def test_a_hanging_name_lookup_is_cut_short(net: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("hub.invalid", "release.invalid"):
            time.sleep(5)
            raise socket.gaierror("no answer")
        return _local_only_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hang)
    monkeypatch.setenv("SST_NET_TIMEOUT", "0.3")
    _point_at(monkeypatch, "https://hub.invalid", "https://release.invalid/v0.0.1")
    start = time.monotonic()
    with pytest.raises(WeightsNotFound, match=r"no network: cannot reach hub\.invalid or release\.invalid"):
        hub.resolve("sst", 2)
    assert time.monotonic() - start < 2


def test_hf_reference_over_http_then_offline(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add_repo("someone/weights", {"model.safetensors": b"tensors"})
    ref = hub.parse_hf_reference("hf://someone/weights/model.safetensors")
    path = hub.download(ref)
    assert path.read_bytes() == b"tensors"
    _offline(monkeypatch)
    assert hub.download(ref) == path
    with pytest.raises(WeightsNotFound, match="not in the Hugging Face cache \\(HF_HUB_OFFLINE is set\\)"):
        hub.download(hub.HubFile("someone/weights", "other.pth"))


def _no_symlinks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache like Windows without Developer Mode makes: plain files in the snapshots, no blob names to read."""
    import huggingface_hub.file_download

    monkeypatch.setattr(huggingface_hub.file_download, "are_symlinks_supported", lambda *args, **kwargs: False)


def test_without_symlinks_a_download_is_still_checked_against_the_hubs_sha256(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache without symlinks hides the LFS sha256 in no blob name: hf:// and --hub-repo files were used unchecked."""
    _no_symlinks(monkeypatch)
    fake.add_repo("someone/bad", {"w.safetensors": b"tampered"}, lfs_sha256={"w.safetensors": "0" * 64})
    with pytest.raises(CheckpointError) as info:
        hub.download(hub.parse_hf_reference("hf://someone/bad/w.safetensors"))
    _one_sentence(str(info.value))
    assert "0" * 64 in str(info.value) and "removed from the cache" in str(info.value)
    assert hub.cached_path(hub.HubFile("someone/bad", "w.safetensors")) is None
    fake.add_repo("someone/mirror", {LIGHT2: b"mirror weights"}, lfs_sha256={LIGHT2: "1" * 64})
    with pytest.raises(CheckpointError, match="1" * 64):
        hub.resolve_pretrained("sst-light", 2, repo_id="someone/mirror")


def test_without_symlinks_a_cached_file_is_checked_online_and_refused_offline_until_checked(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_symlinks(monkeypatch)
    fake.add_repo("someone/weights", {"model.safetensors": b"tensors"})
    ref = hub.parse_hf_reference("hf://someone/weights/model.safetensors")
    path = hub.download(ref)
    assert not path.is_symlink() and path.read_bytes() == b"tensors"
    _offline(monkeypatch)
    with pytest.raises(CheckpointError) as info:  # downloaded this instant: not yet remembered as checked
        hub.download(ref)
    _one_sentence(str(info.value))
    assert "plain file (no symlinks)" in str(info.value) and "HF_HUB_OFFLINE is set" in str(info.value)
    assert path.exists()
    old = time.time() - 60
    os.utime(path, (old, old))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    path.write_bytes(b"tensorZ")  # damaged in place: the Hub's sha256 says so
    os.utime(path, (old, old))
    assert hub.download(ref, rehash=True).read_bytes() == b"tensors"
    path = hub.cached_path(ref) or path
    os.utime(path, (old, old))
    assert hub.download(ref, rehash=True) == path  # checked against the Hub again, and remembered
    _offline(monkeypatch)
    assert hub.download(ref) == path  # checked before and unchanged since: fine offline
    path.write_bytes(b"tensorY")
    with pytest.raises(CheckpointError, match="cannot be checked against its sha256"):
        hub.download(ref)


def test_a_damaged_cached_file_is_downloaded_again_online(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """hf:// and --hub-repo used a damaged cached file silently (the library finds the blob by its name)."""
    fake.add_repo("someone/mirror", {"w.safetensors": b"tensors", LIGHT2: b"mirror weights"})
    ref = hub.parse_hf_reference("hf://someone/mirror/w.safetensors")
    path = hub.download(ref)
    path.resolve().write_bytes(b"tensorZ")  # same size, other bytes
    recorder = _Recorder()
    with hub.show_downloads(recorder):
        assert hub.download(ref).read_bytes() == b"tensors"
    notes = [e[1] for e in recorder.events if e[0] == "note"]
    assert any("w.safetensors from someone/mirror" in n and "downloading it again" in n for n in notes), notes
    zoo = hub.resolve_pretrained("sst-light", 2, repo_id="someone/mirror")
    zoo.resolve().write_bytes(b"damaged")
    assert hub.resolve_pretrained("sst-light", 2, repo_id="someone/mirror").read_bytes() == b"mirror weights"
    _point_at(monkeypatch, f"http://127.0.0.1:{_closed_port()}", "off")  # the Hub out of reach: not used either
    zoo.resolve().write_bytes(b"damaged")
    with pytest.raises(WeightsNotFound, match="no network"):
        hub.resolve_pretrained("sst-light", 2, repo_id="someone/mirror")
    assert not zoo.exists()


# ------------------------------------------------------------------------------------------------------------
# Progress display and the CLI


class _Recorder(hub.Display):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def note(self, text: str) -> None:
        self.events.append(("note", text))

    def start(self, label: str, total: int | None) -> None:
        self.events.append(("start", label, total))

    def advance(self, count: int) -> None:
        self.events.append(("advance", count))

    def stop(self) -> None:
        self.events.append(("stop",))


def test_downloads_report_to_the_display(fake: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"w" * 3000
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: data})
    fake.release[SST4] = b"r" * 1000
    fake.truncate(1, keep=1000)  # a resumed transfer still adds up to the file size
    recorder = _Recorder()
    with hub.show_downloads(recorder):
        hub.resolve("sst-light", 2)
        hub.resolve("sst", 4)
    starts = [e for e in recorder.events if e[0] == "start"]
    assert starts == [("start", LIGHT2, 3000), ("start", SST4, 1000)]
    assert sum(e[1] for e in recorder.events if e[0] == "advance") == 4000
    assert [e[0] for e in recorder.events].count("stop") == 2
    notes = [e[1] for e in recorder.events if e[0] == "note" and e[1].startswith("sst")]  # not the library's log
    host = fake.url.split("://", 1)[1]
    assert notes[0] == f"sst-light x2: looking for {LIGHT2} in the repositories of {OWNER} on {host}"
    assert notes[1].startswith(f"sst-light x2: {LIGHT2} from the Hugging Face repository {OWNER}/SSTlight_DFLIP_X2")
    assert notes[2] == f"sst x4: looking for {SST4} in the repositories of {OWNER} on {host}"
    assert notes[3] == f"sst x4: downloading {SST4} from the authors' release {fake.url}/release/{SST4}"

    from rich.console import Console

    from sst_cli.cli import downloads

    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    monkeypatch.setattr(downloads, "err_console", terminal)
    fake.add_repo(f"{OWNER}/SST_DF2K_X2", {"SST_DF2K_X2.pth": b"x" * 5000})
    with hub.show_downloads(downloads.download_display()):
        hub.resolve("sst", 2)
    assert "SST_DF2K_X2.pth" in terminal.file.getvalue()  # the bar was drawn (and removed when done)
    silent = (downloads.download_display(quiet=True), downloads.download_display(json_log=True))
    assert all(type(display) is hub.Display for display in silent)  # --quiet, --json-log: nothing shown


def test_library_log_lines_go_to_the_display_not_the_terminal(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """--quiet and --json-log printed dozens of huggingface_hub log lines on a failing download ("Error while
    downloading ...", "Retrying in 8s [Retry 5/5]"): its StreamHandler wrote them to stderr."""
    from huggingface_hub.utils import logging as hub_logging

    terminal = io.StringIO()
    logger = hub_logging.get_logger()
    for handler in logger.handlers:
        monkeypatch.setattr(handler, "stream", terminal)
    before = logger.handlers[:]
    monkeypatch.setattr(logger, "level", logging.WARNING)  # the library's default (the CLI's is error)
    logger.manager._clear_cache()
    logged: list[str] = []  # what the library said, whatever its version's wording (0.x words retries otherwise)
    seen = logging.Handler()
    seen.emit = lambda record: logged.append(" ".join(record.getMessage().split()))  # type: ignore[method-assign]
    logger.addHandler(seen)
    try:
        fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"x" * 5000})
        fake.fail(1, 500, match="/api/collections")  # retried by huggingface_hub's backoff, which logs it
        fake.truncate(100, keep=10)  # every transfer of the file breaks off: logged on each try
        recorder = _Recorder()
        with hub.show_downloads(recorder), pytest.raises(WeightsNotFound) as info:
            hub.pull("sst-light", 2)
        _one_sentence(str(info.value))
        assert terminal.getvalue() == ""
        notes = [e[1] for e in recorder.events if e[0] == "note"]
        assert set(logged) <= set(notes)  # each line the library logged reached the display instead
        if int(huggingface_hub.__version__.split(".")[0]) >= 2:
            assert any("Retrying in" in n for n in notes)  # the wording of the versions that log retries so
        said = [n for n in notes if n in logged]
        assert len(said) == len(set(said))  # a library line repeated on every try is said once
        assert logger.handlers == [*before, seen]  # kept: without a display, the library speaks as in any HF tool
        logged.clear()
        fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X3", {"SSTlight_DFLIP_X3.pth": b"y"})
        fake.fail(1, 500, match="/api/collections")
        hub.resolve("sst-light", 3)
        assert all(line in " ".join(terminal.getvalue().split()) for line in logged)
    finally:
        logger.removeHandler(seen)


def test_cli_quiet_pull_prints_only_its_error(fake: FakeHub, tmp_path: Path) -> None:
    """`sst models pull -q` against a Hub that cuts every transfer printed 37 lines: huggingface_hub, imported after
    the CLI had set its logger to error, set it back to warning."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"x" * 5000})
    fake.truncate(1000, keep=10)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SST_"))}
    env.update(
        HF_ENDPOINT=fake.url, HF_HOME=str(tmp_path / "home"), HF_HUB_DISABLE_TELEMETRY="1",
        SST_RELEASE_URL=fake.url + "/release", PYTHONPATH=str(ROOT), COLUMNS="200",
    )  # fmt: skip
    fast = "import sys, time; time.sleep = lambda s: None; from sst_cli.cli import main; sys.argv[0] = 'sst'; main()"
    command = [sys.executable, "-c", fast, "models", "pull", "sst-light", "--scale", "2", "-q"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout == "" and done.stderr.startswith("error: sst-light x2 weights") and done.stderr.count("\n") == 1


def _checkpoint(name: str, scale: int) -> bytes:
    """A real (random-weight) checkpoint of a zoo model, as the authors' files hold it."""
    import torch

    from sst_cli.zoo import create_model

    buffer = io.BytesIO()
    torch.save({"params_ema": create_model(name, scale).state_dict()}, buffer)
    return buffer.getvalue()


def test_models_pull_info_and_table(fake: FakeHub) -> None:
    weights = _checkpoint("sst-light", 2)
    repo = fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: weights})
    result = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert f"from the Hugging Face repository {OWNER}/SSTlight_DFLIP_X2" in result.output
    assert f"downloading {LIGHT2} (" in result.output
    assert f"from    hub {OWNER}/SSTlight_DFLIP_X2@{repo.commit[:7]}" in result.output
    assert f"sha256  {hashlib.sha256(weights).hexdigest()}" in result.output
    quiet = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2", "--quiet"])
    assert quiet.exit_code == 0 and quiet.output.strip() == str(hub.resolve_pretrained("sst-light", 2))
    info = runner.invoke(app, ["models", "info", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert info.exit_code == 0 and f"path    {hub.resolve_pretrained('sst-light', 2)}" in info.output
    assert hashlib.sha256(weights).hexdigest() in info.output
    table = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    weights, origin = _table_row(table.output, "sst-light", (4, 5))
    assert weights == "cached" and f"hub{OWNER}/SSTlight_DFLIP_X2@{repo.commit[:7]}" in origin.replace(" ", "")


def test_models_info_of_an_hf_file_shows_its_download_path_and_sha256(fake: FakeHub) -> None:
    """It downloaded the file with no word, and did not say where the file went or its sha256."""
    weights = _checkpoint("sst-light", 2)
    fake.add_repo("someone/light", {"light_x2.pth": weights})
    ref = "hf://someone/light/light_x2.pth"
    result = runner.invoke(app, ["models", "info", ref, "--model", "sst-light"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "downloading light_x2.pth (" in result.output
    path = hub.download(hub.parse_hf_reference(ref))
    assert f"file               {path}" in result.output
    assert f"sha256             {hashlib.sha256(weights).hexdigest()}" in result.output


def test_a_damaged_download_is_not_listed_as_cached(fake: FakeHub) -> None:
    """``sst models`` said "cached" (and info the recorded sha256) for a truncated file until the next upscale."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: _checkpoint("sst-light", 2)})
    path = hub.resolve_pretrained("sst-light", 2)
    with open(path.resolve(), "r+b") as blob:
        blob.truncate(1000)
    table = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert _table_row(table.output, "sst-light", (4,))[0] == "changed"
    info = runner.invoke(app, ["models", "info", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    text = " ".join(info.output.split())
    assert "the file no longer has this sha256 (changed or damaged): run `sst models pull sst-light --scale 2`" in text


def test_models_info_hashes_a_file_damaged_in_place(fake: FakeHub) -> None:
    """info printed the recorded sha256 as the file's (to paste into a manifest) when size and mtime were kept."""
    _damaged_in_place(fake)
    info = runner.invoke(app, ["models", "info", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert info.exit_code == 0, info.output
    text = " ".join(info.output.split())
    assert "the file no longer has this sha256 (changed or damaged): run `sst models pull sst-light --scale 2`" in text


def test_a_hub_file_that_is_not_the_model_is_advised_in_the_api_callers_words(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_model("sst-light", 2)`` and ``ModelSpec`` were told to pass --weights or --hub-repo OWNER/REPO."""
    import torch

    from sst_cli import ModelSpec, load_model

    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: _checkpoint("sst-light", 4)})
    with pytest.raises(CheckpointError) as info:
        load_model("sst-light", 2)
    assert str(info.value).endswith(
        ": pass the right file as source, or hub_repo='OWNER/REPO' for a repository that holds them)"
    )
    mirror = fake.add_repo("someone/mirror", {LIGHT2: _checkpoint("sst-light", 4)})
    with pytest.raises(CheckpointError) as info:
        ModelSpec("sst-light", 2, hub_repo=mirror.repo_id).load("sst-light", 2, device="cpu", dtype=torch.float32)
    assert str(info.value).endswith(f": pass the right file as weights, or another hub_repo than {mirror.repo_id})")
    monkeypatch.setenv("SST_HUB_REPO", mirror.repo_id)  # the repository named by the variable: not "no longer pinned"
    with pytest.raises(CheckpointError) as info:
        load_model("sst-light", 2)
    assert str(info.value).endswith(f"was removed from the cache: pass the right file as source, or another "
                                    f"SST_HUB_REPO than {mirror.repo_id})")  # fmt: skip


def test_a_pinned_file_damaged_in_the_cache_is_said_damaged_and_fetched_again(fake: FakeHub) -> None:
    """One byte changed in place (size and time kept, so not rehashed) was called a file that could run code, and
    the advice blamed the repository: pass another --hub-repo."""
    from sst_cli import load_model

    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: _checkpoint("sst-light", 2)})
    path = hub.resolve_pretrained("sst-light", 2).resolve()
    stat = path.stat()
    part = damage_pickle(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(CheckpointError) as info:
        load_model("sst-light", 2)
    text = str(info.value)
    assert f"{part} fails its checksum" in text and "could run code" not in text
    assert text.endswith("was removed from the cache: the next run downloads it again, or `sst models pull "
                         "sst-light --scale 2` does now)")  # fmt: skip
    assert load_model("sst-light", 2) is not None  # downloaded again


def test_a_hub_file_that_is_not_the_model_is_named_unpinned_and_pull_refuses_it(fake: FakeHub) -> None:
    """A captive portal's page, or another scale's file, under the expected name: said, never pinned as good."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: _checkpoint("sst-light", 4)})
    result = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "the sst-light x2 weights file (" in text and f"{LIGHT2}) holds x4 weights but x2 was requested" in text
    assert "does not hold them and was removed from the cache and is no longer pinned" in text
    assert LIGHT2 not in hub.read_pins()
    assert "--scale 4" not in text  # the user asked for sst-light x2: another scale is not the answer
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X3", {"SSTlight_DFLIP_X3.pth": b"<html>sign in</html>"})
    page = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "3"], env={"COLUMNS": "300"})
    assert page.exit_code == 1 and "not a PyTorch checkpoint: the file is an HTML or XML page" in page.output


def test_a_file_proven_not_to_be_the_model_is_removed_and_not_listed(fake: FakeHub) -> None:
    """Another scale's weights from the Hub, a web page from the release: refused, but left in the cache and
    listed as "cached" by `sst models` (the cached copy was even adopted and pinned again by the next run)."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: _checkpoint("sst-light", 4)})
    fake.release[SST4] = b"<html>sign in</html>"
    for name, scale in (("sst-light", 2), ("sst", 4)):
        result = runner.invoke(app, ["models", "pull", name, "--scale", str(scale)], env={"COLUMNS": "300"})
        assert result.exit_code == 1, result.output
        assert not hub.locate(name, scale).cached and hub.read_pins() == {}
    assert _cache_files() == []  # the Hub blob, its snapshot entry and the release file are gone
    table = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert _table_row(table.output, "sst-light", (4,))[0] == "not cached"
    mirror = fake.add_repo("someone/mirror", {LIGHT2: _checkpoint("sst-light", 4)})
    hub.resolve("sst-light", 2)  # the authors' pin, which a wrong --hub-repo file must not cost
    result = runner.invoke(
        app, ["models", "pull", "sst-light", "--scale", "2", "--hub-repo", mirror.repo_id], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 1
    said = " ".join(result.output.split())  # it said "no longer pinned" and to pass the --hub-repo given
    assert "does not hold them and was removed from the cache: pass --weights with the right file, or another " \
        f"--hub-repo than {mirror.repo_id})" in said and "pinned" not in said  # fmt: skip
    assert hub.cached_path(hub.HubFile(mirror.repo_id, LIGHT2)) is None and LIGHT2 in hub.read_pins()


def test_a_file_proven_not_to_be_the_model_that_cannot_be_removed_is_not_said_removed(
    fake: FakeHub, read_only: Any
) -> None:
    """A shared cache this user may not change: the wrong file stayed, yet it was said "removed from the cache"."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: _checkpoint("sst-light", 4)})
    path = hub.resolve_pretrained("sst-light", 2)
    read_only(path.parent)
    result = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    said = " ".join(result.output.split())
    assert f"does not hold them and could not be removed from the cache ({path}: permission denied; remove it " \
        "as a user who may write there) and is no longer pinned" in said  # fmt: skip
    assert "was removed" not in said and path.is_symlink() and LIGHT2 not in hub.read_pins()


def test_a_pin_that_cannot_be_written(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pull`` is for offline use. A Hub file is found offline without its pin (its LFS sha256 verifies it);
    a release file is not, so pull fails then (it exited 0, silently with --quiet)."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: _checkpoint("sst-light", 2)})
    fake.release[SST4] = _checkpoint("sst", 4)
    hub.pins_path().mkdir(parents=True)  # a folder where the pins file goes: it cannot be written
    pulled = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert pulled.exit_code == 0, pulled.output
    assert "where it came from could not be recorded" in " ".join(pulled.output.split())
    for quiet in ([], ["--quiet"]):
        result = runner.invoke(app, ["models", "pull", "sst", "--scale", "4", *quiet], env={"COLUMNS": "300"})
        assert result.exit_code == 1, result.output
        text = " ".join(result.output.split())
        assert "is downloaded, but where it came from could not be recorded in" in text
        assert "an offline run will not find it" in text
    _offline(monkeypatch)
    assert hub.resolve_pretrained("sst-light", 2).is_file()


def test_a_hub_that_takes_the_connection_and_never_answers_is_given_up(
    net: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick probe only opens a connection: the API listing then waited forever, printing nothing."""
    import huggingface_hub.utils._http

    monkeypatch.setattr(huggingface_hub.utils._http, "time", _NoSleep())  # for the abandoned request's retries
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections are taken (the kernel's backlog) and never answered
        _point_at(monkeypatch, f"http://127.0.0.1:{silent.getsockname()[1]}", "off")
        monkeypatch.setenv("SST_HUB_TIMEOUT", "1")
        start = time.monotonic()
        with pytest.raises(WeightsNotFound) as info:
            hub.resolve("sst-light", 2)
        assert time.monotonic() - start < 15  # one wait of SST_HUB_TIMEOUT, not retried
    # The abandoned request fails once the listener is gone. Left running, its retries closed huggingface_hub's
    # shared client under later tests' requests (a connection error makes the library close it).
    for thread in threading.enumerate():
        if thread.name == "sst-hub-request":
            thread.join(10)
            assert not thread.is_alive()
    message = str(info.value)
    _one_sentence(message)
    assert "the Hub failed: no answer from 127.0.0.1:" in message and "within 1 s (SST_HUB_TIMEOUT)" in message


class _Clock:
    """A ``time`` module whose sleeps advance a clock instead of waiting: the waits a user would sit through."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_a_server_error_huggingface_hub_backed_off_from_is_not_asked_again(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A persistent HTTP 500 on the file's metadata went through huggingface_hub's backoff three times: 73 s."""
    import huggingface_hub.file_download
    import huggingface_hub.utils._http

    clock = _Clock()
    for module in (huggingface_hub.file_download, huggingface_hub.utils._http, library):
        monkeypatch.setattr(module, "time", clock)
    monkeypatch.setattr(library, "RETRY_WAITS", (1.0, 3.0))
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    fake.fail(1000, 500, match="/resolve/", methods=("HEAD",))
    with pytest.raises(WeightsNotFound, match="the server answered HTTP 500"):
        hub.resolve("sst-light", 2)
    heads = sum(r.startswith("HEAD ") for r in fake.requests)
    assert 1 < heads < 10 and sum(clock.waits) < 30, (heads, clock.waits)  # one round of the backoff: 6 HEADs, 23 s


def test_an_http_error_on_the_file_is_named_not_called_unreachable(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    fake.fail(1000, 500, match="/resolve/")  # HEAD and GET of the file
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve("sst-light", 2)
    assert "the server answered HTTP 500" in str(info.value) and "could not be reached" not in str(info.value)


def test_repositories_that_refuse_access_are_said(fake: FakeHub) -> None:
    """A bad HF_TOKEN made every repository answer 401; the message said none held the file."""
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    fake.add_repo(f"{OWNER}/Other", {"x.pth": b"other"})
    fake.fail(1000, 401, match="/api/models/")
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve("sst-light", 2)
    message = str(info.value)
    _one_sentence(message)
    assert f"access was refused (HTTP 401) to 2 of the 2 repositories of {OWNER} searched" in message
    assert "HF_TOKEN" in message and "try again later" not in message


@pytest.mark.parametrize("status", [401, 403])
def test_access_refused_to_a_file_names_the_repository_and_the_hub_asked(fake: FakeHub, status: int) -> None:
    """It said "try again later" and "accept the terms on huggingface.co" (HF_ENDPOINT was another Hub), and
    never which repository refused."""
    repo = fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    fake.fail(1000, status, match="/resolve/")
    with pytest.raises(WeightsNotFound) as info:
        hub.resolve("sst-light", 2)
    message = str(info.value)
    _one_sentence(message)
    host = fake.url.split("://", 1)[1]
    assert f"the Hub failed: access to {repo.repo_id} is gated or unauthorised (HTTP {status})" in message
    assert f"set HF_TOKEN to a token that can read {repo.repo_id} (and accept its terms on {host} if" in message
    assert "try again later" not in message and "huggingface.co" not in message


def test_a_server_error_on_an_hf_file_is_not_blamed_on_the_reference(fake: FakeHub) -> None:
    fake.add_repo("someone/weights", {"model.safetensors": b"tensors"})
    fake.fail(1000, 500, match="/resolve/")
    with pytest.raises(WeightsNotFound) as info:
        hub.download(hub.parse_hf_reference("hf://someone/weights/model.safetensors"))
    message = str(info.value)
    assert message.startswith("cannot download model.safetensors from someone/weights: the server answered HTTP 500")
    assert message.endswith("; try again later, or pass --weights PATH") and "check the repository" not in message


def test_a_cache_that_cannot_be_written_is_said_not_blamed_on_the_hub(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:

    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(library, "hub_download", full)
    with pytest.raises(WriteError) as info:
        hub.resolve("sst-light", 2)
    message = str(info.value)
    assert f"cannot write the download to {library.cache_dir()}: no space left on device" in message
    assert "HF_HUB_CACHE" in message and "the Hub failed" not in message and "try again later" not in message


def test_a_cache_without_room_for_the_file_is_said_before_the_transfer(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library only warned that the file would not fit, then downloaded until the disk was full."""
    import shutil

    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights" * 1000})
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=100))
    with pytest.raises(WriteError) as info:
        hub.resolve("sst-light", 2)
    assert f"cannot write the download to {library.cache_dir()}: no space left on device" in str(info.value)
    assert not [request for request in fake.requests if request.startswith("GET") and "/resolve/" in request]
    blobs = Path(library.cache_dir()) / f"models--{OWNER}--SSTlight_DFLIP_X2" / "blobs"
    assert not blobs.is_dir() or not list(blobs.glob("*"))


def test_partial_downloads_a_killed_process_left_are_removed(fake: FakeHub) -> None:
    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    blobs = Path(library.cache_dir()) / f"models--{OWNER}--SSTlight_DFLIP_X2" / "blobs"
    blobs.mkdir(parents=True)
    old, recent = blobs / "aaaa.1234.incomplete", blobs / "bbbb.5678.incomplete"
    old.write_bytes(b"x" * 10)
    recent.write_bytes(b"y" * 10)  # perhaps another process's transfer in progress: kept
    os.utime(old, (time.time() - 2 * library.STALE_PARTIAL_S,) * 2)
    assert hub.resolve_pretrained("sst-light", 2).read_bytes() == b"weights"
    assert not old.exists() and recent.exists()


def test_partial_release_downloads_a_killed_process_left_are_removed(fake: FakeHub) -> None:
    """A killed release download left ``.NAME.<hex>.incomplete`` in the release folder for good."""
    fake.release[SST4] = b"from the release"
    folder = hub.release_dir()
    folder.mkdir(parents=True)
    old, recent = folder / f".{SST4}.0123abcd.incomplete", folder / f".{SST4}.4567cdef.incomplete"
    old.write_bytes(b"x" * 10)
    recent.write_bytes(b"y" * 10)  # perhaps another process's transfer in progress: kept
    os.utime(old, (time.time() - 2 * library.STALE_PARTIAL_S,) * 2)
    assert hub.resolve_pretrained("sst", 4).read_bytes() == b"from the release"
    assert not old.exists() and recent.exists()


def test_a_failed_download_leaves_another_process_transfer_alone(fake: FakeHub) -> None:
    """The partial file of a download that holds huggingface_hub's lock is not removed by one that failed."""
    from filelock import FileLock

    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    fake.fail(1000, 500, match="/resolve/", methods=("GET",))
    folder = Path(library.cache_dir()) / f"models--{OWNER}--SSTlight_DFLIP_X2"
    (folder / "blobs").mkdir(parents=True)
    (folder.parent / ".locks" / folder.name).mkdir(parents=True)
    busy, idle = folder / "blobs" / "cccc.1234.incomplete", folder / "blobs" / "dddd.5678.incomplete"
    for partial in (busy, idle):
        partial.write_bytes(b"partial")
        os.utime(partial, (time.time() + 60,) * 2)  # as if written during the failed run
    running = FileLock(folder.parent / ".locks" / folder.name / "cccc.lock")  # what a transfer in progress holds
    with running, pytest.raises(WeightsNotFound, match="HTTP 500"):
        hub.resolve("sst-light", 2)
    assert busy.exists() and not idle.exists()


def test_another_download_from_the_repository_is_said(fake: FakeHub) -> None:
    """huggingface_hub waits for the lock of a file another process is downloading without a word."""
    import shutil

    from filelock import FileLock

    fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: b"weights"})
    locks = Path(library.cache_dir()) / ".locks" / f"models--{OWNER}--SSTlight_DFLIP_X2"
    locks.mkdir(parents=True)
    (locks / "idle.lock").touch()  # a lock file left behind, held by nobody: no note
    recorder = _Recorder()
    with hub.show_downloads(recorder):
        hub.resolve("sst-light", 2)
        assert not any("another download" in e[1] for e in recorder.events if e[0] == "note")
        hub.pins_path().unlink()
        shutil.rmtree(Path(library.cache_dir()) / f"models--{OWNER}--SSTlight_DFLIP_X2")
        with FileLock(locks / "other-file.lock"):  # another process's transfer in progress
            hub.resolve("sst-light", 2)
    notes = [e[1] for e in recorder.events if e[0] == "note" and "another download" in e[1]]
    assert notes == [
        f"another download from {OWNER}/SSTlight_DFLIP_X2 into {library.cache_dir()} is in progress: one of the "
        "same file waits for it"
    ]


def _table_row(output: str, name: str, columns: tuple[int, ...]) -> tuple[str, ...]:
    """The text of ``columns`` in the first row of ``name`` in a rich table, its cells joined across the lines
    they wrapped onto: COLUMNS is not always what the console measures (rich reads it when the console is made,
    so a COLUMNS exported by the shell wins), and the layout must not decide the test."""
    lines = [line.split("│")[1:-1] for line in output.splitlines() if line.startswith("│")]
    start = next(i for i, cells in enumerate(lines) if cells[0].strip() == name)
    row = [lines[start]]
    for cells in lines[start + 1 :]:
        if cells[0].strip() or cells[2].strip():  # the next model, or the next scale
            break
        row.append(cells)
    return tuple(" ".join(cells[c].strip() for cells in row if cells[c].strip()) for c in columns)


@pytest.fixture(scope="module")
def light_x2_checkpoint() -> bytes:
    """A random-weight SST-light x2 checkpoint in the authors' format (served under the official name)."""
    import torch

    from sst_cli.zoo import create_model

    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.save({"params_ema": create_model("sst-light", 2).state_dict()}, buffer)
    return buffer.getvalue()


def test_cli_end_to_end(
    fake: FakeHub, light_x2_checkpoint: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sst upscale --model sst-light --scale 2` in a fresh process configured by environment variables only
    (HF_ENDPOINT, HF_HOME): discovery, download, pin, load, upscale; in JSON log mode, where the download is
    silent and stdout stays pure JSON. Then, offline with the server gone, the pinned file is still found."""
    repo = fake.add_repo(f"{OWNER}/SSTlight_DFLIP_X2", {LIGHT2: light_x2_checkpoint})
    fake.add_collection(OWNER, "sst", "SST", [f"{OWNER}/SSTlight_DFLIP_X2"])
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SST_"))}
    env.update(
        HF_ENDPOINT=fake.url, HF_HOME=constants.HF_HOME, HF_HUB_DISABLE_TELEMETRY="1",
        SST_RELEASE_URL=fake.url + "/release", PYTHONPATH=str(ROOT), COLUMNS="200",
    )  # fmt: skip
    command = [sys.executable, "-m", "sst_cli", "upscale", str(tmp_path / "a.png"), "--model", "sst-light"]
    command += ["--scale", "2", "-o", str(tmp_path / "out.png"), "--device", "cpu", "--json-log"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # stdout stays pure JSON
    assert events[-1]["event"] == "summary" and events[-1]["done"] == 1
    assert "downloading" not in done.stderr and LIGHT2 not in done.stderr  # silent in JSON log mode
    assert Image.open(tmp_path / "out.png").size == (20, 24)
    assert f"GET /api/collections?owner={OWNER}" in "\n".join(fake.requests)
    pin = hub.read_pins()[LIGHT2]
    assert (pin.repo_id, pin.commit) == (repo.repo_id, repo.commit)

    fake.close()
    _offline(monkeypatch)
    again = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2", "--quiet"])
    assert again.exit_code == 0, again.output
    assert Path(again.output.strip()).read_bytes() == light_x2_checkpoint
