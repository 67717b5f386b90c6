"""SSTReal-X4 (the authors' real-world model): the whole test-time procedure behind one ``forward``.

One network evaluation per image, no sampling loop: normalise to [-1, 1], reflect-pad to a multiple of 64,
bicubic x4, add noise (sigma 1), the EDM-preconditioned network gives two denoised images ``d_i`` (after
block ``ig_idx``) and ``d_f`` (after the last block), recombined as ``d_i + λ (d_f - d_i)``, cropped and
mapped back to [0, 1]. λ > 1 extrapolates past the final head: sharper, invented texture; λ = 1 is the
final head alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError
from ..base import ModelDescriptor, SRNetwork
from ..sst.layers import WindowAttention, reference_path
from .config import SSTRealConfig
from .layers import RealCore
from .noise import position_noise

PAD_MULTIPLE = 64  # the authors' test option ``val.min_size``: LR sides are padded to a multiple of it
SIGMA = 1.0  # ``consistency_opt.sigma_max``: the noise level of the single evaluation
DEFAULT_SEED = 0


def reflect_pad(x: torch.Tensor, bottom: int, right: int) -> torch.Tensor:
    """Reflect padding at the bottom and right of any size: ``F.pad(mode='reflect')`` where it works (a pad
    shorter than the side), else the same reflection continued periodically (a 1-pixel side repeats)."""
    h, w = x.shape[-2:]
    if bottom < h and right < w:
        return F.pad(x, (0, right, 0, bottom), mode="reflect") if bottom or right else x
    rows = _reflected(h, h + bottom, x.device)
    columns = _reflected(w, w + right, x.device)
    return x.index_select(-2, rows).index_select(-1, columns)


def _reflected(size: int, total: int, device: torch.device) -> torch.Tensor:
    index = torch.arange(total, device=device)
    if size == 1:
        return torch.zeros_like(index)
    period = 2 * (size - 1)
    index = index % period
    return torch.where(index < size, index, period - index)


class RealOutput(NamedTuple):
    """One test-time run: ``sr`` in [0, 1]; ``raw`` in [-1, 1] (cropped, before the clamp); ``d_i``, ``d_f``
    the two denoised images at the padded size (None unless asked for)."""

    sr: torch.Tensor
    raw: torch.Tensor
    d_i: torch.Tensor | None = None
    d_f: torch.Tensor | None = None


class SSTReal(SRNetwork):
    """NCHW RGB in [0, 1] to the restored x4 image in [0, 1], any input size (the authors' ``EDMUNet`` with
    its test procedure). ``ig_lambda`` and ``seed`` are runtime settings (``configure``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        cfg = SSTRealConfig.from_kwargs(kwargs)
        self.config = cfg
        self.model = RealCore(cfg)
        self.ig_lambda = float(cfg.sampling_ig_lambda)
        self.seed = DEFAULT_SEED
        self._origins: list[tuple[int, int]] | None = None
        # Channels-last activations: None = on the CPU only, as SST (measured faster there).
        self.channels_last: bool | None = None

    # ----------------------------------------------------------------- what the engine reads
    def describe(self) -> ModelDescriptor:
        return ModelDescriptor(
            architecture="SSTReal",
            scale=4,
            size_multiple=self.tile_align,
            exact_context=self.exact_context,
            default_context=self.tile_align,
            attention_head_sizes=tuple(sorted({m.head_sizes for m in self.attention_layers()})),
            parameters=sum(p.numel() for p in self.parameters()),
            position_dependent=True,
            settings=("ig_lambda", "seed"),
            notes=("generative: invents texture; ig_lambda trades fidelity (1.0) for sharpness (2.0 and up)",),
        )

    @property
    def scale(self) -> int:
        return 4

    @property
    def tile_align(self) -> int:
        """Tile origins on multiples of this see the whole image's padding grid and attention windows."""
        return math.lcm(PAD_MULTIPLE, *self.config.window_sizes)

    @property
    def exact_context(self) -> int | None:
        """LR pixels of context beyond an aligned tile edge that make tiling exact (as SST's, per layer);
        None where windows shift (see SST's)."""
        if any(self.config.shifted):
            return None
        depth = 2 + 1  # bicubic reaches 2 LR pixels; the stem's 3x3 conv one more
        for _ in range(self.config.num_blocks):
            for ws in self.config.window_sizes:
                depth = max(-(-depth // ws) * ws, depth + 1)  # windows touched; the gate's 3x3 reach
                depth += 1  # depth-wise conv of the SwiGLU
            depth += 1  # the block's tail conv
        return depth + 2  # a head: one 3x3 conv at LR, one at x2, two at x4

    def attention_layers(self) -> list[WindowAttention]:
        return [m for m in self.modules() if isinstance(m, WindowAttention)]

    def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
        """Rough peak activation memory of one forward pass (no grad), used to size tiles."""
        cfg, elem = self.config, torch.finfo(dtype).bits // 8
        side = self.tile_align
        padded = (-(-height // side) * side) * (-(-width // side) * side)
        body = 16 * cfg.dim + 8 * cfg.ffn_hidden
        head = 16 * (3 * cfg.intermediate_dim + 24)  # HR: the head's widest convs, input, noise, outputs
        return elem * padded * max(body, head)

    def reference_path(self) -> AbstractContextManager[nn.Module]:
        return reference_path(self)

    def configure(self, **settings: Any) -> None:
        """``ig_lambda`` (λ of ``d_i + λ (d_f - d_i)``) and ``seed`` (of the position-keyed noise)."""
        unknown = sorted(set(settings) - {"ig_lambda", "seed"})
        if unknown:
            super().configure(**{k: settings[k] for k in unknown})
        if settings.get("ig_lambda") is not None:
            value = float(settings["ig_lambda"])
            if not math.isfinite(value):
                raise ConfigError(f"ig_lambda must be a finite number, got {settings['ig_lambda']!r}")
            self.ig_lambda = value
        if settings.get("seed") is not None:
            seed = settings["seed"]
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
            self.seed = seed

    def at_tile_origins(self, origins: Sequence[tuple[int, int]]) -> AbstractContextManager[None]:
        return self._located(origins)

    @contextmanager
    def _located(self, origins: Sequence[tuple[int, int]]) -> Iterator[None]:
        saved, self._origins = self._origins, [(int(y), int(x)) for y, x in origins]
        try:
            yield
        finally:
            self._origins = saved

    # ----------------------------------------------------------------- the procedure
    def noise_for(
        self, batch: int, lr_height: int, lr_width: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """(batch, 3, 4*H, 4*W) noise for a padded LR batch of size HxW, float32 on the CPU.

        Keyed by the seed (``self.seed``, or one drawn from ``generator``) and by each item's HR position:
        the origin set by ``at_tile_origins`` for tiles, else (0, 0). Items at one position share noise,
        so an image's output does not depend on what else is in its batch.
        """
        seed = self.seed
        if generator is not None:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
        origins = self._origins if self._origins is not None else [(0, 0)] * batch
        if len(origins) != batch:
            raise ValueError(f"{len(origins)} tile origins were set for a batch of {batch}")
        cache: dict[tuple[int, int], torch.Tensor] = {}
        items = []
        for y, x in origins:
            if (y, x) not in cache:
                cache[(y, x)] = position_noise(seed, 4 * y, 4 * x, 4 * lr_height, 4 * lr_width)
            items.append(cache[(y, x)])
        return torch.stack(items)

    def denoise(self, x: torch.Tensor, lq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """EDM preconditioning at sigma 1: ``(d_i, d_f) = c_skip x + c_out F(x)`` for both heads, float32."""
        cfg = self.config
        sigma = torch.full((x.shape[0], 1, 1, 1), SIGMA, dtype=torch.float32, device=x.device)
        eps = 0.1 if cfg.use_skip else 0.001
        c_skip = cfg.sigma_data**2 / ((sigma / eps) ** 2 + cfg.sigma_data**2)
        c_out = (sigma / eps) / ((sigma / eps) ** 2 + cfg.sigma_data**2).sqrt()
        level = ((sigma + 0.002).log() / 4).flatten()
        dtype = self.model.proj_in.weight.dtype
        x_in, lq_in = x.to(dtype), lq.to(dtype)
        if self.channels_last or (self.channels_last is None and x.device.type == "cpu"):
            x_in = x_in.contiguous(memory_format=torch.channels_last)
            lq_in = lq_in.contiguous(memory_format=torch.channels_last)
        out_i, out_f = self.model(x_in, level, lq_in)
        return c_skip * x + c_out * out_i.float(), c_skip * x + c_out * out_f.float()

    def restore(
        self,
        lr: torch.Tensor,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        *,
        keep_pair: bool = False,
    ) -> RealOutput:
        """The test-time procedure, with its intermediate results (see ``RealOutput``)."""
        if lr.ndim != 4 or lr.shape[1] != 3:
            raise ValueError(f"expected an NCHW RGB batch, got shape {tuple(lr.shape)}")
        b, _, h, w = lr.shape
        lq = reflect_pad(lr.float() * 2 - 1, -h % PAD_MULTIPLE, -w % PAD_MULTIPLE)
        hp, wp = lq.shape[-2:]
        lq_up = F.interpolate(lq, scale_factor=4, mode="bicubic", align_corners=False)
        if noise is None:
            noise = self.noise_for(b, hp, wp, generator)
        elif noise.ndim != 4 or noise.shape[1:] != lq_up.shape[1:] or noise.shape[0] not in (1, b):
            raise ValueError(
                f"noise must have the shape of the padded, upsampled input {tuple(lq_up.shape)}, "
                f"got {tuple(noise.shape)}"
            )
        x = lq_up + SIGMA * noise.to(lq_up.device, torch.float32)
        del lq_up
        d_i, d_f = self.denoise(x, lq)
        del x
        raw = d_i + self.ig_lambda * (d_f - d_i)
        raw = raw[..., : 4 * h, : 4 * w]
        sr = ((raw + 1) / 2).clamp(0, 1).to(lr.dtype)
        return RealOutput(sr, raw, d_i if keep_pair else None, d_f if keep_pair else None)

    def forward(
        self, lr: torch.Tensor, noise: torch.Tensor | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """LR batch in [0, 1] -> restored x4 image in [0, 1]. ``noise``: used as is (the shape of the padded,
        upsampled input); else drawn keyed by position, from ``generator`` or the seed (default 0)."""
        return self.restore(lr, noise, generator).sr
