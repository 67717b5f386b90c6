"""Attention kernels: which kernel runs is a runtime choice, separate from what the network computes.

Every kernel computes ``softmax(q @ k^T) @ v`` with softmax scale 1 (SST folds the scales into q
before concatenating the positional factors). Layouts are (batch, heads, tokens, channels); q and k
share a channel count that may differ from v's.

Policy (``plan_attention`` decides once per backend, device, dtype and head sizes; ``attend`` runs it):

* CUDA, ``auto``: FlashAttention-3 (``flash_attn_interface``, compute capability 9.x), else
  FlashAttention-2 (``flash-attn``, 8.0+), else PyTorch SDPA (which picks its flash / cuDNN /
  memory-efficient kernel). An fp32 network runs attention in bf16 through these kernels, as the
  authors do; everything else stays fp32. All widths are zero-padded to one multiple of 8.
* ``sdpa-flash`` / ``sdpa-cudnn`` force one PyTorch kernel (CUDA only), to compare them.
* ``math``: explicit matmul + softmax in the network's dtype; the exact fp32 path on any device.
* CPU (and other devices): SDPA in the network's dtype. Its fused CPU flash kernel needs one head
  size for q, k and v, so v is zero-padded to q's width; rounding to a multiple of 8 measured no faster.

A requested kernel that is missing or cannot run here falls back to the next one (fa3 -> flash-attn
-> sdpa; sdpa-flash / sdpa-cudnn -> sdpa) and the plan carries a one-line notice saying so.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache

import torch
import torch.nn.functional as F

from ..choices import BACKENDS
from ..errors import ConfigError

KERNEL_LINE_PREFIX = "attention kernel: "  # the descriptive line (front ends show it on request)
NOTICE_PREFIX = "attention: "  # a requested kernel fell back (front ends always show it)

_FALLBACK = {"fa3": "flash-attn", "flash-attn": "sdpa", "sdpa-flash": "sdpa", "sdpa-cudnn": "sdpa"}
_MAX_FLASH_HEAD = 256  # FlashAttention-2/3 head-size limit
_SDPA_CHOICES = {0: "math", 1: "flash", 2: "memory-efficient", 3: "cuDNN"}  # torch's SDPBackend values
_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}

# Windows per chunk in the math backend: bounds the (tokens x tokens) score matrices it materialises.
_MATH_CHUNK_ELEMENTS = 1 << 26


# ----------------------------------------------------------------------------- optional packages
@cache
def _optional_kernel(module: str, name: str) -> Callable | None:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, OSError, RuntimeError):  # RuntimeError: built for another CUDA/torch
        return None


def flash_attn_func() -> Callable | None:
    """FlashAttention-2 from the ``flash-attn`` package, if installed."""
    return _optional_kernel("flash_attn", "flash_attn_func")


def fa3_func() -> Callable | None:
    """FlashAttention-3 (Hopper) from ``flash_attn_interface``, if installed."""
    return _optional_kernel("flash_attn_interface", "flash_attn_func")


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def available_backends() -> list[str]:
    """Backends whose kernel can run in this environment, without falling back."""
    names = ["auto", "sdpa", "math"]
    if torch.cuda.is_available():
        names += ["sdpa-flash", "sdpa-cudnn"]
        if flash_attn_func() is not None:
            names.append("flash-attn")
        if fa3_func() is not None:
            names.append("fa3")
    return names


def check_backend(name: str) -> str:
    """Validate a backend name. A kernel that cannot run is not an error: it falls back with a notice."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return name


# ----------------------------------------------------------------------------- device facts
def _cuda_capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def _bf16_kernels(device: torch.device) -> bool:
    """Ampere or newer: bf16 flash kernels exist (older GPUs emulate bf16, slowly)."""
    try:
        return _cuda_capability(device)[0] >= 8
    except (RuntimeError, AssertionError):
        return False


def _sdpa_params(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
    cls = torch.backends.cuda.SDPAParams
    try:
        return cls(q, k, v, None, 0.0, False, False)  # torch >= 2.5: (..., is_causal, enable_gqa)
    except TypeError:
        return cls(q, k, v, None, 0.0, False)  # type: ignore[call-arg]


def _probe(device: torch.device, dtype: torch.dtype, width: int) -> tuple[torch.Tensor, ...]:
    """Tiny tensors with the plan's layout, for asking PyTorch what its own dispatcher would do."""
    return tuple(torch.empty(1, 1, 64, width, device=device, dtype=dtype) for _ in range(3))


def _sdpa_check(kernel: str, device: torch.device, dtype: torch.dtype, width: int) -> bool | None:
    """PyTorch's own verdict on a forced SDPA kernel; None when this torch cannot tell."""
    check = {
        "sdpa-flash": getattr(torch.backends.cuda, "can_use_flash_attention", None),
        "sdpa-cudnn": getattr(torch.backends.cuda, "can_use_cudnn_attention", None),
    }[kernel]
    if check is None:
        return None
    try:
        return bool(check(_sdpa_params(*_probe(device, dtype, width)), False))
    except (RuntimeError, TypeError, AttributeError):
        return None


def _sdpa_choice(device: torch.device, dtype: torch.dtype, qk: int, v: int) -> str | None:
    """The kernel PyTorch's SDPA dispatcher picks for these shapes (private API, hence guarded)."""
    try:
        q, k, _ = _probe(device, dtype, qk)
        vv = torch.empty(1, 1, 64, v, device=device, dtype=dtype)
        return _SDPA_CHOICES.get(int(torch._fused_sdp_choice(q, k, vv, scale=1.0)))
    except Exception:  # private and version-dependent: any failure just means "unknown"
        return None


def _flash_probe(kernel: Callable, device: torch.device, width: int) -> str | None:
    """Run a FlashAttention kernel once on tiny bf16 tensors; builds differ in the head sizes they support."""
    try:
        t = torch.zeros(1, 16, 1, width, device=device, dtype=torch.bfloat16)
        kernel(t, t, t, softmax_scale=1.0)
    except Exception as exc:  # whatever the build raises, this kernel cannot serve these shapes here
        return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:80]}"
    return None


def _forced_sdpa_backend(kernel: str) -> object | None:
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return None
    name = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION"}[kernel]
    return getattr(SDPBackend, name, None)


# ----------------------------------------------------------------------------- the plan
def _round8(width: int) -> int:
    return -(-width // 8) * 8


@dataclass(frozen=True)
class AttentionPlan:
    """Which kernel runs for one (backend, device, dtype, head sizes), and how its inputs are laid out.

    ``qk``/``v`` are the network's head sizes, ``qk_width``/``v_width`` what the kernel receives (zero
    channels appended), ``dtype`` what it computes in. ``notice`` is set when the request fell back.
    """

    requested: str
    kernel: str
    device_type: str
    network_dtype: torch.dtype
    dtype: torch.dtype
    qk: int
    v: int
    qk_width: int
    v_width: int
    sdpa_choice: str | None = None
    notice: str | None = None

    @property
    def label(self) -> str:
        """One phrase, e.g. ``PyTorch SDPA (flash kernel, bf16 inside an fp32 network)``."""
        precision = _DTYPE_NAMES.get(self.dtype, str(self.dtype))
        if self.dtype != self.network_dtype:
            precision += f" inside an {_DTYPE_NAMES.get(self.network_dtype, str(self.network_dtype))} network"
        if self.kernel == "fa3":
            return f"FlashAttention-3 ({precision})"
        if self.kernel == "flash-attn":
            version = _package_version("flash-attn")
            return f"FlashAttention-2 (flash-attn{' ' + version if version else ''}, {precision})"
        if self.kernel == "math":
            exact = ", exact" if self.dtype in (torch.float32, torch.float64) else ""
            return f"math attention (matmul + softmax, {precision}{exact})"
        if self.kernel in ("sdpa-flash", "sdpa-cudnn"):
            what = "flash" if self.kernel == "sdpa-flash" else "cuDNN"
            return f"PyTorch SDPA ({what} kernel, forced, {precision})"
        where = "CPU " if self.device_type == "cpu" else ""
        if self.sdpa_choice is None:
            return f"PyTorch SDPA (kernel chosen by PyTorch, {precision})"
        return f"PyTorch SDPA ({where}{self.sdpa_choice} kernel, {precision})"

    @property
    def sizes(self) -> str:
        """Head sizes q,k/v as given, and as the kernel receives them when zero-padded."""
        given = f"{self.qk}/{self.v}"
        if (self.qk_width, self.v_width) == (self.qk, self.v):
            return given
        return f"{given} -> {self.qk_width}/{self.v_width}"


def _unavailable(kernel: str, device: torch.device, dtype: torch.dtype, qk: int, v: int) -> str | None:
    """Why ``kernel`` cannot run here (a phrase for the notice), or None when it can."""
    if kernel in ("sdpa", "math"):
        return None
    if kernel in ("fa3", "flash-attn"):
        function = (fa3_func if kernel == "fa3" else flash_attn_func)()
        if function is None:
            return "fa3 not installed (flash_attn_interface)" if kernel == "fa3" else "flash-attn not installed"
        if device.type != "cuda":
            return f"{kernel} needs a CUDA GPU"
        major, minor = _cuda_capability(device)
        if kernel == "fa3" and major != 9:
            return f"fa3 needs a Hopper GPU (compute capability 9.x), this one is {major}.{minor}"
        if kernel == "flash-attn" and major < 8:
            return f"flash-attn needs compute capability 8.0 or newer, this GPU is {major}.{minor}"
        width = _round8(max(qk, v))
        if width > _MAX_FLASH_HEAD:
            return f"{kernel} supports head sizes up to {_MAX_FLASH_HEAD}, not {width}"
        error = _flash_probe(function, device, width)
        return None if error is None else f"{kernel} failed on head size {width} ({error})"
    # sdpa-flash / sdpa-cudnn
    if device.type != "cuda":
        return f"{kernel} needs a CUDA GPU"
    if _forced_sdpa_backend(kernel) is None:
        return f"{kernel} needs a newer PyTorch"
    compute = _compute_dtype(kernel, device, dtype)
    if _sdpa_check(kernel, device, compute, _round8(max(qk, v))) is False:
        name = _DTYPE_NAMES.get(compute, str(compute))
        return f"PyTorch cannot run its {kernel[5:]} kernel here (head size {_round8(max(qk, v))}, {name})"
    return None


def _compute_dtype(kernel: str, device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The network's dtype, except on CUDA where an fp32 network attends in bf16 (the authors' choice)."""
    if kernel == "math" or device.type != "cuda" or dtype in (torch.float16, torch.bfloat16):
        return dtype
    return torch.bfloat16 if _bf16_kernels(device) else dtype


def _widths(kernel: str, device: torch.device, qk: int, v: int) -> tuple[int, int]:
    """Zero-padded widths, only where the kernel needs them."""
    if kernel == "math":
        return qk, v
    if device.type == "cuda":  # flash kernels: one head size, a multiple of 8
        width = _round8(max(qk, v))
        return width, width
    width = max(qk, v)  # CPU flash kernel: equal head sizes; multiples of 8 measured no faster
    return width, width


def _candidates(backend: str, device: torch.device) -> list[str]:
    if backend == "auto":
        return ["fa3", "flash-attn", "sdpa"] if device.type == "cuda" else ["sdpa"]
    chain = [backend]
    while chain[-1] in _FALLBACK:
        chain.append(_FALLBACK[chain[-1]])
    return chain


@torch.compiler.disable  # asks PyTorch's dispatcher and imports packages: run eagerly, never traced
def _resolve(backend: str, device: torch.device, dtype: torch.dtype, qk: int, v: int) -> AttentionPlan:
    reason = None
    for kernel in _candidates(backend, device):
        why = _unavailable(kernel, device, dtype, qk, v)
        if why is not None:
            reason = reason or why
            continue
        compute = _compute_dtype(kernel, device, dtype)
        qk_width, v_width = _widths(kernel, device, qk, v)
        choice = _sdpa_choice(device, compute, qk_width, v_width) if kernel == "sdpa" else None
        plan = AttentionPlan(backend, kernel, device.type, dtype, compute, qk, v, qk_width, v_width, choice)
        if reason is not None and backend != "auto":
            plan = replace(plan, notice=f"{NOTICE_PREFIX}{reason}; using {plan.label}")
        return plan
    raise AssertionError("sdpa and math always run")  # pragma: no cover


_PLANS: dict[tuple, AttentionPlan] = {}


def plan_attention(backend: str, device: torch.device | str, dtype: torch.dtype, qk: int, v: int) -> AttentionPlan:
    """The kernel that runs for these arguments (cached: the forward pass asks on every call)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    key = (backend, device, dtype, qk, v)
    plan = _PLANS.get(key)
    if plan is None:
        check_backend(backend)
        plan = _PLANS[key] = _resolve(backend, device, dtype, qk, v)
    return plan


def reset_attention_plans() -> None:
    """Forget cached plans (after installing a package, or in tests that fake one)."""
    _PLANS.clear()
    _optional_kernel.cache_clear()


@dataclass(frozen=True)
class AttentionReport:
    """What to tell the user: fallback notices (always) and one descriptive line (on request)."""

    line: str
    notices: tuple[str, ...]
    plans: tuple[AttentionPlan, ...]


def describe_attention(
    backend: str, device: torch.device | str, dtype: torch.dtype, head_sizes: Iterable[tuple[int, int]]
) -> AttentionReport:
    """One line saying which kernel runs for a network's (q/k, v) head sizes, plus any fallback notices."""
    plans = tuple(plan_attention(backend, device, dtype, qk, v) for qk, v in sorted(set(head_sizes)))
    groups: dict[str, list[AttentionPlan]] = {}
    for plan in plans:
        groups.setdefault(plan.label, []).append(plan)
    parts = [f"{label}; head sizes q,k/v {', '.join(p.sizes for p in group)}" for label, group in groups.items()]
    notices = tuple(dict.fromkeys(p.notice for p in plans if p.notice))
    return AttentionReport(KERNEL_LINE_PREFIX + " | ".join(parts), notices, plans)


# ----------------------------------------------------------------------------- kernels
def _pad_channels(t: torch.Tensor, size: int) -> torch.Tensor:
    extra = size - t.shape[-1]
    return F.pad(t, (0, extra)) if extra > 0 else t


def _math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    tokens = q.shape[-2]
    per_item = q.shape[1] * tokens * tokens
    step = max(1, _MATH_CHUNK_ELEMENTS // per_item)
    out = []
    for start in range(0, q.shape[0], step):
        sl = slice(start, start + step)
        scores = torch.matmul(q[sl], k[sl].transpose(-2, -1)).softmax(dim=-1)
        out.append(torch.matmul(scores, v[sl]))
    return torch.cat(out)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, forced: object | None = None) -> torch.Tensor:
    if forced is None:
        return F.scaled_dot_product_attention(q, k, v, scale=1.0)
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(forced):  # type: ignore[arg-type]
        return F.scaled_dot_product_attention(q, k, v, scale=1.0)


def _flash(kernel: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # flash-attn takes (batch, tokens, heads, channels); a transposed view is fine (last dim contiguous).
    out = kernel(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=1.0)
    if isinstance(out, tuple):  # FlashAttention-3 may also return the log-sum-exp
        out = out[0]
    return out.transpose(1, 2)


def run_plan(plan: AttentionPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Run a plan's kernel; inputs narrower than the plan's widths, or in another dtype, are adapted here.

    Returns (B, heads, tokens, ``plan.v_width``) in ``plan.dtype``: the caller slices and casts back.
    """
    q, k = (_pad_channels(t, plan.qk_width).to(plan.dtype) for t in (q, k))
    v = _pad_channels(v, plan.v_width).to(plan.dtype)
    if plan.kernel == "math":
        return _math(q, k, v)
    if plan.kernel == "sdpa":
        return _sdpa(q, k, v)
    if plan.kernel in ("sdpa-flash", "sdpa-cudnn"):
        return _sdpa(q, k, v, _forced_sdpa_backend(plan.kernel))
    kernel = fa3_func() if plan.kernel == "fa3" else flash_attn_func()
    if kernel is None:  # pragma: no cover - the plan checked it
        raise ConfigError(f"attention kernel {plan.kernel!r} disappeared after planning")
    return _flash(kernel, q, k, v)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """``softmax(q k^T) v`` with scale 1 on (B, heads, tokens, C) tensors, through the planned kernel."""
    dv = v.shape[-1]
    plan = plan_attention(backend, q.device, q.dtype, q.shape[-1], dv)
    return run_plan(plan, q, k, v)[..., :dv].to(q.dtype)
