"""RIB: rank-factorized implicit neural bias.

Instead of a relative-position bias table (which rules out FlashAttention), each layer maps
Fourier features of the window's pixel coordinates through a tiny MLP to low-rank positional
queries and keys. Concatenated to the content q/k they add ``pos_q @ pos_k^T`` to the logits
inside one dot product. The factors depend only on the window size and the weights, so
inference computes them once and reuses them.
"""

from __future__ import annotations

import torch
from torch import nn


def window_coordinates(window: int) -> torch.Tensor:
    """(window*window, 2) pixel-centre coordinates ``(x, y)`` in (-1, 1), row-major (y outer)."""
    centres = 2.0 * (torch.arange(window, dtype=torch.float32) + 0.5) / window - 1.0
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
        self._rib_cache: dict[tuple, tuple[tuple, tuple[torch.Tensor, torch.Tensor]]] = {}
        if not self.to_hidden.is_meta:
            for p in (self.to_hidden, self.to_q, self.to_k):
                nn.init.trunc_normal_(p, std=0.02)
            nn.init.zeros_(self.hidden_b)

    def compute_factors(self, window: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positional (q, k) factors, (heads, tokens, rank), evaluated in float32 as upstream does."""
        coords = window_coordinates(window).to(self.to_hidden.device)
        feats = fourier_features(coords, self.n_freqs)
        hidden = torch.relu(feats @ self.to_hidden.float() + self.hidden_b.float())
        return hidden @ self.to_q.float(), hidden @ self.to_k.float()

    def positional_factors(self, window: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Factors in ``dtype``; cached per (window, dtype, device) outside training."""
        if self.training and torch.is_grad_enabled():
            q, k = self.compute_factors(window)
            return q.to(dtype), k.to(dtype)
        params = (self.to_hidden, self.hidden_b, self.to_q, self.to_k)
        # The weights' storage and version are part of the key: loading new weights invalidates it.
        weights_id = tuple((p.data_ptr(), p._version) for p in params)
        key = (window, dtype, self.to_hidden.device)
        hit = self._rib_cache.get(key)
        if hit is not None and hit[0] == weights_id:
            return hit[1]
        with torch.no_grad():
            q, k = self.compute_factors(window)
        factors = (q.to(dtype), k.to(dtype))
        self._rib_cache[key] = (weights_id, factors)
        return factors
