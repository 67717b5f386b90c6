"""How the Hub's messages name the options that would help, as their caller spells them.

The command line passes ``--weights PATH`` and ``--hub-repo OWNER/REPO``; ``load_model`` takes ``source=`` and
``hub_repo=``, ``ModelSpec`` ``weights=``. The loader says which (``spoken_to``) around its calls into the hub,
whose messages are made several calls deep; the command line's spelling is the default (``sst models``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Spelling:
    """``weights``: the option that takes a weights file; ``hub_repo``: the one that names a repository; ``cli``:
    written as options (``--weights PATH``) rather than keywords (``weights='PATH'``)."""

    weights: str = "--weights"
    hub_repo: str = "--hub-repo"
    cli: bool = True

    def given(self, option: str, value: str) -> str:
        return f"{option} {value}" if self.cli else f"{option}={value!r}"


_COMMAND_LINE = Spelling()
_SPELLING: ContextVar[Spelling | None] = ContextVar("sst_hub_spelling", default=None)


def _spelling() -> Spelling:
    return _SPELLING.get() or _COMMAND_LINE


@contextmanager
def spoken_to(spelling: Spelling) -> Iterator[None]:
    """Messages made inside the block name the options as ``spelling`` does."""
    token = _SPELLING.set(spelling)
    try:
        yield
    finally:
        _SPELLING.reset(token)


def own_weights(value: str = "PATH") -> str:
    """``--weights PATH`` / ``source='PATH'``: a weights file the caller passes."""
    spelling = _spelling()
    return spelling.given(spelling.weights, value)


def named_repo(value: str = "OWNER/REPO") -> str:
    """``--hub-repo OWNER/REPO`` / ``hub_repo='OWNER/REPO'``."""
    spelling = _spelling()
    return spelling.given(spelling.hub_repo, value)


def repo_option() -> str:
    """The repository option's name alone: ``--hub-repo`` / ``hub_repo``."""
    return _spelling().hub_repo
