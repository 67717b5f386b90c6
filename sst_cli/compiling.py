"""Opt-in ``torch.compile`` of a network: artefacts cached on disk, a notice while compiling, eager when it fails.

Compiling SST took 249 s on an H100 and made a forward 1.6x faster (412 -> 252 ms for SST-L x2 bf16), so it
pays only over a long run or once its artefacts are cached. They are: inductor's FX-graph and AOTAutograd
caches go to ``$TORCHINDUCTOR_CACHE_DIR`` when the user set it, else to a folder keyed by the sst-cli and
torch versions (``$XDG_CACHE_HOME/sst-cli/compile/sst-<v>-torch-<v>``), so an upgrade recompiles and a second
process finds the first one's work (dynamo still traces the network again: that part is never cached).

Regions: a network that names its repeated block (``SRNetwork.compile_regions``: SST's transformer layer,
DAT's block, the block a spandrel model's ModuleLists hold most) is compiled block by block, and blocks alike
share one graph. SST-light (5 groups of 6 layers) then compiles
6 small graphs, not one graph of 30 layers: on a 2-core CPU it compiled in 72-78 s against 350 s whole, and a
second process with the cache in 8 s against 44 s (``benchmarks/bench_compile.py``, RESULTS.md).

Shapes: tiles of one image differ (the last row and column run to the edge), and whole images of a folder
differ in size; padding tiles to one shape instead would change the output, because SST pads each layer
itself (reflecting) at the image edge and an input padded from outside is a different image. A network
compiled whole has height and width marked dynamic (``maybe_mark_dynamic``), so one graph serves them all.
Regions start static (their inputs are made inside the network, out of reach of that mark): the first size
compiles fastest and runs the fastest code, and a second size recompiles once with dynamic sides (torch's
automatic dynamic shapes). The batch dimension stays static. A few extra graphs appear where a side's
divisibility by a window size changes what the network does (a guard), each compiled once.

CUDA graphs (``mode="reduce-overhead"``) only with ``cuda_graphs=True``, which the Upscaler sets on CUDA
for fixed-size tiles: a graph is recorded per input shape and keeps its buffers, so whole images of many
sizes would pile them up.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import cast

import torch
from torch import nn

from .archs.base import SRNetwork, network_of
from .archs.tracing import prepare_tracing
from .choices import COMPILE_CHOICES
from .files import cache_root
from .runtime import is_out_of_memory, package_version

# ``auto`` compiles on CUDA once a batch's input images add up to this many megapixels (before upscaling).
# H100, SST-L x2 bf16: eager ~1.8 s per input megapixel, compiled ~40 % less (0.7 s/MP saved); a cached
# compile (the goal: <= 30 s) is repaid after ~45 MP, a first one (249 s measured) after ~350 MP.
AUTO_COMPILE_MEGAPIXELS = 50.0
_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# Graphs kept per Python function before dynamo gives up and runs it eager (torch's default: 8). All of a
# network's regions run one function (their block's forward), and each kind of block (window, shift, heads)
# takes an entry per kind of input size: every published SST has 6 kinds (SST-XL+: 60 layers).
RECOMPILE_LIMIT = 64


def compile_network(model: nn.Module, mode: str | None = None) -> tuple[nn.Module, Callable[[], None]]:
    """``model`` ready to run compiled, and how to make it eager again.

    Where the network names regions, each region's ``forward`` is replaced by its compiled version (undone by
    the returned function) and ``model`` itself is returned; otherwise the whole network is wrapped.
    """
    prepare_tracing()  # attention's eager-only helpers, hidden from dynamo (archs.tracing)
    network = network_of(model)
    regions = network.compile_regions() if isinstance(network, SRNetwork) else []
    if not regions:
        return cast(nn.Module, torch.compile(model, mode=mode)), lambda: None  # an OptimizedModule
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"  # torch < 2.6
    setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
    for region in regions:
        region.forward = torch.compile(region.forward, mode=mode)

    def undo() -> None:
        for region in regions:
            vars(region).pop("forward", None)

    return model, undo


def wants_compile(choice: str, device: torch.device, megapixels: float) -> bool:
    """Whether to compile: ``on`` always, ``off`` never, ``auto`` on CUDA for a batch of at least
    ``AUTO_COMPILE_MEGAPIXELS`` (the CPU never by ``auto``: compiling takes minutes there and a tiny SST
    measured no faster; see benchmarks/bench_compile.py)."""
    if choice not in COMPILE_CHOICES:
        raise ValueError(f"unknown compile choice {choice!r}")
    if choice == "auto":
        return device.type == "cuda" and megapixels >= AUTO_COMPILE_MEGAPIXELS
    return choice == "on"


def compile_cache_dir() -> Path:
    """Where inductor keeps compiled artefacts: the user's ``TORCHINDUCTOR_CACHE_DIR``, else ours, per version.
    torch's own default in that variable is not the user's: torch writes it there when anything asks for its
    cache folder (importing torchvision does), which sent spandrel models' artefacts to /tmp."""
    chosen = os.environ.get(_CACHE_ENV)
    if chosen and os.path.abspath(chosen) != _torch_default_cache():
        return Path(chosen)
    torch_version = torch.__version__.replace("+", "_")
    return cache_root() / "compile" / f"sst-{package_version()}-torch-{torch_version}"


def _torch_default_cache() -> str | None:
    """The folder torch puts in ``TORCHINDUCTOR_CACHE_DIR`` when it finds none (a private helper of torch's: None
    where it moved)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return os.path.abspath(default_cache_dir())


def compiler_problem(device: torch.device) -> str | None:
    """Why inductor cannot compile for ``device`` on this machine (a missing C++ compiler or Triton), or None."""
    if device.type == "cpu":
        from torch._inductor import config

        cxx = config.cpp.cxx[-1] or "g++"
        return None if shutil.which(cxx) else f"no C++ compiler '{cxx}' found (install g++ or set CXX)"
    if device.type == "cuda":
        return None if find_spec("triton") is not None else "Triton is not installed"
    return f"torch.compile is not used on {device.type} devices"


@contextmanager
def _cache_env(directory: Path) -> Iterator[None]:
    """Point inductor at ``directory`` while compiled code runs (it compiles lazily, on calls), then restore."""
    before = os.environ.get(_CACHE_ENV)
    os.environ[_CACHE_ENV] = str(directory)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_CACHE_ENV, None)
        else:
            os.environ[_CACHE_ENV] = before


class CompiledNetwork:
    """Calls ``model`` through ``torch.compile``; on a failed compile, says so in one line and runs eager.

    ``say`` receives the notices: one before the first (long) compile, one with its time, one per later
    recompilation for a new kind of shape, and the fallback. ``prime`` runs before compiling (the Upscaler
    picks a traceable attention kernel and runs the model once on a tiny input, so that work done eagerly
    on first use, choosing kernels, is cached and the graph has no breaks for it); ``on_eager`` undoes it
    when compiling fails.
    """

    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        say: Callable[[str], None],
        *,
        cuda_graphs: bool = False,
        prime: Callable[[], object] | None = None,
        on_eager: Callable[[], object] | None = None,
    ) -> None:
        self.model, self.device, self.say, self.prime, self.on_eager = model, device, say, prime, on_eager
        self.cuda_graphs = cuda_graphs and device.type == "cuda"
        self.cache = compile_cache_dir()
        self.eager = False  # set once compiling failed or cannot work here
        self.compile_seconds = 0.0
        self._compiled: Callable[..., torch.Tensor] | None = None
        self._undo: Callable[[], None] = lambda: None
        self._calls = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.eager:
            return self.model(x)
        if self._compiled is None and not self._start():
            return self.model(x)
        assert self._compiled is not None
        if self._compiled is not self.model:  # compiled whole (regions start static: see the module's text)
            torch._dynamo.maybe_mark_dynamic(x, 2)
            torch._dynamo.maybe_mark_dynamic(x, 3)
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        graphs = _graph_count()
        started = time.perf_counter()
        try:
            with _cache_env(self.cache):
                y = self._compiled(x)
        except Exception as exc:  # inductor, its C++ compiler or Triton; out of memory is the tiler's
            if is_out_of_memory(exc):
                raise
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            self.say(f"torch.compile failed ({type(exc).__name__}: {first}); running eager")
            self._fall_back()
            return self.model(x)
        seconds = time.perf_counter() - started
        self._calls += 1
        if _graph_count() != graphs:
            self.compile_seconds += seconds
            if self._calls == 1:
                self.say(f"compiled in {seconds:.0f} s")
            else:
                self.say(f"compiled again for {x.shape[-2]}x{x.shape[-1]} inputs in {seconds:.0f} s")
        return y

    def _start(self) -> bool:
        """Check that compiling can work here, prime the model, wrap it; False (and a notice) if it cannot."""
        problem = compiler_problem(self.device)
        if problem is not None:
            self.say(f"--compile: {problem}; running eager")
            self._fall_back()
            return False
        if self.prime is not None:
            self.prime()
        mode = "reduce-overhead" if self.cuda_graphs else None
        self._compiled, self._undo = compile_network(self.model, mode)
        graphs = "with CUDA graphs " if self.cuda_graphs else ""
        self.say(
            f"compiling the network for {self.device.type} {graphs}(once per machine and version: can take "
            f"minutes; cached in {self.cache})"
        )
        return True

    def _fall_back(self) -> None:
        self.eager = True
        self._undo()
        if self.on_eager is not None:
            self.on_eager()


def _graph_count() -> int:
    """Graphs dynamo has compiled in this process: a change means a call compiled (or recompiled)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
