"""runtime.py's calls into psutil (RAM, usable cores), at whichever psutil is installed (CI: lowest and newest)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from sst_cli import runtime


def test_available_ram_is_a_plausible_byte_count() -> None:
    ram = runtime.available_ram()
    assert isinstance(ram, int) and 16 << 20 < ram < 1 << 50  # more than 16 MiB, less than a petabyte
    budget = runtime.memory_budget(torch.device("cpu"))
    assert abs(budget - ram * runtime.RAM_FRACTION) < 256 << 20  # RAM moves a little between the two readings


def test_cpu_name_counts_the_cores_this_process_may_use() -> None:
    text = runtime.device_name(torch.device("cpu"))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert text.endswith(f"({usable} cores available)")


def _cgroups(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[str, str]:
    """A /proc/self/cgroup and a cgroup mount with the given files (path under the mount -> text)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cgroup").write_text(membership)
    for name, text in files.items():
        (tmp_path / "mnt" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mnt" / name).write_text(text)
    return str(tmp_path / "cgroup"), str(tmp_path / "mnt")


def test_a_container_limit_bounds_the_memory_a_run_plans_with(tmp_path: Path) -> None:
    """psutil gives the host's RAM: in a container limited to 4 GiB on a 64 GiB host, tiles were planned for
    half the host's free memory and the result-size check passed what the container could not hold."""
    v2 = _cgroups(
        tmp_path / "v2", "0::/\n",
        {"memory.max": "4294967296\n", "memory.current": "1073741824\n", "memory.stat": "anon 5\ninactive_file 1024\n"},
    )  # fmt: skip
    assert runtime.cgroup_memory(*v2) == (4 << 30, (3 << 30) + 1024)  # file cache the kernel can drop is free
    nested = _cgroups(
        tmp_path / "nested", "0::/user.slice/run.scope\n",
        {"user.slice/memory.max": "2147483648", "user.slice/memory.current": "0",
         "user.slice/run.scope/memory.max": "max", "memory.max": "max"},
    )  # fmt: skip
    assert runtime.cgroup_memory(*nested) == (2 << 30, 2 << 30)  # a parent's limit binds its children
    v1 = _cgroups(
        tmp_path / "v1", "4:memory:/docker/abc\n3:cpu:/\n",
        {"memory/memory.limit_in_bytes": "1073741824", "memory/memory.usage_in_bytes": "536870912",
         "memory/memory.stat": "cache 9\ntotal_inactive_file 268435456\n"},
    )  # fmt: skip
    assert runtime.cgroup_memory(*v1) == (1 << 30, 768 << 20)  # the container's cgroup seen as the mount's root
    full_slice = _cgroups(
        tmp_path / "slice", "0::/slice/box\n",
        {"slice/memory.max": str(8 << 30), "slice/memory.current": str(7 << 30),
         "slice/box/memory.max": str(4 << 30), "slice/box/memory.current": "0"},
    )  # fmt: skip
    assert runtime.cgroup_memory(*full_slice) == (4 << 30, 1 << 30)  # the smallest limit, the least room: two levels
    unlimited = _cgroups(tmp_path / "none", "4:memory:/\n", {"memory/memory.limit_in_bytes": str(9223372036854771712)})
    assert runtime.cgroup_memory(*unlimited) is None
    assert runtime.cgroup_memory(str(tmp_path / "no-proc"), str(tmp_path)) is None  # not Linux


def test_available_and_total_ram_take_the_cgroup_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "cgroup_memory", lambda: (3 << 20, 1 << 20))
    assert runtime.total_ram() == 3 << 20 and runtime.available_ram() == 1 << 20
    monkeypatch.setattr(runtime, "cgroup_memory", lambda: None)
    assert runtime.total_ram() > 3 << 20


@pytest.mark.parametrize(
    "text",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
        "cuFFT error: CUFFT_ALLOC_FAILED",
    ],
)
def test_cuda_library_allocation_failures_are_out_of_memory(text: str) -> None:
    """They failed the file where the tile should have been halved: no "out of memory" in their words."""
    assert runtime.is_out_of_memory(RuntimeError(text))


@pytest.mark.parametrize(
    "text",
    [
        "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm(...)`",
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
    ],
)
def test_other_cuda_library_failures_are_not(text: str) -> None:
    assert not runtime.is_out_of_memory(RuntimeError(text))


def test_device_and_precision_labels_name_what_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` resolves to ``cuda`` without an index: a record of what ran names the GPU that did."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert runtime.device_label(torch.device("cuda")) == "cuda:1"
    assert runtime.device_label(torch.device("cuda:0")) == "cuda:0"
    assert runtime.device_label(torch.device("cpu")) == "cpu"
    assert runtime.precision_label(torch.float32) == "fp32" and runtime.precision_label(torch.bfloat16) == "bf16"
