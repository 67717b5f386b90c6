"""Finding official files on the Hub by their names, with huggingface_hub's own API.

Candidates are the model repositories in the owner's collections (the manifest's ``hub_collection`` first),
then the owner's other model repositories; they are searched in that order, those named like the file first
(``SSTLarge_Plus_DFLIP_X4.pth`` -> ``SSTLarge_Plus_DFLIP_X4``). The first repository holding the exact file
name wins; its commit and the file's LFS sha256 come from the same listing, so the download can be pinned to
that commit and verified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import WeightsNotFound
from . import library
from .advice import own_weights

MAX_COLLECTIONS = 10
MAX_REPOS = 60
CHECKPOINT_SUFFIXES = (".safetensors", ".pth", ".pt", ".ckpt", ".bin")


@dataclass(frozen=True)
class Found:
    """A file located on the Hub: ``path`` in ``repo_id`` at ``commit``; ``sha256`` from its LFS pointer."""

    repo_id: str
    commit: str
    path: str
    sha256: str | None = None
    size: int | None = None


def api() -> Any:
    return library.client()


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^0-9a-z]+", text.lower()) if w]


def name_rank(repo_id: str, filename: str) -> tuple[int, int]:
    """Sort key: repositories named like the file first (same name, then one name inside the other, then the
    most words in common)."""
    stem = filename.rsplit("/", 1)[-1]
    for suffix in CHECKPOINT_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    repo, file = "".join(_words(repo_id.split("/")[-1])), "".join(_words(stem))
    if repo == file:
        return (0, 0)
    if repo and (repo in file or file in repo):
        return (1, 0)
    return (2, -len(set(_words(repo_id.split("/")[-1])) & set(_words(stem))))


def candidate_repos(owner: str, collection: str | None = None, client: Any = None) -> list[str]:
    """Model repositories of ``owner``: those in its collections, then the rest of its models, no repeats."""
    client = client or api()
    repos: list[str] = []

    def add(repo_id: str) -> None:
        if repo_id not in repos:
            repos.append(repo_id)

    collections = list(client.list_collections(owner=owner, limit=MAX_COLLECTIONS * 3))
    wanted = (collection or "").lower()

    def collection_rank(c: Any) -> int:
        name = c.slug.split("/", 1)[-1].lower()
        title = (c.title or "").lower()
        return 0 if wanted and (name == wanted or name.startswith(wanted + "-") or title == wanted) else 1

    for summary in sorted(collections, key=collection_rank)[:MAX_COLLECTIONS]:
        full = client.get_collection(summary.slug)
        for item in full.items:
            if item.item_type == "model":
                add(item.item_id)
    for model in client.list_models(author=owner, limit=MAX_REPOS * 2):
        add(model.id)
    return repos


def repo_files(repo_id: str, revision: str | None = None, client: Any = None) -> tuple[str, list[Any]]:
    """(commit, files with size and LFS metadata) of one repository at ``revision`` (default branch if None)."""
    client = client or api()
    info = client.model_info(repo_id, revision=revision, files_metadata=True)
    return info.sha, list(info.siblings or [])


def found_file(repo_id: str, commit: str, sibling: Any) -> Found:
    lfs = getattr(sibling, "lfs", None)
    sha = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
    return Found(repo_id, commit, sibling.rfilename, sha.lower() if sha else None, getattr(sibling, "size", None))


def file_in(siblings: list[Any], filename: str) -> Any | None:
    """The sibling named exactly ``filename`` (at the top level, else in a sub-folder)."""
    exact = [s for s in siblings if s.rfilename == filename]
    nested = [s for s in siblings if s.rfilename.rsplit("/", 1)[-1] == filename]
    return (exact or sorted(nested, key=lambda s: s.rfilename.count("/")) or [None])[0]


def find_file(filename: str, owner: str, collection: str | None = None, client: Any = None) -> Found | None:
    """The first of ``owner``'s repositories (collections first, named like the file first) holding
    ``filename``; None when none does. Repositories that are gone, private or gated are skipped; network
    and server errors propagate (the caller decides about fallbacks)."""
    client = client or api()
    repos = candidate_repos(owner, collection, client)
    ranked = sorted(enumerate(repos), key=lambda pair: (name_rank(pair[1], filename), pair[0]))
    refused: list[int] = []
    for _, repo_id in ranked[:MAX_REPOS]:
        try:
            commit, siblings = repo_files(repo_id, client=client)
        except Exception as exc:
            if _skippable(exc):
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if status in (401, 403):
                    refused.append(status)
                continue
            raise
        sibling = file_in(siblings, filename)
        if sibling is not None and commit:
            return found_file(repo_id, commit, sibling)
    if refused:
        raise Refused(
            f"access was refused (HTTP {refused[0]}) to {len(refused)} of the {min(len(ranked), MAX_REPOS)} "
            f"repositories of {owner} searched (an invalid or missing HF_TOKEN?)"
        )
    return None


class Refused(Exception):
    """No repository searched held the file, and some refused access: the file may be in one of those."""


def _skippable(exc: BaseException) -> bool:
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError

    status = getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(exc, RepositoryNotFoundError | GatedRepoError) or status in (401, 403, 404)


def only_checkpoint(repo_id: str, revision: str | None = None, client: Any = None) -> Found:
    """A repository's one checkpoint, whatever its name: the ``.safetensors`` file, else the ``.pth`` file.

    WeightsNotFound when it has none, or several of the preferred kind (then the file must be named).
    """
    commit, siblings = repo_files(repo_id, revision, client)
    for suffixes in ((".safetensors",), (".pth", ".pt")):
        matches = sorted((s for s in siblings if s.rfilename.lower().endswith(suffixes)), key=lambda s: s.rfilename)
        if len(matches) == 1:
            return found_file(repo_id, commit, matches[0])
        if len(matches) > 1:
            names = ", ".join(s.rfilename for s in matches[:5])
            raise WeightsNotFound(
                f"{repo_id} holds several checkpoints ({names}): pass the one you want with "
                f"{own_weights(f'hf://{repo_id}/FILE')}"
            )
    raise WeightsNotFound(f"{repo_id} holds no .safetensors or .pth checkpoint: pass the weights with {own_weights()}")
