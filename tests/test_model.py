"""The network against the official golden vectors, plus sizes, caching and attention backends."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import GOLDEN, golden_config, needs_golden
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from sst_cli import SST, SSTConfig, create_model, load_model
from sst_cli.archs.attention import attend, check_backend
from sst_cli.archs.sst.layers import WindowAttention
from sst_cli.archs.sst.rib import fourier_features, window_coordinates
from sst_cli.errors import ConfigError

TOLERANCE = 5e-5  # golden/README.md: about 30x the float32 noise floor


def _golden_io(case: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(GOLDEN / f"{case}_io.safetensors"))


@needs_golden
@pytest.mark.parametrize("case", ["light_x2", "mini_x3"])
def test_reproduces_golden_outputs(case: str) -> None:
    model = load_model(GOLDEN / f"{case}.pth", config=golden_config(case))
    twin = load_model(GOLDEN / f"{case}.safetensors", config=golden_config(case))
    theirs = twin.state_dict()  # both formats must hold the same tensors, so one forward pass checks both
    assert set(theirs) == set(model.state_dict())
    assert all(torch.equal(value, theirs[key]) for key, value in model.state_dict().items())
    io = _golden_io(case)
    with torch.no_grad():
        for name in ("a", "b"):
            out = model(io[f"input_{name}"])
            assert out.shape == io[f"output_{name}"].shape
            assert (out - io[f"output_{name}"]).abs().max().item() <= TOLERANCE


def test_training_forward_makes_nothing_on_the_host() -> None:
    """Every tensor of a training step's forward lives on the model's device: on CUDA a tensor made on the host
    and copied over makes the step wait for the GPU (RIB's window coordinates did, once per layer)."""

    class HostTensors(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tree_leaves(out)):
                self.ops.append(str(func))
            return out

    with torch.device("meta"):
        model = create_model("sst-light", scale=2)
    model.train()
    with HostTensors() as seen:
        model(torch.empty(2, 3, 64, 64, device="meta"))
    assert seen.ops == []


def test_coordinates_are_pixel_centres_row_major() -> None:
    coords = window_coordinates(4)
    assert coords.shape == (16, 2)
    assert torch.allclose(coords[0], torch.tensor([-0.75, -0.75]))
    assert torch.allclose(coords[1], torch.tensor([-0.25, -0.75]))  # x moves fastest
    assert torch.allclose(coords[4], torch.tensor([-0.75, -0.25]))
    feats = fourier_features(coords, 10)
    assert feats.shape == (16, 42)
    x, y = coords[:, 0], coords[:, 1]
    assert torch.allclose(feats[:, 2:6], torch.stack([x.sin(), y.sin(), x.cos(), y.cos()], -1))
    fx, fy = 512 * x, 512 * y  # the last band, f = 2**9
    assert torch.allclose(feats[:, 38:42], torch.stack([fx.sin(), fy.sin(), fx.cos(), fy.cos()], -1))


def _light(scale: int = 2, **overrides: object) -> SST:
    torch.manual_seed(0)
    cfg = SSTConfig(
        dim=12, window_sizes=(4, 8, 16), num_heads=2, ranks=(3, 3, 5), n_blocks=1,
        exp_ratio=1.5, upscaling_factor=scale, upsampler_type="pixelshuffle_direct",
    )  # fmt: skip
    return SST(**(cfg.to_kwargs() | overrides)).eval()


@pytest.mark.parametrize("size", [(1, 1), (1, 7), (5, 3), (8, 8), (9, 20), (17, 17)])
def test_any_input_size_gives_a_finite_output_of_the_right_size(size: tuple[int, int]) -> None:
    model = _light(scale=3)
    with torch.no_grad():
        out = model(torch.rand(1, 3, *size))
    assert out.shape == (1, 3, size[0] * 3, size[1] * 3)
    assert torch.isfinite(out).all()


def test_entry_padding_only_below_the_upstream_limit() -> None:
    model = _light()
    assert model.min_side == 9  # largest window 16: upstream's reflect padding needs a side > 8
    calls: list[tuple[int, ...]] = []
    model.proj.register_forward_hook(lambda m, i, o: calls.append(tuple(i[0].shape[-2:])))
    with torch.no_grad():
        model(torch.rand(1, 3, 9, 30))
        model(torch.rand(1, 3, 8, 30))
    assert calls == [(9, 30), (9, 30)]


def test_rib_factors_are_cached_and_refreshed_after_loading() -> None:
    model = _light()
    layer = next(m for m in model.modules() if isinstance(m, WindowAttention))
    count = 0
    original = layer.compute_factors

    def counting(window: int) -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal count
        count += 1
        return original(window)

    layer.compute_factors = counting  # type: ignore[method-assign]
    x = torch.rand(1, 3, 12, 12)
    with torch.no_grad():
        first = model(x)
        model(x)
    assert count == 1
    state = {k: v + 0.01 if k.endswith("to_q") else v for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    with torch.no_grad():
        second = model(x)
    assert count == 2
    assert not torch.equal(first, second)


def test_shift_only_when_all_windows_equal() -> None:
    assert SSTConfig(window_sizes=(8,) * 6).shifted == (False, True) * 3
    assert not any(SSTConfig().shifted)
    model = _light(window_sizes=[8, 8, 8], ranks=3)
    with torch.no_grad():
        assert model(torch.rand(1, 3, 20, 12)).shape == (1, 3, 40, 24)


@pytest.mark.parametrize("dq,dv", [(16, 8), (13, 13), (40, 30)])
def test_attention_backends_agree(dq: int, dv: int) -> None:
    q, k, v = torch.randn(3, 2, 64, dq), torch.randn(3, 2, 64, dq), torch.randn(3, 2, 64, dv)
    expected = torch.softmax(q.double() @ k.double().transpose(-1, -2), -1) @ v.double()
    for backend in ("auto", "sdpa", "math"):
        assert torch.allclose(attend(q, k, v, backend).double(), expected, atol=1e-5)


def test_backend_selection_is_runtime_and_validated() -> None:
    model = _light()
    x = torch.rand(1, 3, 20, 20)
    with torch.no_grad():
        default = model(x)
        model.set_attention_backend("math")
        assert torch.allclose(model(x), default, atol=1e-5)
    with pytest.raises(ConfigError, match="unknown attention backend"):
        check_backend("xformers")
    for name in ("flash-attn", "fa3"):
        try:
            check_backend(name)
        except ConfigError as exc:
            assert "install" in str(exc)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"attn_type": "RPB"}, "attn_type"),
        ({"upsampler_type": "nearest"}, "upsampler_type"),
        ({"ranks": [1, 2]}, "ranks"),
        ({"dim": 50, "num_heads": 6}, "divisible"),
        ({"window": 8}, "unknown SST config key"),
        # JSON of the wrong type answered "not all arguments converted during string formatting" and the like
        ({"dim": "sixty"}, "SST config key dim: expected an integer, got 'sixty'"),
        ({"dim": None}, "SST config key dim: expected an integer, got None"),
        ({"window_sizes": [[4, 4]]}, r"window_sizes: expected an integer or a list of integers, got \[\[4, 4\]\]"),
        ({"window_sizes": 16}, r"window_sizes must be a list \(one window per layer\), got 16"),
        ({"exp_ratio": "2"}, "SST config key exp_ratio: expected a number"),
        # out-of-range numbers met torch's own errors (integer modulo by zero, negative dimension) or trained
        ({"num_heads": [6, 0, 6, 6, 6, 6]}, r"num_heads must be positive integers, got \[6, 0, 6"),
        ({"num_heads": -3}, "num_heads must be positive integers"),
        ({"ranks": 0}, "ranks must be positive integers"),
        ({"dim": 0}, "dim must be a positive integer, got 0"),
        ({"dim": -48}, "dim must be a positive integer, got -48"),
        ({"exp_ratio": -1}, "exp_ratio -1 gives no feed-forward channels for dim 180"),
        ({"exp_ratio": float("nan")}, "exp_ratio nan gives no feed-forward channels"),
        ({"rib_hidden_dim": 0}, "rib_hidden_dim must be a positive integer"),
        ({"rib_n_freqs": -1}, "rib_n_freqs must be a positive integer"),
        ({"n_blocks": 0}, "n_blocks must be a positive integer, got 0"),
        ({"intermediate_dim": -1}, "intermediate_dim must be a positive integer, got -1"),
    ],
)
def test_bad_configs_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SST(**kwargs)


def test_tiling_hints_describe_the_network() -> None:
    model = _light()
    assert model.tile_align == 16
    # one group of windows 4, 8, 16: proj 1 -> 4+1 -> 8+1 -> 16+1, tail conv, body conv, upsampler conv
    assert model.exact_context == 20
    assert model.activation_bytes(64, 64) > model.activation_bytes(32, 32) > 0
