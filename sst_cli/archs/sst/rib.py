"""RIB: rank-factorized implicit neural bias.

Instead of a relative-position bias table (which rules out FlashAttention), each layer maps
Fourier features of the window's pixel coordinates through a tiny MLP to low-rank positional
queries and keys. Concatenated to the content q/k they add ``pos_q @ pos_k^T`` to the logits
inside one dot product. The factors depend only on the window size and the weights, so
inference computes them once and reuses them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def window_coordinates(window: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(window*window, 2) pixel-centre coordinates ``(x, y)`` in (-1, 1), row-major (y outer).

    Made on ``device`` itself: a copy from the host would make every training step wait for the GPU once per
    layer (30 waits per step for SST-light, measured on an H100 by ``train_probe.py``)."""
    centres = 2.0 * (torch.arange(window, dtype=torch.float32, device=device) + 0.5) / window - 1.0
    y, x = torch.meshgrid(centres, centres, indexing="ij")
    return torch.stack([x.reshape(-1), y.reshape(-1)], dim=-1)


def fourier_features(coords: torch.Tensor, n_freqs: int) -> torch.Tensor:
    """``[x, y]`` then, per band ``f = 2**i``: ``[sin fx, sin fy, cos fx, cos fy]`` (no pi factor)."""
    parts = [coords]
    for i in range(n_freqs):
        scaled = coords * float(2**i)
        parts += [scaled.sin(), scaled.cos()]
    return torch.cat(parts, dim=-1)


def feature_count(n_freqs: int) -> int:
    return 2 + 4 * n_freqs


class RibParameters(nn.Module):
    """Mixin owning one layer's RIB MLP under the official names and layouts.

    ``to_hidden`` (features, hidden), ``hidden_b`` (1, hidden), ``to_q``/``to_k`` (heads, hidden, rank).
    The official checkpoints keep these directly on the attention module, hence a mixin rather
    than a submodule.
    """

    def init_rib(self, heads: int, rank: int, hidden: int, n_freqs: int) -> None:
        self.n_freqs = n_freqs
        self.rank = rank
        self.to_hidden = nn.Parameter(torch.empty(feature_count(n_freqs), hidden))
        self.hidden_b = nn.Parameter(torch.empty(1, hidden))
        self.to_q = nn.Parameter(torch.empty(heads, hidden, rank))
        self.to_k = nn.Parameter(torch.empty(heads, hidden, rank))
        self._rib_cache: dict[tuple, tuple[tuple, tuple[torch.Tensor, ...]]] = {}
        if not self.to_hidden.is_meta:
            for p in (self.to_hidden, self.to_q, self.to_k):
                nn.init.trunc_normal_(p, std=0.02)
            nn.init.zeros_(self.hidden_b)

    def compute_factors(self, window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positional (q, k) factors, (heads, tokens, rank), evaluated in float32 as upstream does."""
        coords = window_coordinates(window, self.to_hidden.device)
        feats = fourier_features(coords, self.n_freqs)
        hidden = torch.relu(feats @ self.to_hidden.float() + self.hidden_b.float())
        return hidden @ self.to_q.float(), hidden @ self.to_k.float()

    def _cached(self, key: tuple, build: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, ...]:
        """``build()`` once per key outside training (gradients need a fresh graph there).

        The weights' storage and version are part of the validity check: loading new weights invalidates it.
        """
        if (self.training and torch.is_grad_enabled()) or torch.compiler.is_compiling():
            return build()  # compiled graphs cannot check the weights' identity: the MLP is traced instead
        params = (self.to_hidden, self.hidden_b, self.to_q, self.to_k)
        weights_id = tuple((p.data_ptr(), p._version) for p in params)
        hit = self._rib_cache.get(key)
        if hit is not None and hit[0] == weights_id:
            return hit[1]
        with torch.no_grad():
            value = build()
        self._rib_cache[key] = (weights_id, value)
        return value

    def positional_factors(self, window: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Factors in ``dtype``; cached per (window, dtype, device) outside training."""

        def build() -> tuple[torch.Tensor, torch.Tensor]:
            q, k = self.compute_factors(window)
            return q.to(dtype), k.to(dtype)

        return self._cached(("factors", window, dtype, self.to_hidden.device), build)  # type: ignore[return-value]

    def positional_tails(
        self, window: int, dtype: torch.dtype, kernel_dtype: torch.dtype, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What follows the content channels of q and k: ``[pos_q * R**-0.5, 0...]`` and ``[pos_k, 0...]``.

        (heads, tokens, ``width``) in the kernel's dtype, scaled in the network's ``dtype`` first (as the
        plain concatenation would), zero channels included: the layer copies them in once, with no
        per-forward scaling, concatenation or padding.
        """

        def build() -> tuple[torch.Tensor, torch.Tensor]:
            pos_q, pos_k = self.positional_factors(window, dtype)
            tails = []
            for pos in (pos_q * self.rank**-0.5, pos_k):
                tails.append(F.pad(pos, (0, width - self.rank)).to(kernel_dtype))
            return tails[0], tails[1]

        key = ("tails", window, dtype, kernel_dtype, width, self.to_hidden.device)
        return self._cached(key, build)  # type: ignore[return-value]
