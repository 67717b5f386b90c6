"""Where a network runs: device, precision, what fp32 means, how much memory a tile may use, out-of-memory.

One place for these facts, so that upscaling, evaluation, benchmarks and training agree, and so that the
platform differences (CUDA, Apple's MPS, CPU memory on Linux, macOS and Windows) live nowhere else.
"""

from __future__ import annotations

import os
import platform
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

import torch

from .checks import check_choice, check_device_name, no_cuda, no_mps
from .choices import DEVICE_HELP, PRECISIONS
from .errors import ConfigError

GPU_MEMORY_FRACTION = 0.7  # of free device memory, for one tile's activations
RAM_FRACTION = 0.5  # of available RAM (the output canvas and the image also live there)

# Substrings of allocator errors that mean "out of memory" on each platform.
_OOM_MESSAGES = (
    "out of memory",  # CUDA, MPS ("MPS backend out of memory")
    "can't allocate memory",  # CPU allocator on Linux / macOS
    "not enough memory",  # CPU allocator on Windows ("DefaultCPUAllocator: not enough memory")
    # CUDA libraries that allocate their own workspace report it through their status names, without the words
    # "out of memory" ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`").
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",  # cuDNN 8
    "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",  # cuDNN 9's names for the same
    "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
    "CUFFT_ALLOC_FAILED",
)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def device_text(device: str | torch.device) -> str:
    """A device as options hold it (``"cuda:1"``): a ``torch.device`` is taken by its name, as an API caller
    would expect; anything else is a ConfigError (``device=0`` met "'int' object has no attribute 'strip'")."""
    if isinstance(device, torch.device):
        return str(device)
    if not isinstance(device, str):
        raise ConfigError(f"device must be a name such as 'cpu' or 'cuda:0', or a torch.device; got {device!r}")
    return device


def resolve_device(name: str | torch.device, *, cli: bool = False) -> torch.device:
    """``auto`` = the first CUDA GPU, else Apple's MPS, else the CPU; anything unusable here is a ConfigError.
    ``cli``: its suggestions name ``--device cpu``, not the keyword ``device='cpu'``."""
    name = device_text(name)
    text = name.strip().lower()
    check_device_name(text, cli=cli)  # what the platform never has, said without asking PyTorch
    if text == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if _mps_available() else "cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ConfigError(f"unknown device {name!r}; use {DEVICE_HELP}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise no_cuda(name, cli)
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError(
                f"device {name!r} does not exist: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}"
            )
        return device
    if device.type == "mps":
        if not _mps_available():
            raise no_mps(name, cli)
        return device
    raise ConfigError(f"device {name!r} cannot run sst-cli's networks here; use {DEVICE_HELP}")


def resolve_precision(precision: str, device: torch.device) -> torch.dtype:
    """``auto``: bfloat16 on CUDA GPUs that support it, float32 elsewhere (CPU and MPS: exact and safe)."""
    precision = check_choice(precision, PRECISIONS, "precision")
    if precision == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    return torch.bfloat16 if precision == "bf16" else torch.float32


_tf32_lock = threading.Lock()
_tf32_users = 0
_tf32_saved = (False, False)


@contextmanager
def fp32_mode(device: torch.device, dtype: torch.dtype, *, allow_tf32: bool = False) -> Iterator[None]:
    """On CUDA, fp32 means fp32: TF32 convolutions and matmuls (errors ~1e-3) are off while the block runs,
    unless ``allow_tf32``. The flags are process-wide: blocks running at once in several threads share one
    setting (the first one's), and the caller's is restored when the last of them ends."""
    global _tf32_users, _tf32_saved
    if device.type != "cuda" or dtype != torch.float32:
        yield
        return
    with _tf32_lock:
        if _tf32_users == 0:
            _tf32_saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        _tf32_users += 1
    try:
        yield
    finally:
        with _tf32_lock:
            _tf32_users -= 1
            if _tf32_users == 0:
                torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = _tf32_saved


def available_ram() -> int:
    """Bytes of RAM available to new allocations (psutil: Linux, macOS and Windows alike), within this process's
    cgroup limit where one is set (a container's ``--memory``, a systemd slice): psutil sees only the host's."""
    import psutil

    available = int(psutil.virtual_memory().available)
    cgroup = cgroup_memory()
    return available if cgroup is None else min(available, cgroup[1])


def total_ram() -> int:
    """Bytes of RAM this process may use in all: the machine's, or its cgroup's limit where that is lower."""
    import psutil

    total = int(psutil.virtual_memory().total)
    cgroup = cgroup_memory()
    return total if cgroup is None else min(total, cgroup[0])


def cgroup_memory(proc: str = "/proc/self/cgroup", mount: str = "/sys/fs/cgroup") -> tuple[int, int] | None:
    """(smallest limit, least room left: a limit less the bytes in use, reclaimable file cache not counted) among
    the memory limits of this process's cgroup and its ancestors (cgroup v2, or v1's memory controller), or None
    where no limit is set or this is not Linux. The two may come from different levels (a full slice around an
    empty container). A container's processes usually see their own cgroup as the mount's root."""
    try:
        with open(proc, encoding="utf-8") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return None
    for _, controllers, path in lines:
        if controllers == "":  # v2: one hierarchy, its files in the cgroup's own folder
            found = _tightest(mount, path, "memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            found = _tightest(
                os.path.join(mount, "memory"), path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                "total_inactive_file",
            )  # fmt: skip
        else:
            continue
        if found is not None:
            return found
    return None


def _tightest(root: str, path: str, limit_file: str, usage_file: str, cache_key: str) -> tuple[int, int] | None:
    """``cgroup_memory`` for one hierarchy: each folder from the cgroup up to the mount's root."""
    limits: list[int] = []
    rooms: list[int] = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        folder = os.path.join(root, *parts[:depth])
        limit = _read_int(os.path.join(folder, limit_file))
        if limit is None or limit >= 2**60:  # "max" (v2) or v1's page-rounded LONG_MAX: no limit here
            continue
        used = _read_int(os.path.join(folder, usage_file)) or 0
        cache = _read_stat(os.path.join(folder, "memory.stat"), cache_key)
        limits.append(limit)
        rooms.append(max(0, limit - max(0, used - cache)))
    return (min(limits), min(rooms)) if limits else None


def _read_int(name: str) -> int | None:
    try:
        with open(name, encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # missing, or "max"
        return None


def _read_stat(name: str, key: str) -> int:
    try:
        with open(name, encoding="utf-8") as f:
            return next((int(value) for k, value in (line.split() for line in f if " " in line) if k == key), 0)
    except (OSError, ValueError):
        return 0


def memory_budget(device: torch.device) -> int:
    """Bytes the activations of one tile may use: a safe fraction of free device memory or available RAM."""
    if device.type == "cuda":
        return int(free_memory(device) * GPU_MEMORY_FRACTION)
    if device.type == "mps":
        limit = torch.mps.recommended_max_memory() - torch.mps.current_allocated_memory()
        return int(min(limit * GPU_MEMORY_FRACTION, available_ram() * RAM_FRACTION))
    return int(available_ram() * RAM_FRACTION)


def free_memory(device: torch.device) -> int:
    """Bytes new tensors on ``device`` may take at most, before it runs out (a GPU) or swaps (RAM)."""
    if device.type == "cuda":
        # Memory PyTorch's caching allocator holds but no tensor uses is free to us, though not to the driver:
        # without it, a plan made after a warm-up (or after the previous image) saw a nearly full card and
        # cut a 3840x2160 x4 input into 64 px tiles on an 80 GB H100 (418 MiB used, 156 s).
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + max(0, cached))
    if device.type == "mps":
        # Unified memory: the device's recommended working set, less what PyTorch already holds, bounded by RAM.
        limit = torch.mps.recommended_max_memory() - torch.mps.current_allocated_memory()
        return int(max(0, min(limit, available_ram())))
    return available_ram()


def is_out_of_memory(exc: BaseException) -> bool:
    """True for allocator failures of any device (CUDA and its libraries, MPS, the CPU on Linux, macOS or Windows)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MESSAGES)


def allocation_tried(exc: BaseException) -> str:
    """What the failed allocation asked for, from the allocator's message ("2.00 GiB"), or "" if it does not say.
    CUDA's message runs to several lines of advice on fragmentation that a user of sst-cli cannot act on."""
    found = re.search(r"[Tt]ried to allocate (\d+) bytes", str(exc))
    if found:
        return f"{int(found.group(1)) / 2**30:,.2f} GiB"
    found = re.search(r"[Tt]ried to allocate ([\d.]+ ?[KMGTP]i?B)", str(exc))
    return found.group(1) if found else ""


def release_memory(device: torch.device) -> None:
    """Give cached device memory back after an out-of-memory error, before trying a smaller tile."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (timing needs it; the CPU has nothing queued)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_label(device: torch.device) -> str:
    """The device as ``--device`` names it, GPU index included (``cuda:0``, not ``cuda``): which one ran."""
    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


_DTYPE_LABELS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}


def precision_label(dtype: torch.dtype) -> str:
    """A dtype as ``--precision`` names it (``fp32``, ``bf16``): one spelling in every report and message."""
    return _DTYPE_LABELS.get(dtype, str(dtype).removeprefix("torch."))


def device_name(device: torch.device) -> str:
    """GPU name and compute capability, or the CPU model and the cores this process may use."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
    if device.type == "mps":
        return f"Apple GPU (MPS, {platform.machine()})"
    import psutil

    name = platform.processor() or platform.machine() or "CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:  # Linux: the marketing name
            name = next((line.split(":", 1)[1].strip() for line in fh if line.lower().startswith("model name")), name)
    except OSError:
        pass
    affinity = getattr(psutil.Process(), "cpu_affinity", None)  # absent on macOS
    cores = len(affinity()) if affinity is not None else psutil.cpu_count()
    return f"{name} ({cores} cores available)"


def package_version() -> str:
    """sst-cli's installed version, or a marker when running from a source tree that is not installed."""
    try:
        return version("sst-cli")
    except PackageNotFoundError:
        return "0.0.0+unknown"
