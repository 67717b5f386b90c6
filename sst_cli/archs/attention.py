"""Attention kernels: which kernel runs is a runtime choice, separate from what the network computes.

Every kernel computes ``softmax(q @ k^T) @ v`` with softmax scale 1 (SST folds the scales into q
before concatenating the positional factors). Layouts are (batch, heads, tokens, channels); q and k
share a channel count that may differ from v's.

Policy (``plan_attention`` decides once per backend, device, dtype and head sizes; ``attend`` runs it):

* CUDA, ``auto``: FlashAttention-3 (``flash_attn_interface``, compute capability 9.x), else
  FlashAttention-2 (``flash-attn``, 8.0+), else PyTorch SDPA (which picks its flash / cuDNN /
  memory-efficient kernel). An fp32 network runs attention in bf16 through these kernels, as the
  authors do; everything else stays fp32. All widths are zero-padded to one multiple of 8.
* ``fa4``: FlashAttention-4 (``flash-attn-4``, CuTe DSL, compiled on first use; compute capability 8.0+),
  on request only until GPU measurements say where ``auto`` should prefer it. It takes q/k and v of
  different head sizes, so v is padded only to a multiple of 8, not to q's width.
* ``sdpa-flash`` / ``sdpa-cudnn`` force one PyTorch kernel (CUDA only), to compare them.
* ``math``: explicit matmul + softmax in the network's dtype; the exact fp32 path on any device.
* CPU (and other devices): SDPA in the network's dtype. Its fused CPU flash kernel needs one head
  size for q, k and v, so v is zero-padded to q's width; rounding to a multiple of 8 measured no faster.
* CPU, ``auto``, fp32: ``native``, sst-cli's own kernel (``cpu_kernel.py``: C compiled on first use; q/k and
  v of different widths; the RIB product computed once for a group of windows; 1.5-2.1x faster than padded
  SDPA per call). Where it cannot be built (no C compiler), for bf16, and under autograd: the choices below.
* CPU, ``auto``, when the caller declares that the last ``rank`` q/k channels are low-rank factors
  shared by every batch item (SST's RIB: ``q = [q_c, p_q]``, ``k = [k_c, p_k]``): ``sdpa-bias``. The
  logits ``q_c k_c^T + p_q p_k^T`` are computed as SDPA over the content channels only, with the product
  of the factors as an additive float mask, built once per query block and shared by all windows. The
  fused kernel then multiplies D channels twice instead of D+R twice (no zero v channels, no positional
  channels per window): exact in fp32, 1.3-1.7x faster attention on the CPU (benchmarks/RESULTS.md).

Callers that discard some query rows' output (SST's layers crop what padding to a window multiple added) may
leave them out: ``run_plan_rows`` computes listed (batch item, row) groups only, over all keys. ``native`` reads
the listed rows in place; other kernels get each group's copies. Done where ``plan.drops_rows`` (the CPU).

Callers that can pass the factors separately plan with ``plan_attention(..., rank=R)`` and give the
factors to ``run_plan(..., bias=(p_q, p_k))``; a plan that concatenates (every other kernel) does it there.

A requested kernel that is missing or cannot run here falls back to the next one (fa4 -> fa3 -> flash-attn
-> sdpa; sdpa-flash / sdpa-cudnn -> sdpa; native -> what ``auto`` runs without it on the CPU, sdpa-bias -> sdpa
elsewhere) and the plan carries a one-line notice saying so.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache

import torch
import torch.nn.functional as F

from ..checks import check_choice
from ..choices import BACKENDS
from ..errors import ConfigError
from ..runtime import precision_label
from .cpu_kernel import cpu_attention, kernel_description, kernel_problem, kernel_vector
from .tracing import never_traced

KERNEL_LINE_PREFIX = "attention kernel: "  # the descriptive line (front ends show it on request)
NOTICE_PREFIX = "attention: "  # a requested kernel fell back (front ends always show it)

_FALLBACK = {
    "fa4": "fa3",
    "fa3": "flash-attn",
    "flash-attn": "sdpa",
    "sdpa-flash": "sdpa",
    "sdpa-cudnn": "sdpa",
    "sdpa-bias": "sdpa",
    "native": "sdpa-bias",
}
_MAX_FLASH_HEAD = 256  # FlashAttention-2/3 head-size limit
_SDPA_CHOICES = {0: "math", 1: "flash", 2: "memory-efficient", 3: "cuDNN"}  # torch's SDPBackend values

# Windows per chunk in the math backend: bounds the (tokens x tokens) score matrices it materialises.
_MATH_CHUNK_ELEMENTS = 1 << 26
# sdpa-bias: fp32 elements of the (heads, query rows, keys) bias built per SDPA call (8 MiB: it stays in
# the last-level cache while every window of the call reads it).
_BIAS_CHUNK_ELEMENTS = 1 << 21
_BIAS_ROW_MULTIPLE = 64  # query rows per call: a multiple of the CPU flash kernel's query block
_BIAS_MIN_BATCH = 2  # fewer windows than this: append the factors (measured 10% faster for one window)
# More keys than this (SST's 96-px windows): append the factors. Per-call A/B on this CPU (3 heads, 16 content
# channels, rank 24), sdpa-bias against padding at 2304 / 4096 / 9216 tokens: 1 thread 1.30x / 1.19x / 0.95x,
# 2 threads 1.02x / 1.01x / 0.90x.
_BIAS_MAX_TOKENS = 4096
_BIAS_MAX_CONTENT_FRACTION = 0.5  # auto on the CPU: sdpa-bias only where content width <= this x q/k width


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


def fa4_func() -> Callable | None:
    """FlashAttention-4 (CuTe DSL) from the ``flash-attn-4`` wheel, if installed."""
    return _optional_kernel("flash_attn.cute", "flash_attn_func")


_FLASH_MISSING = {
    "flash-attn": "flash-attn not installed",
    "fa3": "fa3 not installed (flash_attn_interface)",
    "fa4": "fa4 not installed (flash-attn-4)",
}


def _flash_func(kernel: str) -> Callable | None:
    return {"flash-attn": flash_attn_func, "fa3": fa3_func, "fa4": fa4_func}[kernel]()


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def available_backends() -> list[str]:
    """Backends whose kernel can run in this environment, without falling back."""
    names = ["auto", "sdpa", "sdpa-bias", "math"]
    if kernel_problem() is None:
        names.append("native")
    if torch.cuda.is_available():
        names += ["sdpa-flash", "sdpa-cudnn"]
        if flash_attn_func() is not None:
            names.append("flash-attn")
        if fa3_func() is not None:
            names.append("fa3")
        if fa4_func() is not None:
            names.append("fa4")
    return names


def check_backend(name: str) -> str:
    """Validate a backend name. A kernel that cannot run is not an error: it falls back with a notice."""
    return check_choice(name, BACKENDS, "attention backend")


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
    return _sdpa_masked_choice(device, dtype, qk, v, masked=False)


def _sdpa_masked_choice(device: torch.device, dtype: torch.dtype, qk: int, v: int, masked: bool = True) -> str | None:
    """The same, with an additive float mask broadcast over the batch (what ``sdpa-bias`` passes)."""
    try:
        q, k, _ = _probe(device, dtype, qk)
        vv = torch.empty(1, 1, 64, v, device=device, dtype=dtype)
        mask = torch.empty(1, 1, 64, 64, device=device, dtype=_bias_dtype(device, dtype)) if masked else None
        return _SDPA_CHOICES.get(int(torch._fused_sdp_choice(q, k, vv, attn_mask=mask, scale=1.0)))
    except Exception:  # private and version-dependent: any failure just means "unknown"
        return None


def _flash_probe(kernel: Callable, device: torch.device, width: int, v_width: int | None = None) -> str | None:
    """Run a FlashAttention kernel once on tiny bf16 tensors; builds differ in the head sizes they support."""
    try:
        t = torch.zeros(1, 16, 1, width, device=device, dtype=torch.bfloat16)
        v = t if v_width in (None, width) else torch.zeros(1, 16, 1, v_width, device=device, dtype=torch.bfloat16)
        kernel(t, t, v, softmax_scale=1.0)
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
    ``rank`` > 0: the kernel takes the last ``rank`` q/k channels separately, as factors of an additive
    bias (``run_plan(..., bias=...)``); ``qk_width`` is then the width of the content channels it receives.
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
    rank: int = 0

    @property
    def label(self) -> str:
        """One phrase, e.g. ``PyTorch SDPA (flash kernel, bf16 inside an fp32 network)``."""
        precision = precision_label(self.dtype)
        if self.dtype != self.network_dtype:
            precision += f" inside an {precision_label(self.network_dtype)} network"
        if self.kernel == "fa3":
            return f"FlashAttention-3 ({precision})"
        if self.kernel == "fa4":
            version = _package_version("flash-attn-4")
            return f"FlashAttention-4 (flash-attn-4{' ' + version if version else ''}, {precision})"
        if self.kernel == "flash-attn":
            version = _package_version("flash-attn")
            return f"FlashAttention-2 (flash-attn{' ' + version if version else ''}, {precision})"
        if self.kernel == "native":
            built = f"built by {kernel_description()}, {kernel_vector()}-float vectors"
            return f"sst-cli CPU kernel (C, {built}, {precision})"
        if self.kernel == "math":
            exact = ", exact" if self.dtype in (torch.float32, torch.float64) else ""
            return f"math attention (matmul + softmax, {precision}{exact})"
        if self.kernel in ("sdpa-flash", "sdpa-cudnn"):
            what = "flash" if self.kernel == "sdpa-flash" else "cuDNN"
            return f"PyTorch SDPA ({what} kernel, forced, {precision})"
        where = "CPU " if self.device_type == "cpu" else ""
        if self.kernel == "sdpa-bias":
            choice = f"{where}{self.sdpa_choice} kernel" if self.sdpa_choice else "kernel chosen by PyTorch"
            return f"PyTorch SDPA ({choice}, {precision}, positional factors as a bias per query block)"
        if self.sdpa_choice is None:
            return f"PyTorch SDPA (kernel chosen by PyTorch, {precision})"
        return f"PyTorch SDPA ({where}{self.sdpa_choice} kernel, {precision})"

    @property
    def drops_rows(self) -> bool:
        """Whether callers should leave out query rows whose output they discard (``run_plan_rows``).

        On the CPU the attention itself dominates and the gathering copies are cheap; on CUDA those copies
        are the traffic the fused path avoids, and nobody has measured whether they pay there yet.
        """
        return self.device_type == "cpu"

    @property
    def sizes(self) -> str:
        """Head sizes q,k/v as given, and as the kernel receives them when zero-padded."""
        given = f"{self.qk}/{self.v}"
        if self.kernel == "native":  # takes the factors separately but attends over all q/k channels
            return given if self.v_width == self.v else f"{given} -> {self.qk}/{self.v_width}"
        if self.rank:
            return f"{given} -> {self.qk_width}/{self.v_width} + rank-{self.rank} bias"
        if (self.qk_width, self.v_width) == (self.qk, self.v):
            return given
        return f"{given} -> {self.qk_width}/{self.v_width}"


def _unavailable(kernel: str, device: torch.device, dtype: torch.dtype, qk: int, v: int, rank: int = 0) -> str | None:
    """Why ``kernel`` cannot run here (a phrase for the notice), or None when it can."""
    if kernel in ("sdpa", "math"):
        return None
    if kernel == "native":
        if device.type != "cpu":
            return "native is a CPU kernel"
        if dtype != torch.float32:
            return f"native computes in fp32 only, not {precision_label(dtype)}"
        problem = kernel_problem()
        return None if problem is None else f"native unavailable: {problem}"
    if kernel == "sdpa-bias":
        return None if 0 < rank < qk else "sdpa-bias needs q/k channels that are shared low-rank factors"
    if kernel in _FLASH_MISSING:
        function = _flash_func(kernel)
        if function is None:
            return _FLASH_MISSING[kernel]
        if device.type != "cuda":
            return f"{kernel} needs a CUDA GPU"
        major, minor = _cuda_capability(device)
        if kernel == "fa3" and major != 9:
            return f"fa3 needs a Hopper GPU (compute capability 9.x), this one is {major}.{minor}"
        if kernel in ("flash-attn", "fa4") and major < 8:
            return f"{kernel} needs compute capability 8.0 or newer, this GPU is {major}.{minor}"
        width, v_width = _widths(kernel, device, qk, v)
        if max(width, v_width) > _MAX_FLASH_HEAD:
            return f"{kernel} supports head sizes up to {_MAX_FLASH_HEAD}, not {max(width, v_width)}"
        error = _flash_probe(function, device, width, v_width)
        sizes = str(width) if width == v_width else f"{width}/{v_width}"
        return None if error is None else f"{kernel} failed on head size {sizes} ({error})"
    # sdpa-flash / sdpa-cudnn
    if device.type != "cuda":
        return f"{kernel} needs a CUDA GPU"
    if _forced_sdpa_backend(kernel) is None:
        return f"{kernel} needs a newer PyTorch"
    compute = _compute_dtype(kernel, device, dtype)
    if _sdpa_check(kernel, device, compute, _round8(max(qk, v))) is False:
        name = precision_label(compute)
        return f"PyTorch cannot run its {kernel[5:]} kernel here (head size {_round8(max(qk, v))}, {name})"
    return None


def _compute_dtype(kernel: str, device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The network's dtype, except on CUDA where an fp32 network attends in bf16 (the authors' choice)."""
    if kernel == "math" or device.type != "cuda" or dtype in (torch.float16, torch.bfloat16):
        return dtype
    return torch.bfloat16 if _bf16_kernels(device) else dtype


def _widths(kernel: str, device: torch.device, qk: int, v: int, rank: int = 0) -> tuple[int, int]:
    """Zero-padded widths, only where the kernel needs them (sdpa-bias: of the content channels)."""
    if kernel == "math":
        return qk, v
    if kernel == "native":  # content channels (the factors come separately, if any); v in whole vectors
        return qk - rank, -(-v // kernel_vector()) * kernel_vector()
    if kernel == "sdpa-bias":
        qk -= rank
    if kernel == "fa4":  # q/k and v may differ; each a multiple of 8
        return _round8(qk), _round8(v)
    if device.type == "cuda":  # flash kernels: one head size, a multiple of 8
        width = _round8(max(qk, v))
        return width, width
    width = max(qk, v)  # CPU flash kernel: equal head sizes; multiples of 8 measured no faster
    return width, width


def _bias_pays(qk: int, v: int, rank: int) -> bool:
    """Whether ``sdpa-bias`` measured faster than padded SDPA on the CPU for these head sizes.

    It trades the fused kernel's width (q/k/v padded to ``qk``) for an additive mask, which the kernel reads
    at a cost: whole-model A/B on the CPU (benchmarks/RESULTS.md) measured a win for SST-light's 32/16 and
    40/16, about even for SST's 64/30 and a loss for its 48/30, hence content <= half of ``qk``.
    """
    return 0 < rank < qk and max(qk - rank, v) <= _BIAS_MAX_CONTENT_FRACTION * qk


def _candidates(
    backend: str, device: torch.device, dtype: torch.dtype, rank: int = 0, qk: int = 0, v: int = 0
) -> list[str]:
    if backend == "auto":
        if device.type == "cuda":
            return ["fa3", "flash-attn", "sdpa"]
        if device.type != "cpu":
            return ["sdpa"]
        # sdpa-bias measured faster in fp32 only: in bf16 on an AMX Xeon padded SDPA ran SST 1.6x faster.
        bias = dtype == torch.float32 and _bias_pays(qk, v, rank)
        return ["native", "sdpa-bias", "sdpa"] if bias else ["native", "sdpa"]
    if backend == "native" and device.type == "cpu":  # where it cannot run (bf16, no compiler): what auto runs
        return _candidates("auto", device, dtype, rank, qk, v)
    chain = [backend]
    while chain[-1] in _FALLBACK:
        chain.append(_FALLBACK[chain[-1]])
    return chain


@never_traced  # asks PyTorch's dispatcher and imports packages: run eagerly
def _resolve(backend: str, device: torch.device, dtype: torch.dtype, qk: int, v: int, rank: int = 0) -> AttentionPlan:
    reason = None
    for kernel in _candidates(backend, device, dtype, rank, qk, v):
        why = _unavailable(kernel, device, dtype, qk, v, rank)
        if why is not None:
            reason = reason or why
            continue
        compute = _compute_dtype(kernel, device, dtype)
        qk_width, v_width = _widths(kernel, device, qk, v, rank)
        choice = None
        if kernel == "sdpa":
            choice = _sdpa_choice(device, compute, qk_width, v_width)
        elif kernel == "sdpa-bias":
            choice = _sdpa_masked_choice(device, compute, qk_width, v_width)
        plan = AttentionPlan(
            backend, kernel, device.type, dtype, compute, qk, v, qk_width, v_width, choice,
            rank=rank if kernel in ("sdpa-bias", "native") else 0,
        )  # fmt: skip
        if reason is not None and backend != "auto":
            plan = replace(plan, notice=f"{NOTICE_PREFIX}{reason}; using {plan.label}")
        return plan
    raise AssertionError("sdpa and math always run")  # pragma: no cover


_PLANS: dict[tuple, AttentionPlan] = {}


def plan_attention(
    backend: str, device: torch.device | str, dtype: torch.dtype, qk: int, v: int, rank: int = 0
) -> AttentionPlan:
    """The kernel that runs for these arguments (cached: the forward pass asks on every call).

    ``rank`` > 0 declares that the last ``rank`` of the ``qk`` channels are low-rank factors shared by
    every batch item, which the caller can pass separately (``run_plan(..., bias=...)``). The plan then
    may take them as an additive bias (``plan.rank`` > 0) or not (``plan.rank`` == 0: concatenate them).
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    key = (backend, device, dtype, qk, v, rank)
    plan = _PLANS.get(key)
    if plan is None:
        backend = check_backend(backend)  # the canonical spelling: "NATIVE" is "native"
        if not 0 <= rank <= qk:
            raise ConfigError(f"rank {rank} must be between 0 and the q/k head size {qk}")
        plan = _PLANS[key] = _resolve(backend, device, dtype, qk, v, rank)
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
    backend: str, device: torch.device | str, dtype: torch.dtype, head_sizes: Iterable[tuple[int, ...]]
) -> AttentionReport:
    """One line saying which kernel runs for a network's head sizes, plus any fallback notices.

    Each entry is ``(q/k, v)``, or ``(q/k, v, rank)`` for layers that pass ``rank`` shared factors separately.
    """
    plans = tuple(plan_attention(backend, device, dtype, *sizes) for sizes in sorted(set(head_sizes)))
    groups: dict[str, list[AttentionPlan]] = {}
    for plan in plans:
        groups.setdefault(plan.label, []).append(plan)
    parts = [f"{label}; head sizes q,k/v {', '.join(p.sizes for p in group)}" for label, group in groups.items()]
    notices = tuple(dict.fromkeys(p.notice for p in plans if p.notice))
    return AttentionReport(KERNEL_LINE_PREFIX + " | ".join(parts) + _native_off(backend, plans), notices, plans)


def _native_off(backend: str, plans: Iterable[AttentionPlan]) -> str:
    """Where ``auto`` would have run sst-cli's CPU kernel but cannot, why (a damaged cache, no compiler): auto
    falls back silently, so the descriptive line is the one place that says it."""
    wanted = backend == "auto" and any(p.device_type == "cpu" and p.dtype == torch.float32 for p in plans)
    problem = kernel_problem() if wanted else None
    return "" if problem is None else f" (sst-cli CPU kernel off: {problem})"


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


def _bias_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The bias's dtype: fp32 where the kernel accepts it (the CPU flash kernel adds it in fp32)."""
    return torch.float32 if device.type == "cpu" and dtype in (torch.bfloat16, torch.float16) else dtype


def _sdpa_bias(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias_q: torch.Tensor, bias_k: torch.Tensor
) -> torch.Tensor:
    """``softmax(q k^T + bias_q bias_k^T) v``; ``bias_q``/``bias_k`` (heads, tokens, R) shared by the batch.

    The bias is built for a block of query rows at a time (bounded memory, cache-resident while every
    batch item of the block reads it) and given to SDPA as an additive float mask.
    """
    b, h, n, _ = q.shape
    m = k.shape[-2]
    bias_dtype = _bias_dtype(q.device, q.dtype)
    # A contiguous (heads, R, keys) right factor and one reused output buffer: a transposed view or a
    # fresh allocation per block each made the bias product 2-3x slower on the CPU.
    bias_q, bias_k = bias_q.to(bias_dtype), bias_k.to(bias_dtype).transpose(-2, -1).contiguous()
    rows = max(1, _BIAS_CHUNK_ELEMENTS // (h * m))
    if rows >= n:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.matmul(bias_q, bias_k).unsqueeze(0), scale=1.0)
    rows = max(_BIAS_ROW_MULTIPLE, rows // _BIAS_ROW_MULTIPLE * _BIAS_ROW_MULTIPLE)
    out = q.new_empty((b, h, n, v.shape[-1]))
    buffer = q.new_empty((h * rows * m,), dtype=bias_dtype)
    for start in range(0, n, rows):
        sl = slice(start, min(n, start + rows))
        bias = buffer[: h * (sl.stop - start) * m].view(h, sl.stop - start, m)
        torch.matmul(bias_q[:, sl], bias_k, out=bias)  # never under autograd: run_plan trains without a mask
        out[:, :, sl] = F.scaled_dot_product_attention(q[:, :, sl], k, v, attn_mask=bias.unsqueeze(0), scale=1.0)
    return out


def _flash(kernel: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # flash-attn takes (batch, tokens, heads, channels); a transposed view is fine (last dim contiguous).
    out = kernel(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=1.0)
    if isinstance(out, tuple):  # FlashAttention-3 may also return the log-sum-exp
        out = out[0]
    return out.transpose(1, 2)


def _append_factors(
    q: torch.Tensor, k: torch.Tensor, bias: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[q, bias_q]`` and ``[k, bias_k]``, the factors broadcast over the batch."""
    n = q.shape[0]
    bias_q, bias_k = (t.to(q.dtype).unsqueeze(0).expand(n, -1, -1, -1) for t in bias)
    return torch.cat([q, bias_q], dim=-1), torch.cat([k, bias_k], dim=-1)


def _padded_sdpa(
    plan: AttentionPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: tuple[torch.Tensor, torch.Tensor] | None,
) -> torch.Tensor:
    """SDPA with the factors appended and one width for q, k, v: a bias plan's way where its own does not pay."""
    if bias is not None:
        q, k = _append_factors(q, k, bias)
    width = max(q.shape[-1], v.shape[-1], plan.v_width)
    q, k, v = (_pad_channels(t, width) for t in (q, k, v))
    return _sdpa(q, k, v)[..., : plan.v_width]


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def run_plan(
    plan: AttentionPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Run a plan's kernel; inputs narrower than the plan's widths, or in another dtype, are adapted here.

    ``bias``: low-rank factors ``(bias_q, bias_k)``, (heads, tokens, R), shared by every batch item, whose
    product is added to the logits (``q``/``k`` then hold the other channels only). A plan with
    ``rank`` > 0 takes them as they are; any other plan appends them to q and k.

    Returns (B, heads, tokens, ``plan.v_width``) in ``plan.dtype``: the caller slices and casts back.
    """
    if plan.rank and bias is None:
        raise ConfigError(f"the {plan.kernel} plan needs its rank-{plan.rank} bias factors")
    training = _needs_grad(q, k, v, *(bias or ()))
    if plan.kernel == "native":
        if training:  # the C kernel has no backward pass
            other = plan_attention("sdpa", q.device, plan.dtype, plan.qk, plan.v)
            return _pad_channels(run_plan(other, q, k, v, bias)[..., : plan.v_width], plan.v_width)
        return cpu_attention(q, k, _pad_channels(v, plan.v_width), bias)
    if bias is not None and not plan.rank:
        q, k = _append_factors(q, k, bias)
    q, k = (_pad_channels(t, plan.qk_width).to(plan.dtype) for t in (q, k))
    v = _pad_channels(v, plan.v_width).to(plan.dtype)
    if plan.kernel == "sdpa-bias":
        assert bias is not None
        # Where the bias does not pay; in training too: a mask that needs gradients sends SDPA to its unfused
        # math path (the softmax materialised: a CPU training step ran 5x slower than with the factors appended).
        if training or q.shape[0] < _BIAS_MIN_BATCH or k.shape[-2] > _BIAS_MAX_TOKENS:
            return _padded_sdpa(plan, q, k, v, bias)
        return _sdpa_bias(q, k, v, *bias)
    if plan.kernel == "math":
        return _math(q, k, v)
    if plan.kernel == "sdpa":
        return _sdpa(q, k, v)
    if plan.kernel in ("sdpa-flash", "sdpa-cudnn"):
        return _sdpa(q, k, v, _forced_sdpa_backend(plan.kernel))
    kernel = _flash_func(plan.kernel)
    if kernel is None:  # pragma: no cover - the plan checked it
        raise ConfigError(f"attention kernel {plan.kernel!r} disappeared after planning")
    return _flash(kernel, q, k, v)


def run_plan_rows(
    plan: AttentionPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    groups: Iterable[tuple[torch.Tensor, torch.Tensor]],
    bias: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``run_plan`` for the query rows the caller will read only: ``groups`` of (batch items, query rows).

    Each group's items attend over all their keys as usual; rows outside every group are left unwritten. The
    native kernel reads the rows in place; other kernels get copies of each group's q, k and v.
    """
    if plan.kernel == "native" and not _needs_grad(q, k, v, *(bias or ())):
        return cpu_attention(q, k, _pad_channels(v, plan.v_width), bias, groups=groups)
    out = q.new_empty((*q.shape[:-1], plan.v_width), dtype=plan.dtype)
    for items, rows in groups:
        whole = items.numel() == q.shape[0]
        qg, kg, vg = (t if whole else t.index_select(0, items) for t in (q, k, v))
        if rows.numel() != q.shape[-2]:
            qg = qg.index_select(2, rows)
        kept_bias = None if bias is None else (bias[0].index_select(1, rows), bias[1])
        out[items[:, None], :, rows] = run_plan(plan, qg, kg, vg, bias=kept_bias).transpose(1, 2)
    return out


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    backend: str = "auto",
    bias: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``softmax(q k^T) v`` with scale 1 on (B, heads, tokens, C) tensors, through the planned kernel.

    With ``bias=(bias_q, bias_k)`` ((heads, tokens, R), shared by the batch): ``softmax(q k^T + bias_q
    bias_k^T) v``, i.e. attention over ``[q, bias_q]`` and ``[k, bias_k]``.
    """
    dv = v.shape[-1]
    rank = 0 if bias is None else bias[0].shape[-1]
    plan = plan_attention(backend, q.device, q.dtype, q.shape[-1] + rank, dv, rank=rank)
    return run_plan(plan, q, k, v, bias=bias)[..., :dv].to(q.dtype)
