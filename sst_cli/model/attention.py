"""Attention kernels: which kernel runs is a runtime choice, separate from what the network computes.

Every backend computes ``softmax(q @ k^T) @ v`` with softmax scale 1 (SST folds the scales into q
before concatenating the positional factors). Layouts are (batch, heads, tokens, channels); q and k
share a channel count that may differ from v's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache

import torch
import torch.nn.functional as F

from ..errors import ConfigError

BACKENDS = ("auto", "sdpa", "flash-attn", "fa3", "math")

# Windows per chunk in the math backend: bounds the (tokens x tokens) score matrices it materialises.
_MATH_CHUNK_ELEMENTS = 1 << 26


@cache
def _optional_kernel(module: str, name: str) -> Callable | None:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, OSError):
        return None


def flash_attn_func() -> Callable | None:
    """FlashAttention-2 from the ``flash-attn`` package, if installed."""
    return _optional_kernel("flash_attn", "flash_attn_func")


def fa3_func() -> Callable | None:
    """FlashAttention-3 (Hopper) from ``flash_attn_interface``, if installed."""
    return _optional_kernel("flash_attn_interface", "flash_attn_func")


def available_backends() -> list[str]:
    """Backends that can run in this environment (``auto`` and the PyTorch ones always can)."""
    names = ["auto", "sdpa", "math"]
    if flash_attn_func() is not None:
        names.append("flash-attn")
    if fa3_func() is not None:
        names.append("fa3")
    return names


def check_backend(name: str) -> str:
    """Validate a backend name, and that its package is installed."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "flash-attn" and flash_attn_func() is None:
        raise ConfigError("attention backend 'flash-attn' needs the flash-attn package: pip install flash-attn")
    if name == "fa3" and fa3_func() is None:
        raise ConfigError("attention backend 'fa3' needs FlashAttention-3 (flash_attn_interface) installed")
    return name


def _pad_channels(t: torch.Tensor, size: int) -> torch.Tensor:
    extra = size - t.shape[-1]
    return F.pad(t, (0, extra)) if extra else t


def _common_width(q: torch.Tensor, v: torch.Tensor) -> int:
    """Flash kernels need one head size for q, k and v, a multiple of 8; zero channels change nothing."""
    width = max(q.shape[-1], v.shape[-1])
    return -(-width // 8) * 8


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    dv = v.shape[-1]
    width = _common_width(q, v)
    q, k, v = (_pad_channels(t, width) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, scale=1.0)[..., :dv]


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


def _flash(kernel: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    dtype, dv = q.dtype, v.shape[-1]
    half = dtype if dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    width = _common_width(q, v)
    # flash-attn takes (batch, tokens, heads, channels) in fp16/bf16.
    q, k, v = (_pad_channels(t, width).transpose(1, 2).to(half) for t in (q, k, v))
    out = kernel(q, k, v, softmax_scale=1.0)
    if isinstance(out, tuple):  # FlashAttention-3 may also return the log-sum-exp
        out = out[0]
    return out.transpose(1, 2)[..., :dv].to(dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """``softmax(q k^T) v`` with scale 1 on (B, heads, tokens, C) tensors, through the chosen kernel.

    ``auto`` is PyTorch's ``scaled_dot_product_attention``, which itself picks flash / cuDNN /
    memory-efficient / math kernels; flash-attn runs in bf16 and is therefore never chosen implicitly.
    """
    if backend in ("auto", "sdpa"):
        return _sdpa(q, k, v)
    if backend == "math":
        return _math(q, k, v)
    if backend == "flash-attn":
        kernel = flash_attn_func()
    elif backend == "fa3":
        kernel = fa3_func()
    else:
        raise ConfigError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if kernel is None or not q.is_cuda:
        raise ConfigError(f"attention backend {backend!r} needs a CUDA device and its package installed")
    return _flash(kernel, q, k, v)
