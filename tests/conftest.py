"""Shared fixtures: the reference data in ../shared (beside the clone), skipped with a reason when absent."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    """The suite presses Ctrl-C as a user at a terminal does; a shell running it as a background job (``pytest &``,
    a CI runner's script) starts it with SIGINT ignored, which sst-cli rightly leaves ignored (``signals.catchable``)
    and the programs the tests start would inherit. A hook, not module code: worker processes that import this
    file must keep the disposition they were started with."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


SHARED = Path(__file__).resolve().parents[1].parent / "shared"
GOLDEN = SHARED / "golden"
DATASETS = SHARED / "datasets"

# The terminal that runs the suite must not shape what the tests read: rich keeps a COLUMNS / LINES it finds
# when the CLI's consoles are made (on first import of sst_cli.cli), and a table cut at that width ignores the
# COLUMNS a test passes to ``CliRunner.invoke(env=...)``. So both are removed before any test module imports the
# CLI, and every test runs at COLUMNS=80 (rich's width without a terminal) unless it asks for another.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

needs_golden = pytest.mark.skipif(
    not (GOLDEN / "mini_x3.pth").is_file(), reason=f"golden checkpoints not found in {GOLDEN}"
)
needs_datasets = pytest.mark.skipif(
    not (DATASETS / "Set5").is_dir(), reason=f"benchmark datasets not found in {DATASETS}"
)


@pytest.fixture(autouse=True, scope="session")
def _two_threads() -> None:
    """The golden vectors were computed with 2 intra-op threads; CI has 2 cores."""
    torch.set_num_threads(2)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny tensors on shared cores: one intra-op thread is several times faster than two (no waiting on the
    other). A module asks for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fresh_plans() -> Iterator[None]:
    """Attention plans are cached per process: tests that fake packages or kernels start and end without them.
    A module asks for it with ``pytestmark = pytest.mark.usefixtures("fresh_plans")``."""
    from sst_cli.archs.attention import reset_attention_plans

    reset_attention_plans()
    yield
    reset_attention_plans()


def golden_config(case: str) -> dict:
    return json.loads((GOLDEN / f"{case}.json").read_text())


def damage_pickle(path: Path) -> str:
    """Flip the first byte (the PROTO opcode) of a torch.save file's data.pkl in place; returns that part's name."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        member = next(i for i in archive.infolist() if i.filename.endswith("/data.pkl"))
    data = bytearray(path.read_bytes())
    at = member.header_offset
    name, extra = int.from_bytes(data[at + 26 : at + 28], "little"), int.from_bytes(data[at + 28 : at + 30], "little")
    data[at + 30 + name + extra] ^= 0xFF  # the local header's own lengths: torch pads it for alignment
    path.write_bytes(bytes(data))
    return member.filename


def add_to_cache(cache: Path, repo_id: str, commit: str, files: dict[str, bytes], ref: str | None = None) -> None:
    """Lay files out exactly as hf_hub_download does: blobs/<sha256>, snapshots/<commit>/<name> -> blob."""
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    for name, data in files.items():
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        pointer = repo_dir / "snapshots" / commit / name
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    if ref is not None:
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / ref).write_text(commit)  # no trailing newline: huggingface_hub does not strip


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """80 columns, whatever the terminal running pytest is (see the note at the top)."""
    monkeypatch.setenv("COLUMNS", "80")


@pytest.fixture(autouse=True)
def _private_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own empty HF_HOME (sst-cli's pins and release files live there) and HF cache, so
    that nothing a developer downloaded or pinned leaks in, and nothing a test writes leaks out."""
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    for name, value in (("HF_HOME", home), ("HF_HUB_CACHE", home / "hub"), ("HF_TOKEN_PATH", home / "token")):
        monkeypatch.setenv(name, str(value))
        monkeypatch.setattr(constants, name, str(value))
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture(autouse=True)
def _private_seams_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own empty cache of seam figures (``sst_cli.seamcache``): a probe measured by one test
    (or by a developer's runs) must not stand in for another's."""
    monkeypatch.setenv("SST_SEAMS_CACHE", str(tmp_path / "seams-cache"))


@pytest.fixture
def dynamo_only(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """``torch.compile`` with TorchDynamo's "eager" backend: graphs are traced (and broken) as for real, but no
    C++ or Triton is compiled, so a test takes seconds. Returns what was given to compile, in order."""
    compiled: list[object] = []
    original = torch.compile

    def trace_only(fn: object, **kw: object) -> object:
        compiled.append(fn)
        return original(fn, backend="eager")  # type: ignore[call-overload]

    monkeypatch.setattr(torch, "compile", trace_only)
    return compiled


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache with offline mode on (huggingface_hub reads both at import time)."""
    from huggingface_hub import constants

    root = tmp_path / "hf-cache"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    for var in ("SST_HUB_REPO", "SST_WEIGHTS_DIR"):
        monkeypatch.delenv(var, raising=False)
    return root


def tiny_sst(scale: int = 2) -> torch.nn.Module:
    """Random small SST (windows 4, 8, 16; L = 16) with weights large enough that every layer matters."""
    from sst_cli import SST, SSTConfig

    torch.manual_seed(0)
    cfg = SSTConfig(
        dim=12, window_sizes=(4, 8, 16), num_heads=2, ranks=(3, 3, 5), n_blocks=2,
        exp_ratio=1.5, upscaling_factor=scale, upsampler_type="pixelshuffle",
    )  # fmt: skip
    model = SST(**cfg.to_kwargs())
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model.eval()


@pytest.fixture
def x3_untrained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A weights folder (SST_WEIGHTS_DIR) like the shipped one, except that sst-light-291 x3 is not trained:
    what sst-cli says for a scale it has no weights for, whatever ships today."""
    folder = tmp_path / "weights"
    folder.mkdir()
    shipped = Path(__file__).resolve().parents[1] / "weights"
    manifest = json.loads((shipped / "manifest.json").read_text(encoding="utf-8"))
    manifest["models"]["sst-light-291"]["3"].update(bundled=None, sha256=None)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for scale in (2, 4):
        (folder / f"sst-light-291_x{scale}.safetensors").symlink_to(shipped / f"sst-light-291_x{scale}.safetensors")
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(folder))
    return folder


def lock(monkeypatch: pytest.MonkeyPatch, folder: str) -> None:
    """Make ``folder`` behave as one this user may not enter (chmod 000 does not stop root, who runs CI): listing
    it, and looking at anything inside it, fail with EACCES, as the system's calls do."""
    locked = os.path.abspath(folder)

    def guarded(call: Any, inside_only: bool) -> Any:
        def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
            where = os.path.abspath(os.fspath(path))
            if where.startswith(locked + os.sep) or (not inside_only and where == locked):
                raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
            return call(path, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(os, "scandir", guarded(os.scandir, inside_only=False))
    monkeypatch.setattr(os, "listdir", guarded(os.listdir, inside_only=False))
    monkeypatch.setattr(os, "stat", guarded(os.stat, inside_only=True))
    monkeypatch.setattr(os, "lstat", guarded(os.lstat, inside_only=True))


@pytest.fixture
def read_only(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make folders read-only (a shared Hugging Face cache this user may not change), made writable again after the
    test. Root ignores folder permissions, so for root removing a file there fails as it would for a user."""
    folders: list[Path] = []
    unlink = Path.unlink

    def refused(path: Path, missing_ok: bool = False) -> None:
        if any(Path(os.path.abspath(path)).parent == folder.absolute() for folder in folders):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        unlink(path, missing_ok=missing_ok)

    if os.geteuid() == 0:
        monkeypatch.setattr(Path, "unlink", refused)

    def make(folder: Path) -> None:
        folder.chmod(0o555)
        folders.append(folder)

    yield make
    for folder in folders:
        folder.chmod(0o755)
