"""Pretrained weights: the model-zoo manifest, ``hf://`` references and Hugging Face Hub downloads.

Downloads go through ``huggingface_hub.hf_hub_download`` so the standard cache and its environment
variables (HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_TOKEN) behave exactly as in every other HF tool.
``huggingface_hub`` is imported lazily: it costs ~0.25 s and most commands never touch the Hub.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sst_cli.errors import CheckpointError, ConfigError, WeightsNotFound
from sst_cli.zoo import VARIANTS

HF_SCHEME = "hf://"
HF_REFERENCE_FORM = "hf://OWNER/REPO/PATH/IN/REPO.pth[@REVISION]"
MANIFEST_FORMAT = 1
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class HubFile:
    """One file in a Hub model repository; ``sha256`` (lowercase hex) is verified after download."""

    repo_id: str
    filename: str
    revision: str | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        if self.sha256 is not None and not _SHA256_RE.match(self.sha256):
            raise ConfigError(f"sha256 for {self.filename} must be 64 lowercase hex digits, got {self.sha256!r}")

    @property
    def uri(self) -> str:
        """The ``hf://`` form, used in messages so users can paste it back as --weights."""
        suffix = f"@{self.revision}" if self.revision else ""
        return f"{HF_SCHEME}{self.repo_id}/{self.filename}{suffix}"


def is_hf_reference(source: str) -> bool:
    """True for anything meant as a Hub reference, so malformed ones fail loudly, not as missing files."""
    return source.strip().lower().startswith(HF_SCHEME)


def parse_hf_reference(ref: str) -> HubFile:
    """Parse ``hf://OWNER/REPO/PATH[@REV]`` (also huggingface_hub's ``hf://OWNER/REPO@REV/PATH``)."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"malformed Hub reference {ref!r}: {why}; expected {HF_REFERENCE_FORM}")

    text = ref.strip()
    if not is_hf_reference(text):
        raise bad(f"it does not start with {HF_SCHEME}")
    body = text[len(HF_SCHEME) :]
    if body.startswith("models/"):  # huggingface_hub's explicit repo-type prefix
        body = body[len("models/") :]
    elif body.split("/", 1)[0] in ("datasets", "spaces", "buckets", "kernels"):
        raise bad("only model repositories can hold weights")
    parts = body.split("/")
    if len(parts) < 3:
        raise bad("it needs an owner, a repository and a file path")
    owner, repo, rest = parts[0], parts[1], "/".join(parts[2:])
    revision: str | None = None
    if "@" in repo:  # huggingface_hub canonical form: hf://OWNER/REPO@REV/PATH
        repo, revision = repo.split("@", 1)
    elif "@" in parts[-1]:
        rest, revision = rest.rsplit("@", 1)
    if revision is not None and not revision:
        raise bad("the revision after '@' is empty")
    if not owner or not repo:
        raise bad("the owner or repository name is empty")
    segments = rest.split("/")
    if not rest or any(seg in ("", ".", "..") for seg in segments):
        raise bad("the file path is missing or has empty, '.' or '..' parts")
    return HubFile(repo_id=f"{owner}/{repo}", filename=rest, revision=revision)


def weights_dir() -> Path:
    """Folder holding manifest.json and bundled weights: env override, source checkout, installed package."""
    env = os.environ.get("SST_WEIGHTS_DIR")
    if env:
        return Path(env).expanduser()
    checkout = Path(__file__).resolve().parent.parent / "weights"
    if (checkout / "manifest.json").is_file():  # not just is_dir: site-packages/weights may be foreign
        return checkout
    try:
        found: Any = resources.files("sst_cli.weights")
    except ModuleNotFoundError as exc:
        raise WeightsNotFound("cannot find the sst_cli weights folder; set SST_WEIGHTS_DIR") from exc
    if isinstance(found, Path):
        return found
    paths = getattr(found, "_paths", None)  # MultiplexedPath of a namespace package
    if paths:
        return Path(paths[0])
    return Path(str(found))


@functools.lru_cache(maxsize=8)
def _load_manifest_at(path: Path) -> dict:
    """Parse and shape-check one manifest file (cached per path, so SST_WEIGHTS_DIR can change in tests)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"weights manifest not found at {path}") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"weights manifest {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ConfigError(f"weights manifest {path} is not format {MANIFEST_FORMAT}")
    if not isinstance(data.get("models"), dict) or not isinstance(data.get("default_repo_id"), str):
        raise ConfigError(f"weights manifest {path} lacks 'models' or 'default_repo_id'")
    return data


def load_manifest() -> dict:
    """The parsed manifest.json; treat it as read-only (it is cached)."""
    return _load_manifest_at(weights_dir() / "manifest.json")


def manifest_entry(name: str, scale: int, *, repo_id: str | None = None) -> HubFile | Path:
    """Where the zoo weights for ``name`` x``scale`` live: a bundled file, or a file on the Hub.

    Repo id precedence: ``repo_id`` argument, SST_HUB_REPO, the entry's repo_id, default_repo_id.
    An explicit ``repo_id`` argument also bypasses a bundled file: asking for a repo means "download".
    Entries with no Hub file (weights trained by sst-cli) are bundled only: a ``repo_id`` is refused,
    and when nothing is bundled yet the error says how to train them.
    """
    manifest = load_manifest()
    models: dict = manifest["models"]
    key = name.strip().lower()
    if key not in models:
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(models)}")
    entry = models[key].get(str(scale))
    if not isinstance(entry, dict):
        scales = ", ".join(sorted(models[key], key=lambda s: (len(s), s)))
        raise ConfigError(f"model {key!r} has no x{scale} weights; available scales: {scales}")
    bundled, filename = entry.get("bundled"), entry.get("filename")
    if not filename and not bundled and entry.get("repo_id"):
        # INTERIM (sst-real, issue 15): a repo_id without a file name means "list the repository and take its
        # one checkpoint"; that listing belongs to hub discovery (issue 10). Until it lands, say what to do.
        where = entry["repo_id"]
        raise WeightsNotFound(
            f"{key} x{scale} weights are in the Hugging Face repository {where} under a file name sst-cli cannot "
            f"look up yet: download its checkpoint from https://huggingface.co/{where} and pass it with --weights"
        )
    if not filename:
        if not bundled:
            raise WeightsNotFound(_not_trained_message(key, scale, models[key]))
        if repo_id is not None:
            raise ConfigError(
                f"{key} weights are trained by sst-cli and bundled with it, not on the Hugging Face Hub: "
                "drop --hub-repo, or choose an official model to download"
            )
    if bundled and repo_id is None:
        return weights_dir() / bundled
    repo = repo_id or os.environ.get("SST_HUB_REPO") or entry.get("repo_id") or manifest["default_repo_id"]
    return HubFile(repo_id=repo, filename=filename, revision=entry.get("revision"), sha256=entry.get("sha256"))


def _not_trained_message(key: str, scale: int, scales: dict) -> str:
    """One sentence for a bundled-only entry whose weights do not exist yet, saying how to make them."""
    variant = VARIANTS.get(key)
    arch = variant.base if variant is not None and variant.base else key
    shipped = [f"x{s}" for s, e in sorted(scales.items()) if isinstance(e, dict) and e.get("bundled")]
    have = f" (only {', '.join(shipped)} ships so far)" if shipped else ""
    return (
        f"{key} x{scale} weights are not trained yet{have}: make them with `sst train --model {arch} "
        f"--scale {scale} --data DIR --iters N --out {key}_x{scale}.safetensors` and load that file with "
        f"--weights, or use the official weights with --model {arch} --scale {scale}"
    )


def bundled_models() -> list[tuple[str, int]]:
    """(name, scale) of every zoo entry whose weights ship with sst-cli, to suggest when the Hub is out of reach."""
    found = []
    for name, scales in load_manifest()["models"].items():
        for scale, entry in scales.items():
            if isinstance(entry, dict) and entry.get("bundled") and (weights_dir() / entry["bundled"]).is_file():
                found.append((name, int(scale)))
    return found


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes/contexts, to spot OfflineModeIsEnabled wrapped by huggingface_hub."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _hub_error(file: HubFile, exc: Exception, pull_hint: str) -> Exception:
    """Map a huggingface_hub failure to one user-facing sentence (no traceback text)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    what = f"{file.filename} from {file.repo_id}" + (f"@{file.revision}" if file.revision else "")
    override = "set SST_HUB_REPO or pass --hub-repo to use another repository, or pass --weights PATH"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, LocalEntryNotFoundError):
        offline = constants.HF_HUB_OFFLINE or any(isinstance(e, OfflineModeIsEnabled) for e in _chain(exc))
        if offline:
            return WeightsNotFound(
                f"{what} is not in the Hugging Face cache (HF_HUB_OFFLINE is set): "
                f"{pull_hint} with network access, or pass --weights PATH"
            )
        return WeightsNotFound(
            f"cannot reach the Hugging Face Hub to download {what} and it is not cached: check the network, "
            f"{override}, or use HF_HUB_OFFLINE=1 with a cached copy"
        )
    if isinstance(exc, GatedRepoError) or (status in (401, 403) and not isinstance(exc, RepositoryNotFoundError)):
        return WeightsNotFound(
            f"access to {file.repo_id} is gated or unauthorised: accept its terms on huggingface.co and set "
            f"HF_TOKEN to a token with read access, or {override}"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return WeightsNotFound(
            f"repository {file.repo_id} was not found on the Hugging Face Hub "
            f"(if it is private, set HF_TOKEN): {override}"
        )
    if isinstance(exc, RevisionNotFoundError):
        return WeightsNotFound(f"revision {file.revision!r} does not exist in {file.repo_id}: {override}")
    if isinstance(exc, EntryNotFoundError):
        return WeightsNotFound(f"{file.filename} does not exist in {file.repo_id}: {override}")
    if isinstance(exc, HFValidationError):
        return ConfigError(f"invalid Hub repository id or revision in {file.uri}: {exc}")
    if isinstance(exc, HfHubHTTPError):
        return WeightsNotFound(f"the Hugging Face Hub refused to serve {what} (HTTP {status}): {override}")
    return WeightsNotFound(
        f"downloading {what} failed ({type(exc).__name__}: {exc}): check the network, {override}, "
        "or use HF_HUB_OFFLINE=1 with a cached copy"
    )


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, streamed so multi-GB checkpoints do not sit in memory."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str, *, label: str | None = None) -> None:
    """Raise CheckpointError when ``path`` does not hash to ``expected``."""
    actual = sha256_of(path)
    if actual != expected.lower():
        raise CheckpointError(
            f"{label or path} has the wrong sha256: expected {expected.lower()}, got {actual} "
            f"(file at {path}; delete it and download again)"
        )


def download(file: HubFile, *, pull_hint: str | None = None) -> Path:
    """Fetch ``file`` into the standard HF cache (or find it there) and verify its sha256 if known.

    ``pull_hint``: the command suggested when offline and not cached (``sst models pull sst --scale 4``).
    """
    from huggingface_hub import hf_hub_download

    hint = f"run `{pull_hint}`" if pull_hint else "run this command again (or `sst models pull NAME --scale S`)"
    try:
        local = Path(hf_hub_download(file.repo_id, file.filename, revision=file.revision, library_name="sst-cli"))
    except Exception as exc:  # huggingface_hub/httpx2 raise many unrelated types; all become one sentence
        raise _hub_error(file, exc, hint) from exc
    if file.sha256:
        verify_sha256(local, file.sha256, label=f"{file.filename} from {file.repo_id}")
    return local


def cached_path(file: HubFile) -> Path | None:
    """Path of ``file`` in the HF cache, or None; never touches the network."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError

    try:
        found = try_to_load_from_cache(file.repo_id, file.filename, revision=file.revision)
    except HFValidationError as exc:
        raise ConfigError(f"invalid Hub repository id or revision in {file.uri}: {exc}") from exc
    # A str is a hit; None is a miss; a sentinel object means "known not to exist at that revision".
    return Path(found) if isinstance(found, str) and os.path.isfile(found) else None


def resolve_pretrained(name: str, scale: int, *, repo_id: str | None = None) -> Path:
    """Local path of zoo weights: the bundled file (sha256-checked when the manifest has one), else a Hub download."""
    entry = manifest_entry(name, scale, repo_id=repo_id)
    if isinstance(entry, Path):
        if not entry.is_file():
            raise WeightsNotFound(f"bundled weights {entry} for {name} x{scale} are missing: reinstall sst-cli")
        expected = load_manifest()["models"][name.strip().lower()][str(scale)].get("sha256")
        if expected and sha256_of(entry) != expected.lower():
            raise CheckpointError(
                f"bundled weights {entry} do not match the sha256 in the manifest (changed or damaged): "
                "reinstall sst-cli, or update the manifest if you replaced them on purpose"
            )
        return entry
    try:
        return download(entry, pull_hint=f"sst models pull {name.strip().lower()} --scale {scale}")
    except WeightsNotFound as exc:
        offline = [f"{n} x{s}" for n, s in bundled_models()]
        if not offline:
            raise
        hint = f" (without the Hub, the bundled {' / '.join(offline)} works: trained by sst-cli, not the paper's)"
        raise WeightsNotFound(str(exc) + hint) from exc
