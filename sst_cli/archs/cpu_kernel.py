"""sst-cli's own fp32 CPU attention kernel (``cpu_attention.c``): built on first use, loaded with ctypes.

Why C: PyTorch's fused CPU kernel needs one width for q, k and v, so SST's v is zero-padded to q/k's width and
about a third of its arithmetic multiplies zeros; ``sdpa-bias`` avoids the padding but pays for reading a mask.
This kernel takes v at its own width, and SST's positional factors separately: their product is computed once
per block of query rows for a group of windows and added to the scores, so each window pays only its content
channels. It measured 1.5-2.1x faster than padded SDPA per call (benchmarks/RESULTS.md). There is no wheel to
ship it in, so it is compiled here with the machine's C compiler (``$CC``, else ``cc``/``gcc``/``clang``;
``-O3 -march=native``, a few seconds, once) into
``$XDG_CACHE_HOME/sst-cli/kernels`` (default ``~/.cache``; ``SST_KERNEL_CACHE`` overrides), keyed by the
source, the compiler and the CPU, with a record of its size and sha256 beside it: a file that does not match
(cut short by a crash, changed) is never loaded but rebuilt. It is checked against float64 attention before
first use. Without a compiler,
or if anything fails, ``kernel_problem`` says why and the attention room uses PyTorch's kernels instead.
"""

from __future__ import annotations

import ctypes
import getpass
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import first_line
from ..files import cache_root, locked_if_possible
from .tracing import never_traced

SOURCE = Path(__file__).with_name("cpu_attention.c")
_COMPILE_TIMEOUT_S = 120
_SELF_TEST_TOLERANCE = 1e-4
_RECORD_SUFFIX = ".ok"  # beside each library: "<size> <sha256>" of the file as built
_LOCK_TIMEOUT_S = 10.0
_LEFTOVER_AGE_S = 3600.0
_LEFTOVER_RE = re.compile(r"tmp[a-z0-9_]{8}\.(so|dll|ok)")  # mkstemp's names: builds or records cut short


@dataclass(frozen=True)
class _Library:
    handle: ctypes.CDLL | None
    description: str  # "gcc 12.2.0" when built, else why not
    vector: int = 8  # floats per vector of the build (16 with AVX-512): v's width is rounded up to it
    key_tile: int = 16  # keys per packed tile (KT in the C source)


def _cache_dir() -> Path:
    if os.environ.get("SST_KERNEL_CACHE"):
        return Path(os.environ["SST_KERNEL_CACHE"])
    return cache_root() / "kernels"


def _compiler() -> list[str] | None:
    """The compiler command: ``$CC`` as a shell would split it (``ccache gcc`` works), else cc, gcc, clang."""
    wanted = os.environ.get("CC", "").strip()
    candidates = [shlex.split(wanted)] if wanted else [["cc"], ["gcc"], ["clang"]]
    for command in candidates:
        found = shutil.which(command[0])
        if found:
            return [found, *command[1:]]
    return None


def _name(compiler: list[str]) -> str:
    return " ".join([Path(compiler[0]).name, *compiler[1:]])


def _cpu_identity() -> str:
    """What -march=native depends on: a cache shared between machines must not hand one CPU another's build."""
    identity = [platform.machine(), platform.processor()]
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags", "Features", "CPU part")):
                identity.append(line)
                if len(identity) > 6:
                    break
    except OSError:
        pass
    return "\n".join(identity)


def _compile(compiler: list[str], source: Path, target: Path, extra: Sequence[str] = ()) -> str | None:
    """Build ``target`` and its record; returns None, or the first error line of the first try (-march=native,
    -mcpu=native, then no tuning flag: compilers differ in which they accept). ``extra`` flags follow the tuning
    flag."""
    suffix = ".dll" if sys.platform == "win32" else ".so"
    common = ["-O3", "-std=gnu11", "-shared", "-fPIC", "-pthread"]
    first_error = None
    _sweep_leftovers(target.parent)
    for arch in (["-march=native"], ["-mcpu=native"], []):
        fd, tmp = tempfile.mkstemp(suffix=suffix, dir=target.parent)
        os.close(fd)
        try:
            run = subprocess.run(
                [*compiler, *common, *arch, *extra, str(source), "-o", tmp, "-lm"],
                capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S, check=False,
            )  # fmt: skip
            if run.returncode == 0:
                _publish(Path(tmp), target)
                return None
            error = first_line(run.stderr, 160) or f"exit status {run.returncode}"
        except (OSError, subprocess.SubprocessError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            Path(tmp).unlink(missing_ok=True)
        first_error = first_error or error
    return first_error


def _sweep_leftovers(folder: Path) -> None:
    """Delete temporary files of builds killed over an hour ago: nothing else ever removes them."""
    cutoff = time.time() - _LEFTOVER_AGE_S
    for path in folder.glob("tmp*"):
        try:
            if _LEFTOVER_RE.fullmatch(path.name) and path.lstat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass  # another process's clean-up, or not ours to delete


def _fsync_replace(tmp: Path, target: Path) -> None:
    """``os.replace`` after the data is on disk: a crash must leave the old file or the whole new one, never
    a short one (loading a truncated library kills the process with SIGBUS)."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    if hasattr(os, "O_DIRECTORY"):  # the rename itself, where folders can be synced
        folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def _record(library: Path) -> Path:
    return library.with_name(library.name + _RECORD_SUFFIX)


def _digest(path: Path) -> str:
    data = path.read_bytes()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def _publish(tmp: Path, target: Path) -> None:
    """Put a finished build in place, then its record (size and sha256), both durably and under the lock, so
    that the pair on disk always belongs together."""
    digest = _digest(tmp)
    fd, record_tmp = tempfile.mkstemp(suffix=_RECORD_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(digest + "\n")
        with _guard(target):
            _fsync_replace(tmp, target)
            _fsync_replace(Path(record_tmp), _record(target))
    finally:
        Path(record_tmp).unlink(missing_ok=True)


def _damage(library: Path) -> str | None:
    """Why ``library`` must not be loaded (a file cut short, changed, or built before records were kept), or
    None when it is the file its record describes. Never load an unchecked file: dlopen can SIGBUS."""
    try:
        expected = _record(library).read_text().strip()
    except OSError:
        return f"{library} has no record of a finished build"
    try:
        actual = _digest(library)
    except OSError as exc:
        return f"cannot read {library} ({exc.strerror or exc})"
    if actual != expected:
        size = actual.split()[0]
        return f"{library} is damaged ({size} bytes, not the {expected.split()[0]} built)"
    return None


def _guard(library: Path) -> AbstractContextManager[None]:
    """Held while a build is published and while one is checked and loaded, so that no process loads a file
    replaced after its check; without it where it cannot be had (files are only ever replaced whole)."""
    return locked_if_possible(library, _LOCK_TIMEOUT_S)


def _version(compiler: list[str]) -> str:
    """``gcc 12.2.0``, ``clang 15.0.0``: the compiler's family and version, from its ``--version`` line."""
    try:
        out = subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=30, check=False)
        text = out.stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    line = first_line(text)
    family = "clang" if "clang" in line else "gcc" if "Free Software Foundation" in text else _name(compiler)
    number = re.search(r"\d+\.\d+(\.\d+)?", re.sub(r"\([^)]*\)", "", line))
    return f"{family} {number.group(0)}" if number else family


def _declare(lib: ctypes.CDLL) -> None:
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    lib.sst_attention_rows.argtypes = [pointer] * 6 + [count] * 7 + [pointer, count, pointer, count, ctypes.c_int]
    lib.sst_attention_rows.restype = ctypes.c_int
    for name in ("sst_attention_vector", "sst_attention_key_tile"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_int


def _temp_folder() -> Path:
    """Where to build when the cache folder cannot be written (a read-only home in a container). Named by the
    numeric user id where there is one: containers run ids with no name, and a shared name ("user") gave the
    second such id a folder owned by the first, so it ran without the kernel."""
    getuid = getattr(os, "getuid", None)
    if getuid is not None:
        user = str(getuid())
    else:  # Windows
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "user"
    return Path(tempfile.gettempdir()) / f"sst-cli-kernels-{user}"


def _usable(folder: Path, private: bool) -> bool:
    """Writable; and for a folder in the shared temp dir, ours alone, so nobody else can plant a library there."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return False
    if private and hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o022):
        return False
    return os.access(folder, os.W_OK)


_BUILD_NOTICES: list[Callable[[str], None]] = []


@contextmanager
def builds_said_to(say: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, a build of the kernel (seconds, once per machine and compiler) is announced through
    ``say`` before it starts: a first run otherwise paused without a word."""
    _BUILD_NOTICES.append(say)
    try:
        yield
    finally:
        _BUILD_NOTICES.remove(say)


@cache
def _library() -> _Library:
    compiler = _compiler()
    if compiler is None:
        return _Library(None, "no C compiler found (set CC, or install gcc or clang)")
    version = _version(compiler)
    identity = [SOURCE.read_text(), *compiler, version, _cpu_identity()]
    key = hashlib.sha256("\n".join(identity).encode()).hexdigest()
    name = f"cpu_attention-{key[:20]}{'.dll' if sys.platform == 'win32' else '.so'}"
    # A read-only home (containers, sandboxes) must not cost the kernel: one built there is used, else build in
    # the temp folder (only a private one: nobody else may plant a library in it).
    cache, temp = _cache_dir(), _temp_folder()
    writable = [folder for folder, private in ((cache, False), (temp, True)) if _usable(folder, private)]
    damaged = None
    for folder in dict.fromkeys([cache, *writable]):
        if (folder / name).exists():
            loaded = _checked_load(folder / name, version)
            if isinstance(loaded, _Library):
                return loaded
            damaged = damaged or loaded
    if not writable:
        return _Library(None, f"no writable folder to build the kernel in ({cache}, {temp})")
    target = writable[0] / name
    for say in _BUILD_NOTICES[-1:]:
        say(f"building sst-cli's CPU attention kernel with {_name(compiler)} (once per machine and compiler: seconds)")
    error = _compile(compiler, SOURCE, target)
    if error is not None:
        rebuilding = f" (rebuilding: {damaged})" if damaged else ""
        return _Library(None, f"compiling {SOURCE.name} with {_name(compiler)} failed: {error}{rebuilding}")
    loaded = _checked_load(target, version)
    return loaded if isinstance(loaded, _Library) else _Library(None, loaded)


def _checked_load(library: Path, version: str) -> _Library | str:
    """The loaded, self-tested library (or the self-test's verdict); a string says why the file itself is unfit
    and should be rebuilt: it is not the file its record describes, or it does not load."""
    with _guard(library):
        damage = _damage(library)
        if damage is not None:
            return damage
        try:
            lib = ctypes.CDLL(str(library))
            _declare(lib)
        except (OSError, AttributeError) as exc:
            return f"cannot load {library} ({exc})"
    built = _Library(lib, version, lib.sst_attention_vector(), lib.sst_attention_key_tile())
    error = _self_test(built)
    return built if error is None else _Library(None, error)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q.double() @ k.double().transpose(-2, -1), dim=-1) @ v.double()


def _self_test(lib: _Library) -> str | None:
    """A build that computes wrong numbers (an unusual compiler, a broken flag) must never be used."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(3, 2, 37, 20, generator=gen) for _ in range(2))  # 37 keys: a padded key tile
    v = torch.randn(3, 2, 37, 12, generator=gen)
    bias_q, bias_k = (torch.randn(2, 37, 5, generator=gen) for _ in range(2))
    full_q, full_k = (torch.cat([t, f.expand(3, -1, -1, -1)], dim=-1) for t, f in ((q, bias_q), (k, bias_k)))
    try:  # one thread: windows 0-1 share bias rows, window 2 adds the factors in its own scores
        errors = [
            (_run(lib, q, k, v)[..., :12].double() - _reference(q, k, v)).abs().max().item(),
            (_run(lib, q, k, v, (bias_q, bias_k), threads=1)[..., :12].double() - _reference(full_q, full_k, v))
            .abs()
            .max()
            .item(),
        ]
        rows = (torch.tensor([2, 0]), torch.tensor([36, 1, 20]))  # windows 2 and 0, three rows in any order
        kept = _run(lib, q, k, v, (bias_q, bias_k), groups=[rows])[rows[0][:, None], :, rows[1]][..., :12]
        expected = _reference(full_q, full_k, v)[rows[0][:, None], :, rows[1]]
        errors.append((kept.double() - expected).abs().max().item())
    except MemoryError:
        return "the CPU kernel could not allocate its scratch memory"
    if not max(errors) <= _SELF_TEST_TOLERANCE:
        return f"the compiled CPU kernel failed its self-test (max error {max(errors):.1e}); not used"
    return None


def kernel_problem() -> str | None:
    """Why the kernel cannot run here (a phrase), or None when it is built, loaded and checked."""
    return None if _library().handle is not None else _library().description


def kernel_description() -> str:
    """The compiler that built it, e.g. ``gcc 12.2.0``; or why the kernel is unavailable."""
    return _library().description


def kernel_vector() -> int:
    """Floats per vector of the build (8 with AVX2 or NEON, 16 with AVX-512): v's width is a multiple of it."""
    return _library().vector


def _packed(k: torch.Tensor, tiles: int, tile: int) -> torch.Tensor:
    """(..., tokens, C) -> (..., tiles, C, tile): keys ``tile`` at a time, channel-major; padding keys are zero."""
    m = k.shape[-2]
    keys = tiles * tile
    k = F.pad(k, (0, 0, 0, keys - m)) if keys != m else k
    return k.to(torch.float32).unflatten(-2, (tiles, tile)).transpose(-1, -2).contiguous()


def _run(
    lib: _Library,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: tuple[torch.Tensor, torch.Tensor] | None = None,
    threads: int | None = None,
    groups: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> torch.Tensor:
    b, h, n, d = q.shape
    m, dv = k.shape[-2], v.shape[-1]
    tiles = -(-m // lib.key_tile)
    width = -(-dv // lib.vector) * lib.vector
    q = q.to(torch.float32).contiguous()
    keys = _packed(k, tiles, lib.key_tile)
    values = v.to(torch.float32)
    if width != dv or tiles * lib.key_tile != m:  # zero channels and zero padding keys (finite: masked scores)
        values = F.pad(values, (0, width - dv, 0, tiles * lib.key_tile - m))
    values = values.contiguous()
    rank, bias_q, bias_k = 0, None, None
    if bias is not None:
        rank = bias[0].shape[-1]
        bias_q, bias_k = bias[0].to(torch.float32).contiguous(), _packed(bias[1], tiles, lib.key_tile)
    out = q.new_empty((b, h, n, width))
    assert lib.handle is not None
    for items, rows in [(None, None)] if groups is None else groups:
        items, rows = (None if t is None else t.to(torch.int64).contiguous() for t in (items, rows))
        status = lib.handle.sst_attention_rows(
            q.data_ptr(), keys.data_ptr(), values.data_ptr(),
            None if bias_q is None else bias_q.data_ptr(), None if bias_k is None else bias_k.data_ptr(),
            out.data_ptr(), b, h, n, m, d, rank, width,
            None if items is None else items.data_ptr(), 0 if items is None else items.numel(),
            None if rows is None else rows.data_ptr(), 0 if rows is None else rows.numel(),
            threads or torch.get_num_threads(),
        )  # fmt: skip
        if status != 0:
            raise MemoryError("the CPU attention kernel could not allocate its scratch memory")
    return out


@never_traced  # a foreign call on raw pointers
def cpu_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: tuple[torch.Tensor, torch.Tensor] | None = None,
    groups: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> torch.Tensor:
    """``softmax(q k^T [+ bias_q bias_k^T]) v`` in fp32, (B, heads, tokens, C) -> (B, heads, tokens, C_w).

    ``bias``: factors (heads, tokens, R) shared by the batch, whose product is added to the logits. The output's
    width ``C_w`` is v's rounded up to a multiple of ``kernel_vector()`` (the extra channels are zero); the
    caller slices. ``groups``: (batch items, query rows) pairs; only those rows are computed (read in place, no
    gathering copies) and the others are left unwritten. No autograd.
    """
    lib = _library()
    if lib.handle is None:
        raise RuntimeError(f"the CPU attention kernel is unavailable: {lib.description}")
    return _run(lib, q, k, v, bias, groups=groups)
