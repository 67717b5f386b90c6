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

from ..checks import option_name, option_value


@dataclass(frozen=True)
class Spelling:
    """``weights``: the keyword that takes a weights file (``source`` for ``load_model``); ``cli``: written as
    options (``--weights PATH``, ``checks.option_value``) rather than keywords (``source='PATH'``)."""

    weights: str = "weights"
    cli: bool = True


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
    return option_value(spelling.weights, value, spelling.cli)


def named_repo(value: str = "OWNER/REPO") -> str:
    """``--hub-repo OWNER/REPO`` / ``hub_repo='OWNER/REPO'``."""
    return option_value("hub_repo", value, _spelling().cli)


def repo_option() -> str:
    """The repository option's name alone: ``--hub-repo`` / ``hub_repo``."""
    return option_name("hub_repo", _spelling().cli)
