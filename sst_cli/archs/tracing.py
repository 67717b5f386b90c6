"""Functions torch.compile must not trace, marked without importing ``torch._dynamo`` at start-up.

``@torch.compiler.disable`` imports ``torch._dynamo`` as it decorates: ~3.5 s of the 8 s ``sst upscale``
spent importing on a 2-core machine, for runs that never compile. ``never_traced`` defers it: the function
runs as it is until ``prepare_tracing()`` (called by sst-cli before every ``torch.compile``) swaps in its
``torch.compiler.disable`` version. Compiling without it still works: dynamo then breaks the graph where
the function does what it cannot trace (a ctypes call, ``data_ptr``), a little more slowly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")


class _NeverTraced(Generic[P, R]):
    def __init__(self, fn: Callable[P, R]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.run: Callable[P, R] = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run(*args, **kwargs)


_MARKED: list[_NeverTraced] = []


def never_traced(fn: Callable[P, R]) -> Callable[P, R]:
    """Mark ``fn`` to run eagerly under torch.compile, once ``prepare_tracing`` has run."""
    marked = _NeverTraced(fn)
    _MARKED.append(marked)
    return marked


def prepare_tracing() -> None:
    """Route every ``never_traced`` function through ``torch.compiler.disable``; call before torch.compile."""
    for marked in _MARKED:
        if marked.run is marked.fn:
            marked.run = torch.compiler.disable(marked.fn)
