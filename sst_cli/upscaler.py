"""``Upscaler``: a loaded model on a device at a precision, run through the tiler; image in, image out."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from .archs.attention import describe_attention
from .errors import ConfigError, NonFiniteOutput
from .image_io import Picture
from .loader import ConfigSource, load_model
from .tiling import align_overlap, align_tile_size, run_tiles_adaptive

DEFAULT_MODEL = "sst-light-291"  # bundled: weights trained by sst-cli on 291 images, not the paper's
DEFAULT_SCALE = 4
PRECISIONS = ("auto", "fp32", "bf16")
ALPHA_MODES = ("model", "resize")
GENERIC_OVERLAP = 16  # context for models that do not describe their own receptive field
Progress = Callable[[int, int], None]


def resolve_device(device: str) -> torch.device:
    """``auto`` is the first CUDA GPU when there is one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} was requested but PyTorch sees no CUDA GPU; use --device cpu")
    return resolved


def resolve_precision(precision: str, device: torch.device) -> torch.dtype:
    """``auto``: bfloat16 on GPUs that support it, float32 otherwise (and always on the CPU)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    return torch.bfloat16 if precision == "bf16" else torch.float32


def default_memory_budget(device: torch.device) -> int:
    """Bytes the activations of one tile may use: a safe fraction of free GPU memory or of available RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.7)
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            info = dict(line.split(":", 1) for line in fh)
        available = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return int(available * 0.5)


@contextmanager
def exact_fp32(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """On CUDA, fp32 means fp32: TF32 convolutions and matmuls (errors ~1e-3) are off while it runs."""
    if device.type != "cuda" or dtype != torch.float32:
        yield
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def describe_kernel(
    model: nn.Module, device: torch.device, dtype: torch.dtype, on_message: Callable[[str], None] | None = None
) -> str | None:
    """The one line saying which attention kernel runs (None for networks without SST attention).

    Fallback notices (a requested kernel that cannot run here) and then this line go to ``on_message``;
    the line starts with ``KERNEL_LINE_PREFIX`` so that a front end can show it only when asked.
    """
    sizes = getattr(model, "attention_head_sizes", None)
    if not sizes:
        return None
    report = describe_attention(getattr(model, "attention_backend", "auto"), device, dtype, sizes)
    if on_message is not None:
        for notice in report.notices:
            on_message(notice)
        on_message(report.line)
    return report.line


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
    )


@dataclass(frozen=True)
class TilePlan:
    """How an image is cut: tile side (0 = whole image), context overlap, alignment, blending."""

    tile: int
    overlap: int
    align: int
    blend: bool


class Upscaler:
    """Upscale pictures, PIL images or arrays with an SST (or any scale-describing) network.

    ``model`` is a zoo name (default ``sst-light-291``, the bundled weights) or an ``nn.Module`` with a
    ``scale`` attribute.
    ``weights`` loads a local file or ``hf://`` reference with the architecture of ``model`` or
    ``config``; with neither, the file must carry its config (as sst-cli's own safetensors do).
    """

    def __init__(
        self,
        model: str | nn.Module | None = None,
        scale: int | None = None,
        *,
        weights: str | os.PathLike[str] | None = None,
        config: ConfigSource | None = None,
        hub_repo: str | None = None,
        device: str = "auto",
        precision: str = "auto",
        attention: str = "auto",
        tile: int | Literal["auto"] = "auto",
        tile_overlap: int | None = None,
        exact: bool = False,
        batch: int = 1,
        max_memory: int | None = None,
        alpha: str = "model",
        outscale: float | None = None,
        on_message: Callable[[str], None] | None = None,
    ) -> None:
        if alpha not in ALPHA_MODES:
            raise ConfigError(f"unknown alpha mode {alpha!r}; choose one of {', '.join(ALPHA_MODES)}")
        if batch < 1:
            raise ConfigError(f"batch must be at least 1, got {batch}")
        if outscale is not None and not outscale > 0:
            raise ConfigError(f"outscale must be a positive number, got {outscale}")
        if tile != "auto" and (not isinstance(tile, int) or tile < 0):
            raise ConfigError(f"tile must be 'auto', 0 (whole image) or a positive size in pixels, got {tile!r}")
        if tile_overlap is not None and tile_overlap < 0:
            raise ConfigError(f"tile overlap must be >= 0, got {tile_overlap}")
        self.device = resolve_device(device)
        self.dtype = resolve_precision(precision, self.device)
        self.model = self._load(model, scale, weights, config, hub_repo)
        if hasattr(self.model, "set_attention_backend"):
            self.model.set_attention_backend(attention)
        self.attention_kernel = describe_kernel(self.model, self.device, self.dtype, on_message)
        self.scale: int = int(self.model.scale)
        self.tile, self.tile_overlap, self.exact, self.batch = tile, tile_overlap, exact, batch
        self.max_memory, self.alpha, self.outscale = max_memory, alpha, outscale
        self.on_message = on_message
        self.last_tile: int | None = None

    def _load(
        self,
        model: str | nn.Module | None,
        scale: int | None,
        weights: str | os.PathLike[str] | None,
        config: ConfigSource | None,
        hub_repo: str | None,
    ) -> nn.Module:
        if isinstance(model, nn.Module):
            if weights is not None or config is not None:
                raise ConfigError("pass weights/config only with a model name, not with a loaded module")
            if scale is not None and scale != getattr(model, "scale", None):
                raise ConfigError(f"the module upscales x{getattr(model, 'scale', '?')}, not x{scale}")
            return model.to(self.device, self.dtype).eval()
        if weights is not None:
            variant = None if config is not None else model
            return load_model(weights, scale, config=config, variant=variant, device=self.device, dtype=self.dtype)
        if config is not None:
            raise ConfigError("--config describes an architecture; give the weights to load into it with --weights")
        name = model or DEFAULT_MODEL
        return load_model(name, scale or DEFAULT_SCALE, hub_repo=hub_repo, device=self.device, dtype=self.dtype)

    # ----------------------------------------------------------------- tiling
    def plan(self, height: int, width: int) -> TilePlan:
        """Tile size and overlap for an image, from the model's own description and the options."""
        align = int(getattr(self.model, "tile_align", 1))
        blend = align == 1
        context = getattr(self.model, "exact_context", None)
        if self.exact and context is not None:
            overlap = align_overlap(int(context), align)
        elif self.tile_overlap is not None:
            overlap = align_overlap(self.tile_overlap, align)
        else:
            overlap = align if not blend else GENERIC_OVERLAP
        if self.tile == "auto":
            tile = self._auto_tile(height, width, overlap, align)
        else:
            tile = align_tile_size(self.tile, align) if self.tile else 0
        return TilePlan(tile, overlap, align, blend)

    def _activation_bytes(self, height: int, width: int) -> int:
        estimate = getattr(self.model, "activation_bytes", None)
        if estimate is None:  # unknown network: assume a few hundred float channels per pixel
            return 1024 * height * width * self.batch * torch.finfo(self.dtype).bits // 8
        return int(estimate(height, width, self.dtype)) * self.batch

    def _auto_tile(self, height: int, width: int, overlap: int, align: int) -> int:
        budget = self.max_memory if self.max_memory is not None else default_memory_budget(self.device)
        if self._activation_bytes(height, width) <= budget:
            return 0
        tile = align
        while tile + align < max(height, width):
            side = tile + align + 2 * overlap
            if self._activation_bytes(min(side, height), min(side, width)) > budget:
                break
            tile += align
        return tile

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        x = batch.to(self.device, self.dtype, non_blocking=True)
        with torch.inference_mode(), exact_fp32(self.device, self.dtype):
            y = self.model(x)
        return y.float().cpu()

    def _on_oom(self, new_tile: int) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if self.on_message:
            self.on_message(f"out of memory: retrying with {new_tile}px tiles")

    def run(self, image: torch.Tensor, on_tile: Progress | None = None) -> torch.Tensor:
        """(C, H, W) float32 CPU tensor -> (C, H*scale, W*scale), tiled as planned."""
        plan = self.plan(image.shape[-2], image.shape[-1])
        out, used = run_tiles_adaptive(
            self._forward,
            image,
            self.scale,
            tile=plan.tile,
            overlap=plan.overlap,
            align=plan.align,
            batch=self.batch,
            blend=plan.blend,
            on_tile=on_tile,
            is_oom=_is_oom,
            on_oom=self._on_oom,
        )
        self.last_tile = used
        if not torch.isfinite(out).all():
            hint = " (bf16 overflowed: try --precision fp32)" if self.dtype != torch.float32 else ""
            raise NonFiniteOutput(f"the network produced NaN or Inf values{hint}")
        return out

    # ----------------------------------------------------------------- images
    def _resize_to_outscale(self, t: torch.Tensor, height: int, width: int) -> torch.Tensor:
        if self.outscale is None or self.outscale == self.scale:
            return t
        size = (max(1, round(height * self.outscale)), max(1, round(width * self.outscale)))
        return F.interpolate(t[None], size=size, mode="bicubic", antialias=True, align_corners=False)[0]

    def upscale_picture(self, picture: Picture, on_tile: Progress | None = None) -> Picture:
        """Colour through the network; alpha through the network as gray, or resized, or passed if constant."""
        h, w = picture.color.shape[:2]
        color = torch.from_numpy(np.ascontiguousarray(picture.color.transpose(2, 0, 1), dtype=np.float32))
        color_out = self._resize_to_outscale(self.run(color, on_tile), h, w).clamp_(0, 1)
        alpha_out = None
        if picture.alpha is not None:
            alpha_out = self._upscale_alpha(picture.alpha, on_tile)
        return replace(
            picture,
            color=color_out.permute(1, 2, 0).contiguous().numpy(),
            alpha=alpha_out,
        )

    def _upscale_alpha(self, alpha: np.ndarray, on_tile: Progress | None) -> np.ndarray:
        h, w = alpha.shape
        a = torch.from_numpy(np.ascontiguousarray(alpha, dtype=np.float32))[None]
        if float(a.min()) == float(a.max()):
            size = (round(h * (self.outscale or self.scale)), round(w * (self.outscale or self.scale)))
            return np.full((max(1, size[0]), max(1, size[1])), float(a[0, 0, 0]), dtype=np.float32)
        if self.alpha == "model":
            up = self.run(a.expand(3, h, w).contiguous(), on_tile).mean(0, keepdim=True)
        else:
            size = (h * self.scale, w * self.scale)
            up = F.interpolate(a[None], size=size, mode="bicubic", align_corners=False)[0]
        return self._resize_to_outscale(up, h, w).clamp_(0, 1)[0].numpy()

    def upscale(self, image: Image.Image | np.ndarray, on_tile: Progress | None = None) -> Any:
        """Upscale a PIL image (returns PIL) or an array (returns an array of the same dtype and layout)."""
        if isinstance(image, Image.Image):
            return _to_pil(self.upscale_picture(_picture_from_pil(image), on_tile), image.mode)
        array = np.asarray(image)
        return _to_array(self.upscale_picture(_picture_from_array(array), on_tile), array)


def _picture_from_array(array: np.ndarray) -> Picture:
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[2] not in (1, 2, 3, 4):
        raise ConfigError(f"expected an (H, W), (H, W, 1-4) image array, got shape {array.shape}")
    if array.dtype == np.uint8:
        values, depth = array.astype(np.float32) / 255.0, 8
    elif array.dtype == np.uint16:
        values, depth = array.astype(np.float32) / 65535.0, 16
    elif np.issubdtype(array.dtype, np.floating):
        values, depth = np.clip(array.astype(np.float32), 0.0, 1.0), 16
    else:
        raise ConfigError(f"unsupported image array dtype {array.dtype}; use uint8, uint16 or float in [0, 1]")
    channels = values.shape[2]
    gray = channels in (1, 2)
    color = np.repeat(values[..., :1], 3, axis=2) if gray else values[..., :3]
    alpha = values[..., -1] if channels in (2, 4) else None
    return Picture(color, alpha, gray, depth, None, None, "png")


def _to_array(picture: Picture, like: np.ndarray) -> np.ndarray:
    color = picture.color.mean(axis=2, keepdims=True) if picture.grayscale else picture.color
    parts = [color] if picture.alpha is None else [color, picture.alpha[..., None]]
    values = np.concatenate(parts, axis=2)
    if like.ndim == 2:
        values = values[..., 0]
    if like.dtype == np.uint8:
        return np.round(values * 255.0).astype(np.uint8)
    if like.dtype == np.uint16:
        return np.round(values * 65535.0).astype(np.uint16)
    return values.astype(like.dtype)


def _picture_from_pil(image: Image.Image) -> Picture:
    mode = image.mode
    if mode == "P" or mode == "PA":
        image = image.convert("RGBA")
    elif mode not in ("L", "LA", "RGB", "RGBA", "I;16"):
        image = image.convert("RGBA" if "A" in mode else "RGB")
    return _picture_from_array(np.asarray(image))


def _to_pil(picture: Picture, mode: str) -> Image.Image:
    like = np.zeros((1, 1, 1), dtype=np.uint16 if mode == "I;16" else np.uint8)
    array = _to_array(picture, like)
    if array.shape[2] == 1:
        return Image.fromarray(array[..., 0])
    return Image.fromarray(array)
