"""Noise as a function of the position in the whole image, so that tiles of one image agree.

SSTReal adds Gaussian noise (sigma 1) to the bicubic upsampled input before its single network
evaluation. The authors draw it with ``randn_like`` for the whole (padded) image; drawn per tile that way,
every tile would see other noise than the whole image, and neighbouring tiles would disagree at their seams.
Here the noise of an HR pixel depends only on the seed and its position: the plane is cut into fixed
``BLOCK`` x ``BLOCK`` blocks, each drawn from its own generator seeded by a hash of (seed, block row, block
column). A tile draws only the blocks it covers (memory grows with the tile, not with the image), and any
tiling of an image sees exactly the noise of the whole image. Drawn on the CPU in float32, so the noise is
the same on every device.
"""

from __future__ import annotations

import torch

BLOCK = 128  # HR pixels per block side: few generators per tile, little waste at tile edges
_MASK = (1 << 64) - 1


def _mix(value: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit integers that spreads every input bit."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def block_seed(seed: int, row: int, column: int) -> int:
    """The generator seed of one block: distinct blocks and seeds give unrelated streams."""
    return _mix(_mix(_mix(seed & _MASK) ^ (row & _MASK)) ^ (column & _MASK))


def position_noise(seed: int, top: int, left: int, height: int, width: int, channels: int = 3) -> torch.Tensor:
    """(channels, height, width) standard normal noise of the HR region at (top, left), float32 on the CPU."""
    if height < 1 or width < 1:
        raise ValueError(f"noise region must be non-empty, got {height}x{width}")
    if top < 0 or left < 0:
        raise ValueError(f"noise region must start inside the plane, got ({top}, {left})")
    r0, r1 = top // BLOCK, (top + height - 1) // BLOCK
    c0, c1 = left // BLOCK, (left + width - 1) // BLOCK
    canvas = torch.empty(channels, (r1 - r0 + 1) * BLOCK, (c1 - c0 + 1) * BLOCK)
    generator = torch.Generator()
    for row in range(r0, r1 + 1):
        for column in range(c0, c1 + 1):
            generator.manual_seed(block_seed(seed, row, column))
            y, x = (row - r0) * BLOCK, (column - c0) * BLOCK
            canvas[:, y : y + BLOCK, x : x + BLOCK] = torch.randn(channels, BLOCK, BLOCK, generator=generator)
    y, x = top - r0 * BLOCK, left - c0 * BLOCK
    return canvas[:, y : y + height, x : x + width]
