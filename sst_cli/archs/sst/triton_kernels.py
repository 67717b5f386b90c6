"""The Triton kernels behind ``kernels.py``'s custom ops; imported only when one runs (it imports triton).

Both read and write through explicit strides (any layout, channels-last or NCHW), index in 64 bits where a
product can pass 2**31 elements, compute in float32 and round once, to the output's dtype. Only API that
Triton 3.6 (the GPU machine's, with torch 2.11) has too. Under ``TRITON_INTERPRET=1`` (set before triton is
imported) they run on CPU tensors, which is how the tests check them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
import triton
import triton.language as tl

_SQRT_HALF = tl.constexpr(0.7071067811865476)  # a global a kernel reads must be a constexpr


@triton.jit
def _gelu(v):
    return 0.5 * v * (1.0 + tl.math.erf(v * _SQRT_HALF))


@triton.jit
def _hidden_row(p_ptr, row, cols, chans, H, W, s_h, s_w, s_c, chan_ok):
    """GELU(p) on one row for the columns ``cols``, zero outside the image (the conv's zero padding)."""
    rows = cols * 0 + row  # a vector: the interpreter (3.9) mistypes masks combined with a scalar comparison
    ok = ((cols >= 0) & (cols < W) & (rows >= 0) & (rows < H))[:, None] & chan_ok[None, :]
    ptrs = p_ptr + row * s_h + cols[:, None].to(tl.int64) * s_w + chans[None, :] * s_c
    return _gelu(tl.load(ptrs, mask=ok, other=0.0).to(tl.float32))


@triton.jit
def _dwconv3x3_gelu_residual(
    p_ptr, w_ptr, b_ptr, out_ptr, H, W, C,
    sp_b, sp_c, sp_h, sp_w, so_b, so_c, so_h, so_w,
    ROWS: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """``out = h + GELU(dwconv3x3(h) + bias)``, ``h = GELU(p)``, for ROWS rows x BLOCK_W columns x BLOCK_C channels.

    The program walks down its rows keeping the GELU of the two rows above in registers (three column shifts
    each), so each input value goes through GELU 3 * (ROWS + 2) / ROWS times, not 9.
    """
    strips = tl.cdiv(H, ROWS)
    b = tl.program_id(0) // strips
    y0 = (tl.program_id(0) % strips) * ROWS
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    chans = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_ok = chans < C
    taps = w_ptr + chans * 9
    w00 = tl.load(taps + 0, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w01 = tl.load(taps + 1, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w02 = tl.load(taps + 2, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w10 = tl.load(taps + 3, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w11 = tl.load(taps + 4, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w12 = tl.load(taps + 5, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w20 = tl.load(taps + 6, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w21 = tl.load(taps + 7, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    w22 = tl.load(taps + 8, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    bias = tl.load(b_ptr + chans, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    src = p_ptr + b.to(tl.int64) * sp_b
    dst = out_ptr + b.to(tl.int64) * so_b + cols[:, None].to(tl.int64) * so_w + chans[None, :] * so_c
    out_ok = cols < W
    # (above, middle) rows: left, centre and right neighbours of every column
    a_l = tl.zeros([BLOCK_W, BLOCK_C], tl.float32)
    a_c = tl.zeros([BLOCK_W, BLOCK_C], tl.float32)
    a_r = tl.zeros([BLOCK_W, BLOCK_C], tl.float32)
    m_l = tl.zeros([BLOCK_W, BLOCK_C], tl.float32)
    m_c = tl.zeros([BLOCK_W, BLOCK_C], tl.float32)
    m_r = tl.zeros([BLOCK_W, BLOCK_C], tl.float32)
    for i in range(ROWS + 2):
        row = (y0 - 1 + i).to(tl.int64)  # the row below the output row row - 1
        n_l = _hidden_row(src, row, cols - 1, chans, H, W, sp_h, sp_w, sp_c, chan_ok)
        n_c = _hidden_row(src, row, cols, chans, H, W, sp_h, sp_w, sp_c, chan_ok)
        n_r = _hidden_row(src, row, cols + 1, chans, H, W, sp_h, sp_w, sp_c, chan_ok)
        acc = bias + w00 * a_l + w01 * a_c + w02 * a_r
        acc += w10 * m_l + w11 * m_c + w12 * m_r
        acc += w20 * n_l + w21 * n_c + w22 * n_r
        value = m_c + _gelu(acc)
        out_row = row - 1
        out_rows = cols * 0 + out_row  # a vector, as in _hidden_row
        ok = (out_ok & (out_rows >= y0) & (out_rows < H))[:, None] & chan_ok[None, :]
        tl.store(dst + out_row * so_h, value.to(out_ptr.dtype.element_ty), mask=ok)
        a_l, a_c, a_r = m_l, m_c, m_r
        m_l, m_c, m_r = n_l, n_c, n_r


def dwconv3x3_gelu_residual(
    out: torch.Tensor, p: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
    rows: int = 8, block_w: int = 16, block_c: int = 0, num_warps: int = 4,
) -> None:  # fmt: skip
    """Launch the FFN middle on (B, C, H, W) ``p`` into ``out`` (same shape, any strides); ``weight`` (C, 1, 3, 3).

    ``rows``, ``block_w``, ``block_c`` (0: the channels' power of two, at most 32) are the tile, not tuned on a GPU
    yet: compiled for sm_90, 8 x 16 x 32 with 4 warps takes 106 registers a thread and spills none (x 64
    channels: 176).
    """
    b, c, h, w = p.shape
    block_c = block_c or min(32, triton.next_power_of_2(c))
    grid = (b * triton.cdiv(h, rows), triton.cdiv(w, block_w), triton.cdiv(c, block_c))
    with _on(p.device):
        _dwconv3x3_gelu_residual[grid](
            p, weight.contiguous(), bias.contiguous(), out, h, w, c, *p.stride(), *out.stride(),
            ROWS=rows, BLOCK_W=block_w, BLOCK_C=block_c, num_warps=num_warps,
        )  # fmt: skip


@triton.jit
def _merge_windows_gated(
    win_ptr, g_ptr, out_ptr, H, W, C, D, WS, NW, WINDOWS_PER_IMAGE, HP, WP, SHIFT,
    sw_n, sw_h, sw_t, sw_d, sg_b, sg_c, sg_h, sg_w, so_b, so_c, so_h, so_w,
    BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """``out[b, c, y, x] = windows[window, head, token, c % D] * sigmoid(gate[b, c, y, x])`` for one row's tile,
    where image position (y, x) comes from grid cell ((y - SHIFT) mod HP, (x - SHIFT) mod WP)."""
    b = tl.program_id(0) // H
    y = tl.program_id(0) % H
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    chans = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (cols < W)[:, None] & (chans < C)[None, :]
    gy = (y - SHIFT + HP) % HP
    gx = (cols - SHIFT + WP) % WP
    window = (b * WINDOWS_PER_IMAGE + (gy // WS) * NW + gx // WS).to(tl.int64)
    token = ((gy % WS) * WS + gx % WS).to(tl.int64)
    src = win_ptr + window[:, None] * sw_n + token[:, None] * sw_t + (chans // D)[None, :] * sw_h
    value = tl.load(src + (chans % D)[None, :] * sw_d, mask=ok, other=0.0).to(tl.float32)
    pixel = b.to(tl.int64) * sg_b + y.to(tl.int64) * sg_h + cols[:, None].to(tl.int64) * sg_w
    logit = tl.load(g_ptr + pixel + chans[None, :] * sg_c, mask=ok, other=0.0).to(tl.float32)
    gated = value / (1.0 + tl.exp(-logit))
    dst = out_ptr + b.to(tl.int64) * so_b + y.to(tl.int64) * so_h + cols[:, None].to(tl.int64) * so_w
    tl.store(dst + chans[None, :] * so_c, gated.to(out_ptr.dtype.element_ty), mask=ok)


def merge_windows_gated(
    image: torch.Tensor, windows: torch.Tensor, gate_logits: torch.Tensor, window: int, grid_h: int, grid_w: int,
    shift: int, block_w: int = 32, block_c: int = 0,
) -> None:  # fmt: skip
    """Launch the merge: ``windows`` (n, heads, window**2, >= d) over a (grid_h, grid_w) grid into ``image``."""
    b, c, h, w = image.shape
    block_c = block_c or min(64, triton.next_power_of_2(c))
    grid = (b * h, triton.cdiv(w, block_w), triton.cdiv(c, block_c))
    geometry = _window_grid(c, windows.shape[1], window, grid_h, grid_w, shift)
    with _on(image.device):
        _merge_windows_gated[grid](
            windows, gate_logits, image, h, w, c, *geometry, *windows.stride(), *gate_logits.stride(),
            *image.stride(), BLOCK_W=block_w, BLOCK_C=block_c,
        )  # fmt: skip


@triton.jit
def _partition_windows(
    src_ptr, out_ptr, H, W, C, D, WS, NW, WINDOWS_PER_IMAGE, HP, WP, SHIFT, scale,
    ss_b, ss_c, ss_h, ss_w, so_n, so_h, so_t, so_d,
    BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """``out[window, head, token, c % D] = padded[b, c, (gy + SHIFT) mod HP, (gx + SHIFT) mod WP] * scale`` for one
    grid row's tile, where ``padded`` is ``src`` (B, C, H, W) reflect-padded to (HP, WP): the merge's inverse."""
    b = tl.program_id(0) // HP
    gy = tl.program_id(0) % HP
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    chans = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (cols < WP)[:, None] & (chans < C)[None, :]
    y = (gy + SHIFT) % HP
    y = tl.where(y < H, y, 2 * H - 2 - y)  # reflect: padded row H + j is row H - 2 - j
    x = (cols + SHIFT) % WP
    x = tl.where(x < W, x, 2 * W - 2 - x)
    pixel = b.to(tl.int64) * ss_b + y.to(tl.int64) * ss_h + x[:, None].to(tl.int64) * ss_w
    value = tl.load(src_ptr + pixel + chans[None, :].to(tl.int64) * ss_c, mask=ok, other=0.0).to(tl.float32)
    window = (b * WINDOWS_PER_IMAGE + (gy // WS) * NW + cols // WS).to(tl.int64)
    token = ((gy % WS) * WS + cols % WS).to(tl.int64)
    dst = out_ptr + window[:, None] * so_n + token[:, None] * so_t + (chans // D)[None, :].to(tl.int64) * so_h
    tl.store(dst + (chans % D)[None, :] * so_d, (value * scale).to(out_ptr.dtype.element_ty), mask=ok)


def partition_windows(
    out: torch.Tensor, src: torch.Tensor, window: int, grid_h: int, grid_w: int, shift: int, scale: float,
    block_w: int = 32, block_c: int = 0,
) -> None:  # fmt: skip
    """Launch the partition: ``src`` (B, C, H, W) into ``out`` (windows, heads, window**2, >= C / heads) over a
    (grid_h, grid_w) grid rolled by ``-shift``, times ``scale``; ``out``'s other channels are left alone."""
    b, c, h, w = src.shape
    block_c = block_c or min(64, triton.next_power_of_2(c))
    grid = (b * grid_h, triton.cdiv(grid_w, block_w), triton.cdiv(c, block_c))
    geometry = _window_grid(c, out.shape[1], window, grid_h, grid_w, shift)
    with _on(src.device):
        _partition_windows[grid](
            src, out, h, w, c, *geometry, scale, *src.stride(), *out.stride(), BLOCK_W=block_w, BLOCK_C=block_c,
        )  # fmt: skip


def _window_grid(channels: int, heads: int, window: int, grid_h: int, grid_w: int, shift: int) -> tuple[int, ...]:
    """(D, WS, NW, WINDOWS_PER_IMAGE, HP, WP, SHIFT): the window grid as the merge and the partition take it."""
    per_row = grid_w // window
    return channels // heads, window, per_row, (grid_h // window) * per_row, grid_h, grid_w, shift


def _on(device: torch.device) -> AbstractContextManager[object]:
    """Triton launches on the current CUDA device and stream: make that the tensors' (``--device cuda:1``)."""
    return torch.cuda.device(device) if device.type == "cuda" else nullcontext()
