"""Tests for sst_cli.hub against a fake Hugging Face cache; the network is blocked throughout (the real client
over HTTP is tested against a fake Hub in test_hub_http.py).

huggingface_hub reads HF_HUB_OFFLINE / HF_HUB_CACHE into ``huggingface_hub.constants`` at import
time, so in-process tests patch those constants (and the env, for consistency); one subprocess test
checks that the plain environment variables are honoured end to end.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import huggingface_hub
import pytest
from conftest import add_to_cache
from huggingface_hub import constants
from huggingface_hub.utils import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from sst_cli import hub
from sst_cli.errors import CheckpointError, ConfigError, WeightsNotFound

REPO = "tester/sst-fake"
COMMIT_A = "a1" * 20
COMMIT_B = "b2" * 20
FILE = "SST_DF2K_X4.pth"
DATA_A = b"weights at commit A"
DATA_B = b"weights at commit B, different"
ROOT = Path(__file__).resolve().parent.parent
OURS = ("sst-light-291",)  # weights trained by sst-cli: bundled only, never from the Hub
OFF_HUB = {  # DAT: the authors publish on Google Drive
    "dat-light": "DAT_light_x{s}.pth",
    "dat-s": "DAT_S_x{s}.pth",
    "dat-2": "DAT_2_x{s}.pth",
    "dat": "DAT_x{s}.pth",
}
LISTED = ("sst-real",)  # on the Hub under a file name found by listing the repository
ZOO = {
    "sst-light": "SSTlight_DFLIP_X{s}.pth",
    "sst-light+": "SSTlight_Plus_DFLIP_X{s}.pth",
    "sst": "SST_DF2K_X{s}.pth",
    "sst+": "SST_Plus_DF2K_X{s}.pth",
    "sst-l": "SSTLarge_DFLIP_X{s}.pth",
    "sst-l+": "SSTLarge_Plus_DFLIP_X{s}.pth",
    "sst-xl+": "SSTXL_Plus_DFLIP_X{s}.pth",
}


def _no_network(*args: object, **kwargs: object) -> None:
    raise AssertionError("test tried to use the network")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Block sockets and clear overrides that would leak in from the developer's shell."""
    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(socket, "getaddrinfo", _no_network)
    for var in ("SST_HUB_REPO", "SST_WEIGHTS_DIR"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline fake HF cache holding REPO/FILE at COMMIT_A (main) and COMMIT_B (no ref)."""
    root = tmp_path / "hf-cache"
    add_to_cache(root, REPO, COMMIT_A, {FILE: DATA_A}, ref="main")
    add_to_cache(root, REPO, COMMIT_B, {FILE: DATA_B})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    return root


def test_download_cached_file(cache: Path) -> None:
    path = hub.download(hub.HubFile(REPO, FILE, revision="main"))
    assert path.read_bytes() == DATA_A
    assert cache in path.parents
    assert hub.download(hub.HubFile(REPO, FILE)).read_bytes() == DATA_A  # revision None means main


def test_download_pinned_commit(cache: Path) -> None:
    assert hub.download(hub.HubFile(REPO, FILE, revision=COMMIT_B)).read_bytes() == DATA_B


@pytest.mark.parametrize("revision", ["v9", "c3" * 20])
def test_download_uncached_revision_offline(cache: Path, revision: str) -> None:
    with pytest.raises(WeightsNotFound) as info:
        hub.download(hub.HubFile(REPO, FILE, revision=revision), pull_hint="sst models pull sst --scale 4")
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert "is not in the Hugging Face cache (HF_HUB_OFFLINE is set)" in msg
    assert "`sst models pull sst --scale 4`" in msg and "--weights PATH" in msg


def test_resolve_pretrained_offline_not_cached_names_pull_command(cache: Path) -> None:
    with pytest.raises(WeightsNotFound, match=r"sst models pull sst-l\+ --scale 2 --hub-repo tester/sst-fake"):
        hub.resolve_pretrained("sst-l+", 2, repo_id=REPO)
    with pytest.raises(WeightsNotFound, match=r"HF_HUB_OFFLINE is set: run `sst models pull sst-l\+ --scale 2`"):
        hub.resolve_pretrained("sst-l+", 2)


@pytest.mark.usefixtures("cache")
def test_the_hubs_advice_names_the_options_as_the_caller_spells_them() -> None:
    """load_model and ModelSpec callers were told to "pass --weights PATH", an option they do not have."""
    from sst_cli import ModelSpec, load_model

    with pytest.raises(WeightsNotFound) as api:
        load_model("sst-l+", 2)
    assert "with network access, or pass source='PATH' (" in str(api.value)
    with pytest.raises(WeightsNotFound) as spec:
        ModelSpec("sst-l+", 2).fetched("sst-light-291", 4)
    assert "with network access, or pass weights='PATH' (" in str(spec.value)
    with pytest.raises(WeightsNotFound) as cli:
        ModelSpec("sst-l+", 2, cli=True).fetched("sst-light-291", 4)  # as the command line makes it
    assert "with network access, or pass --weights PATH (" in str(cli.value)


def test_resolve_pretrained_from_cache(cache: Path) -> None:
    assert hub.resolve_pretrained("sst", 4, repo_id=REPO).read_bytes() == DATA_A


def test_sha256_verified(cache: Path) -> None:
    good = hashlib.sha256(DATA_A).hexdigest()
    assert hub.download(hub.HubFile(REPO, FILE, sha256=good)).read_bytes() == DATA_A
    bad = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(CheckpointError) as info:
        hub.download(hub.HubFile(REPO, FILE, sha256=bad))
    msg = str(info.value)
    assert FILE in msg and bad in msg and good in msg


def test_damaged_cached_lfs_file_is_refused_offline(cache: Path) -> None:
    """A cached file was used as it was (the wrong picture, exit 0): its blob's name is its LFS sha256."""
    path = hub.download(hub.HubFile(REPO, FILE))
    blob = path.resolve()
    blob.write_bytes(b"damaged on disk")
    with pytest.raises(CheckpointError) as info:
        hub.download(hub.HubFile(REPO, FILE), pull_hint="sst models pull sst --scale 4 --hub-repo tester/sst-fake")
    msg = str(info.value)
    assert "\n" not in msg and f"the cached {FILE} from {REPO} ({path}) has sha256" in msg
    assert hashlib.sha256(DATA_A).hexdigest() in msg and "was removed from the cache" in msg
    assert "run `sst models pull sst --scale 4 --hub-repo tester/sst-fake` with network access" in msg
    assert not blob.exists() and not path.exists()
    add_to_cache(cache, REPO, COMMIT_A, {FILE: DATA_A})
    path.resolve().write_bytes(b"damaged again")
    with pytest.raises(CheckpointError, match="removed from the cache: HF_HUB_OFFLINE is set; unset it"):
        hub.pull("sst", 4, repo_id=REPO)  # the --hub-repo zoo path, as `sst models pull` runs it
    with pytest.raises(WeightsNotFound, match="not in the Hugging Face cache"):
        hub.resolve_pretrained("sst", 4, repo_id=REPO)  # the --hub-repo zoo path: gone, never used


def test_damaged_cached_file_that_cannot_be_removed_is_not_said_removed(cache: Path, read_only: Any) -> None:
    """A shared cache this user may not change: the file stayed, and the message said it "was removed from the
    cache"."""
    path = hub.download(hub.HubFile(REPO, FILE))
    path.resolve().write_bytes(b"damaged on disk")
    read_only(path.parent)
    with pytest.raises(CheckpointError) as info:
        hub.download(hub.HubFile(REPO, FILE), pull_hint="sst models pull sst --scale 4 --hub-repo tester/sst-fake")
    msg = str(info.value)
    assert "\n" not in msg and f"the cached {FILE} from {REPO} ({path}) has sha256" in msg
    assert f"could not be removed from the cache ({path}: permission denied): remove it as a user who may write to " \
        f"{path.parent}, then run `sst models pull sst --scale 4 --hub-repo tester/sst-fake`; or set HF_HUB_CACHE " \
        "(or HF_HOME) to a folder you can write; or pass --weights PATH" in msg  # fmt: skip
    assert "was removed" not in msg and path.read_bytes() == b"damaged on disk"


def test_an_unchanged_cached_file_is_not_hashed_on_every_use(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hf:// files were read whole on every run to check their sha256 (seconds for a multi-GB checkpoint): one
    hashed before and unchanged since is taken; any change of size or mtime, `pull` and `models info` hash it."""
    path = hub.download(hub.HubFile(REPO, FILE))
    blob = path.resolve()
    hub.download(hub.HubFile(REPO, FILE))  # just written: too recent to be remembered (racy), hashed again
    assert not hub.pins.hashed_path().exists()
    old = blob.stat().st_mtime_ns - 10**10
    os.utime(blob, ns=(old, old))
    hub.download(hub.HubFile(REPO, FILE))  # hashed and remembered
    hashed: list[Path] = []
    module = sys.modules["sst_cli.hub.resolve"]  # hub.resolve is the function of that name
    real = module.sha256_of
    monkeypatch.setattr(module, "sha256_of", lambda p: hashed.append(p) or real(p))
    assert hub.download(hub.HubFile(REPO, FILE)).read_bytes() == DATA_A and hashed == []
    blob.write_bytes(DATA_A.upper())  # same size, a new mtime: hashed, found damaged
    os.utime(blob, ns=(old, old + 1))
    with pytest.raises(CheckpointError, match="was removed from the cache"):
        hub.download(hub.HubFile(REPO, FILE))
    add_to_cache(cache, REPO, COMMIT_A, {FILE: DATA_A})
    os.utime(blob, ns=(old, old))
    hub.download(hub.HubFile(REPO, FILE))
    blob.write_bytes(DATA_A.upper())  # damaged in place, size and mtime kept: only a real hash sees it
    os.utime(blob, ns=(old, old))
    assert hub.download(hub.HubFile(REPO, FILE)).exists()
    with pytest.raises(CheckpointError, match="was removed from the cache"):
        hub.download(hub.HubFile(REPO, FILE), rehash=True)


def test_cached_file_outside_lfs_is_not_misjudged(cache: Path) -> None:
    """A file kept in git has a git sha1 as its blob name, not a sha256: nothing to check it against."""
    repo_dir = cache / f"models--{REPO.replace('/', '--')}"
    blob = repo_dir / "blobs" / hashlib.sha1(b"a config").hexdigest()
    blob.write_bytes(b"a config")
    (repo_dir / "snapshots" / COMMIT_A / "config.json").symlink_to(
        os.path.relpath(blob, repo_dir / "snapshots" / COMMIT_A)
    )
    assert hub.download(hub.HubFile(REPO, "config.json")).read_bytes() == b"a config"


def test_invalid_sha256_rejected() -> None:
    with pytest.raises(ConfigError, match="64 lowercase hex"):
        hub.HubFile(REPO, FILE, sha256="abc")


def test_cached_path(cache: Path) -> None:
    assert hub.cached_path(hub.HubFile(REPO, FILE)).read_bytes() == DATA_A
    assert hub.cached_path(hub.HubFile(REPO, FILE, revision=COMMIT_B)).read_bytes() == DATA_B
    assert hub.cached_path(hub.HubFile(REPO, "missing.pth")) is None
    assert hub.cached_path(hub.HubFile(REPO, FILE, revision="v9")) is None
    assert hub.cached_path(hub.HubFile("nobody/nothing", FILE)) is None


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("hf://owner/repo/model.pth", hub.HubFile("owner/repo", "model.pth")),
        ("hf://owner/repo/model.pth@v1.0", hub.HubFile("owner/repo", "model.pth", "v1.0")),
        ("hf://owner/repo/a/b/model.pth@" + COMMIT_A, hub.HubFile("owner/repo", "a/b/model.pth", COMMIT_A)),
        ("hf://owner/repo@dev/a/model.pth", hub.HubFile("owner/repo", "a/model.pth", "dev")),
        ("hf://models/owner/repo/model.pth", hub.HubFile("owner/repo", "model.pth")),
        ("  hf://owner/repo/model.safetensors  ", hub.HubFile("owner/repo", "model.safetensors")),
    ],
)
def test_parse_hf_reference_good(ref: str, expected: hub.HubFile) -> None:
    assert hub.parse_hf_reference(ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "hf://",
        "hf://owner",
        "hf://owner/repo",
        "hf://owner/repo/",
        "hf://owner//model.pth",
        "hf:///repo/model.pth",
        "hf://owner/repo/model.pth@",
        "hf://owner/repo/../model.pth",
        "hf://datasets/owner/repo/model.pth",
        "https://huggingface.co/owner/repo/model.pth",
        "owner/repo/model.pth",
    ],
)
def test_parse_hf_reference_bad(ref: str) -> None:
    with pytest.raises(ConfigError, match=r"expected hf://OWNER/REPO/PATH/IN/REPO\.pth\[@REVISION\]"):
        hub.parse_hf_reference(ref)


def test_is_hf_reference() -> None:
    assert hub.is_hf_reference("hf://a/b/c.pth")
    assert hub.is_hf_reference("HF://a/b")
    assert not hub.is_hf_reference("weights/hf.pth")
    assert not hub.is_hf_reference("C:/models/x.pth")


def test_manifest_has_all_zoo_entries() -> None:
    manifest = hub.load_manifest()
    assert manifest["format"] == 1 and "default_repo_id" not in manifest  # no guessed repository any more
    assert manifest["hub_owner"] == "dslisleedh" and manifest["hub_collection"] == "sst"
    assert manifest["release_url"] == "https://github.com/dslisleedh/SST/releases/download/v0.0.1"
    assert set(manifest["models"]) == set(ZOO) | set(OURS) | set(OFF_HUB) | set(LISTED)
    count = 0
    for name, pattern in ZOO.items():
        assert set(manifest["models"][name]) == {"2", "3", "4"}
        for scale in (2, 3, 4):
            raw = manifest["models"][name][str(scale)]
            assert set(raw) >= {"filename", "repo_id", "revision", "sha256", "bundled"}
            entry = hub.manifest_entry(name, scale)
            assert entry.filename == pattern.format(s=scale)
            assert entry.repo_id is None  # unverified: found by file name, see README
            assert entry.bundled is None  # official names always mean the authors' weights, downloaded
            assert entry.on_hub and entry.revision == "main"
            count += 1
    assert count == 21


def test_sst_real_is_found_by_listing_its_repository() -> None:
    entries = hub.load_manifest()["models"]["sst-real"]
    assert set(entries) == {"4"}
    assert entries["4"]["repo_id"] == "dslisleedh/SSTReal_X4" and entries["4"]["filename"] is None
    assert entries["4"]["bundled"] is None
    entry = hub.manifest_entry("sst-real", 4)  # listing the repository: tests/test_hub_http.py
    assert entry.filename is None and entry.what == "the checkpoint of dslisleedh/SSTReal_X4"
    assert hub.locate("sst-real", 4).origin == "hub dslisleedh/SSTReal_X4, not downloaded yet"


def test_sst_cli_trained_entries_are_bundled_only(x3_untrained: Path) -> None:
    entries = hub.load_manifest()["models"]["sst-light-291"]
    assert set(entries) == {"2", "3", "4"} and all(e["filename"] is None for e in entries.values())
    bundled = hub.resolve_pretrained("sst-light-291", 4)
    entry = hub.manifest_entry("SST-Light-291", 4)
    assert bundled == hub.weights_dir() / "sst-light-291_x4.safetensors" == entry.bundled_path
    assert hub.sha256_of(bundled) == entries["4"]["sha256"] and entry.ours
    with pytest.raises(ConfigError, match="bundled with it, not on the Hugging Face Hub"):
        hub.resolve("sst-light-291", 4, repo_id="dslisleedh/SST")
    with pytest.raises(WeightsNotFound, match=r"not trained yet \(only x2, x4 ship so far\): make them with `sst"):
        hub.resolve_pretrained("sst-light-291", 3)
    assert {("sst-light-291", 2), ("sst-light-291", 4)} <= set(hub.bundled_models())
    assert hub.sha256_of(hub.resolve_pretrained("sst-light-291", 2)) == entries["2"]["sha256"]


def test_offline_official_weights_point_at_the_bundled_default(cache: Path) -> None:
    with pytest.raises(WeightsNotFound, match=r"without a download, the bundled sst-light-291 x4 works"):
        hub.resolve_pretrained("sst-light", 4)


def test_bundled_file_is_checked_against_its_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "w"
    entry = {"filename": None, "repo_id": None, "revision": None, "bundled": "tiny_x4.safetensors"}
    _write_manifest(folder, {**entry, "sha256": hashlib.sha256(b"right").hexdigest()})
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(folder))
    (folder / "tiny_x4.safetensors").write_bytes(b"right")
    assert hub.resolve_pretrained("tiny", 4) == folder / "tiny_x4.safetensors"
    (folder / "tiny_x4.safetensors").write_bytes(b"wrong")
    with pytest.raises(CheckpointError, match="do not match the sha256 in the manifest") as info:
        hub.resolve_pretrained("tiny", 4)
    # a folder of the user's: no reinstall brings its file back, the variable is what to look at
    assert f"SST_WEIGHTS_DIR={folder}: put the file back there, or unset SST_WEIGHTS_DIR" in str(info.value)
    assert "reinstall" not in str(info.value)


def test_manifest_is_the_repo_weights_folder() -> None:
    assert hub.weights_dir() == ROOT / "weights"


def test_a_weights_folder_without_manifest_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"manifest not found at .*: the folder is SST_WEIGHTS_DIR=.*nowhere: put"):
        hub.manifest_entry("sst", 4)


def test_repo_override_order(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--hub-repo, then SST_HUB_REPO, then the manifest (here: nothing verified, so discovery on first use)."""
    add_to_cache(cache, "env/repo", COMMIT_A, {FILE: b"env"}, ref="main")
    add_to_cache(cache, "arg/repo", COMMIT_A, {FILE: b"arg"}, ref="main")
    assert hub.locate("sst", 4).origin == "not found yet"
    monkeypatch.setenv("SST_HUB_REPO", "env/repo")
    assert hub.locate("sst", 4).origin == f"hub env/repo@{COMMIT_A[:7]}"
    assert hub.resolve_pretrained("sst", 4).read_bytes() == b"env"
    assert hub.resolve_pretrained("sst", 4, repo_id="arg/repo").read_bytes() == b"arg"


def test_unknown_model_lists_choices() -> None:
    with pytest.raises(ConfigError) as info:
        hub.resolve_pretrained("sst-huge", 4)
    for name in ZOO:
        assert name in str(info.value)


def test_unknown_scale_lists_scales() -> None:
    with pytest.raises(ConfigError, match="available scales: 2, 3, 4"):
        hub.manifest_entry("sst", 8)


def _write_manifest(folder: Path, entry: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"format": 1, "hub_owner": "someone", "models": {"tiny": {"4": entry}}}
    (folder / "manifest.json").write_text(json.dumps(data))


def test_bundled_and_verified_manifest_repo_id(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "weights"
    entry = {"filename": FILE, "repo_id": REPO, "revision": "main", "sha256": None, "bundled": None}
    _write_manifest(folder, entry)
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(folder))
    assert hub.manifest_entry("tiny", 4).repo_id == REPO
    located = hub.locate("tiny", 4)  # a verified repository's cached file is found without a pin
    assert located.cached and located.origin == f"hub {REPO}@{COMMIT_A[:7]}"

    bundled_dir = tmp_path / "bundled"
    _write_manifest(bundled_dir, {**entry, "bundled": "tiny_x4.safetensors"})
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(bundled_dir))
    with pytest.raises(WeightsNotFound, match=f"missing: the folder is SST_WEIGHTS_DIR={bundled_dir}: put the"):
        hub.resolve_pretrained("tiny", 4)
    (bundled_dir / "tiny_x4.safetensors").write_bytes(b"x")
    assert hub.resolve_pretrained("tiny", 4) == bundled_dir / "tiny_x4.safetensors"
    assert hub.resolve_pretrained("tiny", 4, repo_id=REPO).read_bytes() == DATA_A  # asking for a repo: download


def test_dat_entries_say_where_to_download_and_a_mirror_is_used() -> None:
    for name, pattern in OFF_HUB.items():
        for scale in (2, 3, 4):
            entry = hub.manifest_entry(name, scale)
            assert not entry.on_hub and entry.filename == pattern.format(s=scale) and entry.bundled is None
            assert entry.where == "https://github.com/zhengchen1999/DAT"
            with pytest.raises(WeightsNotFound, match=f"download {pattern.format(s=scale)} from the authors'"):
                hub.resolve_pretrained(name, scale)


def test_manifest_entry_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shapes other entries use: published off the Hub (DAT), a repository with an unknown file name."""
    folder = tmp_path / "weights"
    folder.mkdir()
    off = {"filename": "DAT_x2.pth", "hub": False, "where": "https://example.org/dat", "host": "Google Drive"}
    real = {"filename": None, "repo_id": "owner/Real_X4", "revision": "main"}
    data = {"format": 1, "models": {"dat": {"2": off}, "real": {"4": real}}}
    (folder / "manifest.json").write_text(json.dumps(data))
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(folder))
    dat = hub.manifest_entry("dat", 2)
    assert not dat.on_hub and (dat.where, dat.host) == ("https://example.org/dat", "Google Drive")
    assert hub.locate("dat", 2).origin == "off the hub: https://example.org/dat"
    with pytest.raises(WeightsNotFound, match=r"download DAT_x2\.pth from the authors' Google Drive"):
        hub.resolve("dat", 2)
    real_entry = hub.manifest_entry("real", 4)
    assert real_entry.filename is None and not real_entry.ours and real_entry.what == "the checkpoint of owner/Real_X4"
    assert hub.locate("real", 4).origin == "hub owner/Real_X4, not downloaded yet"


def test_bad_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "manifest.json").write_text('{"format": 99}')
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="format 1"):
        hub.load_manifest()


def _bare(cls: type[Exception], status: int | None = None) -> Exception:
    """An instance of a huggingface_hub error without the httpx2 Response its __init__ wants."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, "server said no")
    if status is not None:
        exc.response = SimpleNamespace(status_code=status)  # type: ignore[attr-defined]
    return exc


_CHECK_REPO = "check the repository (--hub-repo, SST_HUB_REPO or the hf:// reference), or pass --weights PATH"
_TOKEN = f"set HF_TOKEN to a token that can read {REPO} (and accept its terms on hub.example if it is gated), or " \
    "pass --weights PATH"  # fmt: skip
_LATER = "try again later, or pass --weights PATH"


@pytest.mark.parametrize(
    ("error", "fragment", "step"),
    [
        (_bare(GatedRepoError, 403), f"access to {REPO} is gated or unauthorised (HTTP 403)", _TOKEN),
        (
            _bare(RepositoryNotFoundError, 401),
            "the repository does not exist (or is private: set HF_TOKEN)",
            _CHECK_REPO,
        ),
        (_bare(RevisionNotFoundError, 404), "the revision does not exist", _CHECK_REPO),
        (_bare(EntryNotFoundError), "the file does not exist there", _CHECK_REPO),
        (_bare(HfHubHTTPError, 401), f"access to {REPO} is gated or unauthorised (HTTP 401)", _TOKEN),
        (_bare(HfHubHTTPError, 503), "HTTP 503", _LATER),
        (LocalEntryNotFoundError("connection refused"), "the server could not be reached", _LATER),
        (ConnectionError("boom"), "ConnectionError: boom", _LATER),
    ],
)
def test_online_errors_are_one_sentence(
    monkeypatch: pytest.MonkeyPatch, error: Exception, fragment: str, step: str
) -> None:
    """Each failure says its own next step: a server error is no sign of a wrong reference, and a refused access
    names the repository (and the Hub asked, not huggingface.co when HF_ENDPOINT is another)."""

    def fake_download(*args: object, **kwargs: object) -> str:
        raise error

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.example")  # a mirror: named instead of huggingface.co
    monkeypatch.setattr(hub.library, "RETRY_WAITS", (0.0, 0.0))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(hub.net, "reachable", lambda url, timeout=None: True)
    with pytest.raises(WeightsNotFound) as info:
        hub.download(hub.HubFile(REPO, FILE, revision="v2"))
    msg = str(info.value)
    assert fragment in msg and msg.endswith(f"; {step}") and "\n" not in msg
    assert msg.startswith(f"cannot download {FILE} from {REPO}@v2: ")


def test_env_vars_honoured_in_fresh_process(tmp_path: Path) -> None:
    """HF_HUB_OFFLINE/HF_HUB_CACHE set only in the environment, read by huggingface_hub at import."""
    root = tmp_path / "cache"
    add_to_cache(root, REPO, COMMIT_A, {FILE: DATA_A}, ref="main")
    script = textwrap.dedent(
        f"""
        import socket
        def no_net(*a, **k):
            raise AssertionError("network used")
        socket.socket.connect = no_net
        socket.getaddrinfo = no_net
        from sst_cli import hub
        from sst_cli.errors import WeightsNotFound
        print(hub.download(hub.HubFile({REPO!r}, {FILE!r})).read_bytes().decode())
        try:
            hub.download(hub.HubFile({REPO!r}, "other.pth"))
        except WeightsNotFound as exc:
            print("missing:", exc)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SST_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(root), HF_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert DATA_A.decode() in out
    assert "missing: other.pth from tester/sst-fake is not in the Hugging Face cache" in out


class _Answer(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status})()


def test_transient_failures_are_told_apart() -> None:
    """Which failures sst-cli asks again for, whichever huggingface_hub (and HTTP library) raised them."""
    from sst_cli.hub.library import transient

    assert transient(_Answer(500)) and transient(_Answer(503)) and transient(_Answer(429))
    assert not transient(_Answer(404)) and not transient(_Answer(401)) and not transient(ValueError("x"))
    assert transient(ConnectionResetError()) and transient(OSError("Consistency check failed: file should be"))
    try:
        try:
            raise TimeoutError("read timed out")
        except TimeoutError as inner:
            raise RuntimeError("LocalEntryNotFoundError-like wrapper") from inner
    except RuntimeError as wrapped:
        assert transient(wrapped)  # 0.x wraps the connection error: its cause decides


def test_retried_gives_up_after_the_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    from sst_cli.hub import library

    monkeypatch.setattr(library, "RETRY_WAITS", (0.0, 0.0))
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _Answer(502)
        return "ok"

    def failing(status: int) -> str:
        calls.append(1)
        raise _Answer(status)

    assert library.retried(flaky) == "ok" and len(calls) == 3
    calls.clear()
    with pytest.raises(_Answer):
        library.retried(lambda: failing(500))
    assert len(calls) == 3  # three attempts, then the error
    calls.clear()
    with pytest.raises(_Answer):
        library.retried(lambda: failing(404))
    assert len(calls) == 1  # not found: asked once


def test_a_slow_time_out_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that took the connection and then stalled: each of three rounds ran the library's own retries,
    3 min 20 s in all. A quick time-out, or a connection broken after a long transfer, is still asked again."""
    from sst_cli.hub import library

    clock = [0.0]
    monkeypatch.setattr(library, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda _s: None))
    calls: list[int] = []

    def stalls(seconds: float, error: Exception) -> str:
        calls.append(1)
        clock[0] += seconds
        raise error

    with pytest.raises(TimeoutError):
        library.retried(lambda: stalls(60.0, TimeoutError("timed out")))
    assert len(calls) == 1
    calls.clear()
    with pytest.raises(TimeoutError):
        library.retried(lambda: stalls(1.0, TimeoutError("timed out")))
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ConnectionError):
        library.retried(lambda: stalls(60.0, ConnectionError("connection reset")))
    assert len(calls) == 3


def _pin_many(home: str, prefix: str) -> None:
    """One of two processes pinning at once (module level: multiprocessing runs it by name)."""
    constants.HF_HOME = home
    for i in range(40):
        sha = hashlib.sha256(f"{prefix}{i}".encode()).hexdigest()
        hub.pins.save_pin(f"{prefix}{i}.pth", hub.pins.Pin("release", f"{prefix}{i}.pth", sha, url="https://x/y"))


def test_pins_saved_by_two_processes_at_once_are_all_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unlocked read-modify-writes kept 64 of 80."""
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path))
    assert _in_two_processes(_pin_many, [(str(tmp_path), prefix) for prefix in ("a", "b")]) == [0, 0]
    assert len(hub.pins.read_pins()) == 80


def _in_two_processes(target: Callable[..., None], args: list[tuple[str, ...]]) -> list[int | None]:
    """Run ``target`` in one spawned process per ``args``, all at once; their exit codes."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=target, args=a) for a in args]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    return [worker.exitcode for worker in workers]


def _hash_many(home: str, folder: str, prefix: str) -> None:
    """One of two processes remembering hashes at once (module level: multiprocessing runs it by name)."""
    constants.HF_HOME = home
    for i in range(30):
        path = Path(folder) / f"{prefix}{i}.bin"
        hub.pins.remember_sha256(path, hashlib.sha256(path.read_bytes()).hexdigest())


def test_hashes_remembered_by_two_processes_at_once_are_all_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hashed.json had the same unlocked read-modify-write as pins.json."""
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path))
    for prefix in ("a", "b"):
        for i in range(30):
            (tmp_path / f"{prefix}{i}.bin").write_bytes(f"{prefix}{i}".encode())
            os.utime(tmp_path / f"{prefix}{i}.bin", (time.time() - 60, time.time() - 60))  # not racy
    assert _in_two_processes(_hash_many, [(str(tmp_path), str(tmp_path), p) for p in ("a", "b")]) == [0, 0]
    assert len(hub.pins._hashed_files()) == 60


@pytest.mark.parametrize(
    ("proxy", "probed"),
    [
        ("https://proxy.example", ("proxy.example", 443)),
        ("http://proxy.example", ("proxy.example", 80)),
        ("proxy.example", ("proxy.example", 80)),
        ("https://proxy.example:8443", ("proxy.example", 8443)),
    ],
)
def test_the_network_probe_knocks_on_the_proxy_port_its_scheme_means(
    monkeypatch: pytest.MonkeyPatch, proxy: str, probed: tuple[str, int]
) -> None:
    """An https:// proxy without a port was probed on port 80: "no network" for a proxy listening on 443."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    tried: list[tuple[str, int]] = []

    def connect(address: tuple[str, int], timeout: float | None = None) -> socket.socket:
        tried.append(address)
        raise OSError("refused")

    monkeypatch.setattr(hub.net.socket, "create_connection", connect)
    assert not hub.net.reachable("https://huggingface.co/api/models", timeout=1)
    assert tried == [probed]


@pytest.mark.skipif(sys.platform == "win32", reason="the cache's symbolic links")
def test_a_refused_file_leaves_the_blob_another_name_still_links_to(tmp_path: Path) -> None:
    """The cache stores equal files once: a mirror's x3 name refused for holding x2 weights took the x2 file,
    pulled for offline use, with it (its link then led nowhere)."""
    import importlib

    resolve = importlib.import_module("sst_cli.hub.resolve")  # the package's ``resolve`` is the function
    repo = tmp_path / "models--me--mirror"
    blob = repo / "blobs" / ("ab" * 32)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x2 weights")
    snapshot = repo / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    for name in ("x2.pth", "x3.pth"):
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    assert resolve._evict(snapshot / "x3.pth") is None
    assert not (snapshot / "x3.pth").is_symlink() and (snapshot / "x2.pth").read_bytes() == b"x2 weights"
    assert resolve._evict(snapshot / "x2.pth") is None
    assert not blob.exists()  # the last name gone: the blob with it


@pytest.mark.parametrize("variable", ["bad", "a/b/c", "me/my repo"])
def test_sst_hub_repo_is_checked_as_hub_repo_is(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    """A bad SST_HUB_REPO was taken to the Hub ("bad@main does not exist"), or named an hf:// reference the user
    never wrote; --hub-repo of the same text was refused at once."""
    monkeypatch.setenv("SST_HUB_REPO", variable)
    with pytest.raises(ConfigError, match=f"^SST_HUB_REPO='{variable}' is not a Hugging Face repository"):
        hub.resolve_pretrained("sst-light", 2)
    with pytest.raises(ConfigError, match=r"^SST_HUB_REPO="):
        hub.locate("sst-light", 2)
