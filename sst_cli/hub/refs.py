"""``hf://`` references, the ``HubFile`` they name, and sha256 checks of weight files."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError, ConfigError

HF_SCHEME = "hf://"
HF_REFERENCE_FORM = "hf://OWNER/REPO/PATH/IN/REPO.pth[@REVISION]"
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 1 << 20


def check_sha256(value: str | None, what: str) -> str | None:
    """``value`` if it is None or 64 lowercase hex digits, else a ConfigError naming ``what``."""
    if value is not None and not SHA256_RE.match(value):
        raise ConfigError(f"sha256 for {what} must be 64 lowercase hex digits, got {value!r}")
    return value


@dataclass(frozen=True)
class HubFile:
    """One file in a Hub model repository; ``sha256`` (lowercase hex) is verified after download."""

    repo_id: str
    filename: str
    revision: str | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        check_sha256(self.sha256, self.filename)

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
