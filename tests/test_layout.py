"""SST's one-layout forward: window moves, fused residual products, aligned depth-wise convs, memory traffic."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from sst_cli import SST
from sst_cli.archs.cpu_kernel import kernel_problem
from sst_cli.archs.sst import kernels, layers
from sst_cli.archs.sst.fused import add_projection, projection_buffer
from sst_cli.archs.sst.windows import axis_pieces, grid_pieces, kept_queries, merge_gated, partition_into

TINY = {"dim": 16, "window_sizes": (4, 8), "num_heads": (2, 4), "ranks": (3, 5), "n_blocks": 2}
SHIFTED = {"dim": 12, "window_sizes": (4, 4), "num_heads": (2, 2), "ranks": (3, 3), "n_blocks": 2}


def _model(**kwargs: object) -> SST:
    torch.manual_seed(0)
    model = SST(**kwargs).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.1)
    return model


@pytest.mark.parametrize("size,window,shift", [(13, 4, 0), (16, 8, 0), (13, 4, 2), (3, 8, 4), (9, 8, 4), (1, 4, 2)])
def test_axis_pieces_cover_every_position_once_from_the_right_cell(size: int, window: int, shift: int) -> None:
    padded = -(-size // window) * window
    seen = {}
    for p in axis_pieces(size, padded, window, shift):
        assert p.repeat == 1 or p.length == window
        for k in range(p.repeat):
            for i in range(p.length):
                seen[p.start + k * p.length + i] = (p.window + k) * window + p.offset + i
    assert seen == {y: (y - shift) % padded for y in range(size)}


@pytest.mark.parametrize("size,window,shift", [(13, 4, 0), (16, 8, 0), (13, 4, 2), (5, 8, 4), (9, 8, 4), (3, 4, 2)])
def test_grid_pieces_read_the_reflected_rolled_position_of_every_cell(size: int, window: int, shift: int) -> None:
    padded = -(-size // window) * window
    reflected = list(range(size)) + [size - 2 - j for j in range(padded - size)]  # reflect padding
    strip = reflected[size:]
    seen = {}
    for p in grid_pieces(size, padded, window, shift):
        for k in range(p.repeat):
            for i in range(p.length):
                source = p.start + k * p.length + i
                seen[(p.window + k) * window + p.offset + i] = strip[source] if p.kind else source
    assert seen == {g: reflected[(g + shift) % padded] for g in range(padded)}


@pytest.mark.parametrize("shift", [0, 2])
@pytest.mark.parametrize("size", [(7, 10), (8, 8), (5, 3)])
def test_partition_into_is_pad_roll_and_window_copies(shift: int, size: tuple[int, int]) -> None:
    b, heads, d, ws = 2, 2, 3, 4
    h, w = size
    grid = (-(-h // ws) * ws, -(-w // ws) * ws)
    qkv = torch.randn(b, 3 * heads * d, h, w).contiguous(memory_format=torch.channels_last)
    n = b * grid[0] * grid[1] // ws**2
    parts = [torch.full((n, heads, ws * ws, d + 2), 7.0) for _ in range(3)]
    partition_into(parts, qkv, ws, grid, shift, 0.5)
    padded = F.pad(qkv, (0, grid[1] - w, 0, grid[0] - h), mode="reflect")
    padded = torch.roll(padded, (-shift, -shift), (2, 3))
    windows = padded.view(b, 3, heads, d, grid[0] // ws, ws, grid[1] // ws, ws).permute(1, 0, 4, 6, 2, 5, 7, 3)
    for i, part in enumerate(parts):
        expected = windows[i].reshape(n, heads, ws * ws, d) * (0.5 if i == 0 else 1.0)
        assert torch.equal(part[..., :d], expected)
        assert (part[..., d:] == 7.0).all()  # other channels untouched


@pytest.mark.parametrize("shift", [0, 2])
@pytest.mark.parametrize("channels_last", [False, True])
def test_merge_gated_is_roll_crop_and_multiply(shift: int, channels_last: bool) -> None:
    b, heads, d, ws, h, w = 2, 2, 3, 4, 7, 10
    hp, wp = 8, 12
    out = torch.randn(b * (hp // ws) * (wp // ws), heads, ws * ws, d + 2)
    gate = torch.rand(b, heads * d, h, w)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    image = torch.empty(b, heads * d, h, w).contiguous(memory_format=layout)
    merge_gated(out, gate, image, ws, (hp, wp), shift)
    plain = out[..., :d].reshape(b, hp // ws, wp // ws, heads, ws, ws, d).permute(0, 3, 6, 1, 4, 2, 5)
    plain = torch.roll(plain.reshape(b, heads * d, hp, wp), (shift, shift), (2, 3))[:, :, :h, :w] * gate
    assert torch.equal(image, plain)


@pytest.mark.parametrize("size,window,shift", [((7, 10), 4, 0), ((7, 10), 4, 2), ((13, 5), 8, 4), ((9, 16), 8, 4)])
def test_kept_queries_are_exactly_the_outputs_merge_reads(size: tuple[int, int], window: int, shift: int) -> None:
    h, w = size
    grid = (-(-h // window) * window, -(-w // window) * window)
    groups = kept_queries(size, grid, window, shift, 2, torch.device("cpu"))
    assert groups is not None
    pairs = [(int(win), int(tok)) for wins, toks in groups for win in wins for tok in toks]
    assert len(pairs) == len(set(pairs))  # each once
    cols, per_image = grid[1] // window, (grid[0] // window) * (grid[1] // window)
    expected = {
        (b * per_image + gy // window * cols + gx // window, gy % window * window + gx % window)
        for b in range(2)
        for gy in range(grid[0])
        for gx in range(grid[1])
        if (gy + shift) % grid[0] < h and (gx + shift) % grid[1] < w  # grid cell g shows position (g + shift) mod
    }
    assert set(pairs) == expected
    assert kept_queries((8, 16), (8, 16), 8, 4, 2, torch.device("cpu")) is None  # nothing cropped: all kept


@pytest.mark.parametrize("backend", ["auto", "native", "sdpa", "sdpa-bias", "math"])
@pytest.mark.parametrize("kwargs", [TINY, SHIFTED])
def test_left_out_queries_are_never_read_and_change_nothing(
    backend: str, kwargs: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows left out by ``run_plan_rows`` are poisoned with NaN: the output stays finite and equal to the plain path."""
    if backend == "native" and kernel_problem() is not None:
        pytest.skip(f"no CPU kernel here: {kernel_problem()}")
    model = _model(**kwargs, upscaling_factor=2)
    model.set_attention_backend(backend)
    computed = []

    def poisoned(plan, q, k, v, groups, bias=None):  # type: ignore[no-untyped-def]
        out = run_plan_rows(plan, q, k, v, groups, bias=bias)
        keep = torch.zeros(out.shape[0], out.shape[2], dtype=torch.bool)
        for items, rows in groups:
            keep[items[:, None], rows] = True
        computed.append(int(keep.sum()) / keep.numel())
        return out.masked_fill(~keep[:, None, :, None], float("nan"))

    run_plan_rows = layers.run_plan_rows
    monkeypatch.setattr(layers, "run_plan_rows", poisoned)
    x = torch.rand(2, 3, 13, 10)
    with torch.no_grad():
        fused = model(x)
        with model.reference_path():
            plain = model(x)
    assert computed and min(computed) < 0.75  # rows were left out (13 x 10 on a 16 x 16 grid: 51%)
    torch.testing.assert_close(fused, plain, atol=2e-5, rtol=0)


def test_add_projection_is_residual_plus_conv() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(12, 8, 1)
    a = torch.randn(2, 12, 5, 7)
    residual = torch.randn(2, 8, 5, 7).contiguous(memory_format=torch.channels_last)
    expected = residual + conv(a)
    rows, image = projection_buffer(a, 12)
    image.copy_(a)
    with torch.no_grad():
        got = add_projection(residual, rows, conv)
    assert got is residual  # in place
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kwargs", [TINY, SHIFTED])
@pytest.mark.parametrize("channels_last", [None, False])
def test_fused_forward_matches_the_plain_path_and_autograd_path(kwargs: dict, channels_last: bool | None) -> None:
    model = _model(**kwargs, upscaling_factor=2)
    model.channels_last = channels_last
    x = torch.rand(2, 3, 13, 10)
    with torch.no_grad():
        fused = model(x)
        with model.reference_path():
            plain = model(x)
    graph = model(x)  # autograd on: the step-by-step path, differentiable
    assert graph.requires_grad
    torch.testing.assert_close(fused, plain, atol=2e-5, rtol=0)
    torch.testing.assert_close(graph.detach(), plain, atol=2e-5, rtol=0)


class _Writes(TorchDispatchMode):
    """Bytes written by ops other than convolutions, matrix products and attention (``../shared/bench/traffic.py``)."""

    COMPUTE = ("conv", "mm", "matmul", "linear", "scaled_dot_product", "attention")

    def __init__(self) -> None:
        super().__init__()
        self.other = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name.startswith(("empty", "new_empty")) or any(c in name for c in self.COMPUTE):
            return out
        if name.endswith("_") and args and isinstance(args[0], torch.Tensor):
            self.other += args[0].numel() * args[0].element_size()
            return out
        outs = out if isinstance(out, (tuple, list)) else [out]
        self.other += sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor)
                          and not any(o is a for a in args))  # fmt: skip
        return out


def _traffic_per_pixel_layer(kwargs: dict, height: int, width: int) -> float:
    model = _model(**kwargs, upscaling_factor=2).to("meta").to(torch.bfloat16)
    x = torch.empty(1, 3, height, width, device="meta", dtype=torch.bfloat16)
    with torch.inference_mode(), _Writes() as writes:
        model(x)
    layers = len(kwargs["window_sizes"]) * kwargs["n_blocks"]
    return writes.other / (height * width * kwargs["dim"] * 2 * layers)


TRAFFIC_CONFIG = {**TINY, "dim": 32, "num_heads": (4, 4), "ranks": (4, 4)}


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed: meta, like CUDA, "
                    "takes the plain path (test_memory_traffic_of_the_plain_steps_does_not_grow_back)")  # fmt: skip
def test_memory_traffic_does_not_grow_back() -> None:
    """Non-compute writes per layer, in units of one bf16 activation (C x H x W), on the meta device.

    Before the layout work (issue 25) this config wrote 20.2 units per layer; with the fused window moves, the
    residual products and v's padding left unwritten, 16.7; with the fused kernels (``kernels.py``: the FFN's
    GELU, GELU and add, 3 x 1.25 units at this hidden width, and the gate's sigmoid, 1 unit) 12.0. A new
    full-size write per layer (1 unit) breaks the bound. (A window-aligned size, so no padding enters it.)
    """
    units = _traffic_per_pixel_layer(TRAFFIC_CONFIG, 32, 64)
    assert 11.0 < units < 12.5, units  # the lower bound catches the counter itself going blind


def test_memory_traffic_of_the_plain_steps_does_not_grow_back() -> None:
    """The same figure where the kernels do not run (no triton): 16.7 units per layer."""
    with kernels.disabled():
        units = _traffic_per_pixel_layer(TRAFFIC_CONFIG, 32, 64)
    assert 15.0 < units < 17.2, units


def test_projection_weight_is_rebuilt_when_the_weights_change() -> None:
    """The bias-augmented weight is kept between forwards, never past a change of the weights."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(12, 8, 1)
    a = torch.randn(2, 12, 5, 7)
    rows, image = projection_buffer(a, 12)
    image.copy_(a)
    for step in range(3):
        residual = torch.zeros(2, 8, 5, 7).contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            expected = conv(a)
            got = add_projection(residual, rows, conv)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        with torch.no_grad():  # changed in place: the tensors' versions move
            if step == 0:
                conv.bias.add_(1.0)
            else:
                conv.load_state_dict({"weight": conv.weight * 2, "bias": conv.bias.clone()})
