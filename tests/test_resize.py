"""MATLAB bicubic imresize: bit-exact against the benchmark LR files, plus hand-checked weights and API rules."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import DATASETS, needs_datasets
from PIL import Image

from sst_cli.errors import ConfigError
from sst_cli.resize import imresize, resize_matrix


def _read(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path))


def _modcrop(image: np.ndarray, scale: int) -> np.ndarray:
    height, width = image.shape[:2]
    return image[: height - height % scale, : width - width % scale]


def _keys(t: float) -> float:
    """The a = -0.5 cubic kernel, written out independently of the module."""
    t = abs(t)
    if t <= 1:
        return 1.5 * t**3 - 2.5 * t**2 + 1
    if t <= 2:
        return -0.5 * t**3 + 2.5 * t**2 - 4 * t + 2
    return 0.0


# ------------------------------------------------------------------------------------- reference files


@needs_datasets
@pytest.mark.parametrize("scale", [2, 3, 4])
@pytest.mark.parametrize("dataset", ["Set5", "Set14"])
def test_bit_exact_to_benchmark_lr_files(dataset: str, scale: int) -> None:
    """The EDSR LR files are MATLAB imresize(HR, 1/s, 'bicubic') output: every value must match."""
    paths = sorted((DATASETS / dataset / "HR").glob("*.png"))
    assert len(paths) == {"Set5": 5, "Set14": 14}[dataset]
    for path in paths:
        hr = _modcrop(_read(path), scale)
        expected = _read(DATASETS / dataset / "LR_bicubic" / f"X{scale}" / f"{path.stem}x{scale}.png")
        result = imresize(hr, 1 / scale)
        assert result.dtype == np.uint8 and result.shape == expected.shape, path.name
        assert np.array_equal(result, expected), f"{path.name} x{scale}: {np.mean(result != expected):.2%} differ"


@needs_datasets
@pytest.mark.parametrize("name", ["3096", "42049", "69015"])
def test_b100_selfexsr_files_nearly_match(name: str) -> None:
    """SelfExSR's B100 LR came from another MATLAB pipeline: ~1% of values differ (README), never many."""
    hr = _read(DATASETS / "B100" / "HR" / f"{name}.png")
    for scale in (2, 3, 4):
        expected = _read(DATASETS / "B100" / "LR_bicubic" / f"X{scale}" / f"{name}x{scale}.png")
        result = imresize(_modcrop(hr, scale), 1 / scale)
        assert result.shape == expected.shape
        assert np.mean(result != expected) < 0.03, f"{name} x{scale}"


@needs_datasets
def test_skipping_intermediate_rounding_is_not_bit_exact() -> None:
    """One float pass rounded at the end (BasicSR's way) misses MATLAB's files: the exact test can fail."""
    mismatches = 0
    for path in sorted((DATASETS / "Set5" / "HR").glob("*.png")):
        for scale in (2, 4):
            hr = _modcrop(_read(path), scale)
            expected = _read(DATASETS / "Set5" / "LR_bicubic" / f"X{scale}" / f"{path.stem}x{scale}.png")
            single = np.floor(np.clip(imresize(hr.astype(np.float64), 1 / scale), 0, 255) + 0.5).astype(np.uint8)
            mismatches += not np.array_equal(single, expected)
    assert mismatches > 0


# ----------------------------------------------------------------------------------- hand-checked weights


def test_weights_4_to_2_by_hand() -> None:
    """Scale 1/2: kernel h(t) = cubic(t/2)/2 over 8 px; output 1 sits at u = 1.5 (1-based).

    Taps at 1-based input -2..5 (distance 3.5 .. -3.5) weigh (-3, -9, 29, 111, 111, 29, -9, -3)/256, which
    already sum to 1; mirroring folds -2, -1, 0 onto 3, 2, 1 and 5 onto 4.
    """
    taps = [_keys(d / 2) / 2 for d in (3.5, 2.5, 1.5, 0.5, -0.5, -1.5, -2.5, -3.5)]
    assert taps == [w / 256 for w in (-3, -9, 29, 111, 111, 29, -9, -3)]
    first = [taps[2] + taps[3], taps[1] + taps[4], taps[0] + taps[5], taps[6] + taps[7]]
    assert first == [35 / 64, 51 / 128, 13 / 128, -3 / 64]
    matrix = resize_matrix(4, 2, 0.5)
    assert matrix.tolist() == [first, first[::-1]]
    column = np.array([[10.0], [20.0], [40.0], [80.0]])
    # 35/64*10 + 51/128*20 + 13/128*40 - 3/64*80 = 13.75, and the mirror image for the second output
    assert imresize(column, size=(2, 1))[:, 0].tolist() == [13.75, 61.25]


def test_weights_upscale_interior_by_hand() -> None:
    """Scale 2: output 7 (1-based) maps to u = 7/2 + 1/4 = 3.75, so inputs 2..5 get cubic(1.75, .75, .25, 1.25)."""
    row = resize_matrix(8, 16, 2.0)[6]
    expected = [0.0, _keys(1.75), _keys(0.75), _keys(0.25), _keys(1.25), 0.0, 0.0, 0.0]
    assert row.tolist() == expected
    assert expected[1:5] == [-3 / 128, 29 / 128, 111 / 128, -9 / 128]


def test_weight_matrix_is_cached_and_read_only() -> None:
    matrix = resize_matrix(9, 5, 5 / 9)
    assert not matrix.flags.writeable
    with pytest.raises(ValueError):
        matrix[0, 0] = 1.0
    with pytest.raises(ValueError):
        matrix.flags.writeable = True
    assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-15)
    assert np.shares_memory(matrix, resize_matrix(9, 5, 5 / 9))


# ------------------------------------------------------------------------------------------- behaviour


def test_scale_one_is_identity() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (13, 7, 3), dtype=np.uint8)
    assert np.array_equal(imresize(image, 1.0), image)
    floats = rng.random((6, 9)).astype(np.float32)
    same = imresize(floats, 1)
    assert same.dtype == np.float32 and np.array_equal(same, floats) and same is not floats
    tensor = torch.from_numpy(floats)
    out = imresize(tensor, 1.0)
    assert torch.equal(out, tensor) and out.data_ptr() != tensor.data_ptr()


@pytest.mark.parametrize("scale", [2, 3, 2.5, 0.5, 1 / 3])
def test_constant_image_stays_constant(scale: float) -> None:
    out = imresize(np.full((12, 10, 3), 200, np.uint8), scale)
    assert out.shape == (math.ceil(12 * scale), math.ceil(10 * scale), 3)
    assert np.all(out == 200)
    floats = imresize(np.full((12, 10), 0.37), scale)
    assert np.allclose(floats, 0.37, rtol=0, atol=1e-14)


def test_output_size_rounds_up_like_matlab() -> None:
    assert imresize(np.zeros((10, 7)), 0.5).shape == (5, 4)
    assert imresize(np.zeros((10, 7, 2)), size=(3, 20)).shape == (3, 20, 2)
    assert imresize(torch.zeros(2, 3, 10, 7), 1.5).shape == (2, 3, 15, 11)


def test_smaller_factor_goes_first() -> None:
    """With per-pass rounding the order changes values, so check it: height first here, width first there."""
    image = np.random.default_rng(1).integers(0, 256, (20, 30), dtype=np.uint8)
    rows_first = imresize(imresize(image, size=(10, 30)), size=(10, 45))
    cols_first = imresize(imresize(image, size=(20, 45)), size=(10, 45))
    assert not np.array_equal(rows_first, cols_first)
    assert np.array_equal(imresize(image, size=(10, 45)), rows_first)  # factors 0.5 (H) < 1.5 (W)
    wide_first = imresize(imresize(image, size=(20, 15)), size=(40, 15))
    assert np.array_equal(imresize(image, size=(40, 15)), wide_first)  # factors 2 (H) > 0.5 (W)
    square = np.random.default_rng(2).integers(0, 256, (24, 24), dtype=np.uint8)
    tie = imresize(imresize(square, size=(8, 24)), size=(8, 8))  # equal factors: rows first
    assert np.array_equal(imresize(square, 1 / 3), tie)


def test_uint8_clips_floats_do_not() -> None:
    edge = np.zeros((8, 8), np.uint8)
    edge[:, 4:] = 255
    floats = imresize(edge.astype(np.float64), 4)
    assert floats.min() < 0 and floats.max() > 255  # the cubic overshoots at an edge
    ints = imresize(edge, 4)
    assert ints.dtype == np.uint8
    assert np.array_equal(ints, np.floor(np.clip(floats, 0, 255) + 0.5))  # one pass along W: same thing
    wide = imresize(np.full((4, 4), 65535, np.uint16), 2)
    assert wide.dtype == np.uint16 and np.all(wide == 65535)


@pytest.mark.parametrize(
    ("scale", "size"), [(0.5, None), (1 / 3, None), (2.0, None), (2.5, None), (None, (17, 40)), (None, (9, 4))]
)
def test_torch_matches_numpy(scale: float | None, size: tuple[int, int] | None) -> None:
    image = np.random.default_rng(3).random((23, 19, 3)) * 255
    expected = imresize(image, scale, size=size)
    tensor = imresize(torch.from_numpy(image).permute(2, 0, 1), scale, size=size)
    assert tensor.dtype == torch.float64
    np.testing.assert_allclose(tensor.permute(1, 2, 0).numpy(), expected, rtol=0, atol=1e-11)
    as_uint8 = np.floor(image).astype(np.uint8)
    exact = imresize(torch.from_numpy(as_uint8).permute(2, 0, 1).contiguous(), scale, size=size)
    assert exact.dtype == torch.uint8
    assert np.array_equal(exact.permute(1, 2, 0).numpy(), imresize(as_uint8, scale, size=size))


def test_batched_tensor_equals_per_image() -> None:
    batch = torch.rand(3, 2, 31, 26, dtype=torch.float64)
    out = imresize(batch, 0.5)
    assert out.shape == (3, 2, 16, 13)
    for n in range(3):
        for c in range(2):
            torch.testing.assert_close(out[n, c], imresize(batch[n, c], 0.5), rtol=0, atol=1e-12)
    large = torch.rand(2, 1, 400, 8)  # float32, against float64 numpy
    up = imresize(large, size=(700, 8))
    assert up.dtype == torch.float32
    for n in range(2):
        reference = imresize(large[n, 0].double().numpy(), size=(700, 8))
        np.testing.assert_allclose(up[n, 0].numpy(), reference, rtol=0, atol=1e-4)


def test_torch_gradients_flow() -> None:
    image = torch.rand(1, 3, 16, 16, requires_grad=True)
    imresize(image, 0.25).sum().backward()
    assert image.grad is not None and torch.all(torch.isfinite(image.grad))


def test_input_is_not_modified() -> None:
    image = np.random.default_rng(4).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    before = image.copy()
    imresize(image, 2)
    assert np.array_equal(image, before)


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale": 0.5, "size": (2, 2)}, "exactly one"),
        ({}, "exactly one"),
        ({"scale": 0}, "positive"),
        ({"scale": -2.0}, "positive"),
        ({"scale": math.nan}, "positive"),
        ({"scale": math.inf}, "positive"),
        ({"scale": True}, "positive"),
        ({"size": (0, 4)}, "two positive integers"),
        ({"size": (4,)}, "two positive integers"),
        ({"size": (2.5, 4)}, "two positive integers"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        imresize(np.zeros((4, 4)), **kwargs)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="shaped"):
        imresize(np.zeros(4), 2)
    with pytest.raises(ConfigError, match="shaped"):
        imresize(np.zeros((1, 4, 4, 3)), 2)
    with pytest.raises(ConfigError, match="shaped"):
        imresize(torch.zeros(4), 2)
    with pytest.raises(ConfigError, match="empty"):
        imresize(np.zeros((0, 4)), 2)
    with pytest.raises(ConfigError, match="int32"):
        imresize(np.zeros((4, 4), np.int32), 2)
    with pytest.raises(ConfigError, match="int64"):
        imresize(torch.zeros(4, 4, dtype=torch.int64), 2)
    with pytest.raises(ConfigError, match="numpy array or a torch tensor"):
        imresize([[0, 1], [2, 3]], 2)  # type: ignore[call-overload]
    assert issubclass(ConfigError, ValueError)


def test_uint8_sums_each_pixel_tap_by_tap_in_order() -> None:
    """Per pass, sum(w_k * x_k) left to right in float64, then round: written out in plain Python here.

    A BLAS product sums in an order of its own, so a value within a rounding error of x.5 could round either
    way (numpy 1.24 and torch disagreed on this very image); taps in order give one answer everywhere.
    """
    from sst_cli.resize import _taps

    image = np.floor(np.random.default_rng(3).random((23, 19, 3)) * 255).astype(np.uint8)

    def one_pass(rows: list[list[float]], in_size: int, out_size: int) -> list[list[float]]:
        columns, weights = _taps(in_size, out_size, out_size / in_size)
        out = []
        for i in range(out_size):
            line = []
            for j in range(len(rows[0])):
                total = 0.0
                for col, weight in zip(columns[i].tolist(), weights[i].tolist(), strict=True):
                    total += weight * rows[col][j]
                line.append(math.floor(min(max(total, 0.0), 255.0) + 0.5))
            out.append(line)
        return out

    for channel in range(3):
        plane = image[:, :, channel].astype(float).tolist()
        down = one_pass(plane, 23, 17)  # rows first: their factor (17/23) is the smaller
        across = one_pass([list(r) for r in zip(*down, strict=True)], 19, 40)
        expected = np.array(across, dtype=np.uint8).T
        assert np.array_equal(imresize(image, size=(17, 40))[:, :, channel], expected)


@pytest.mark.parametrize("seed", range(6))
def test_uint8_numpy_and_torch_agree_on_random_sizes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (int(rng.integers(5, 60)), int(rng.integers(5, 60)), 3), dtype=np.uint8)
    size = (int(rng.integers(3, 90)), int(rng.integers(3, 90)))
    tensor = imresize(torch.from_numpy(image).permute(2, 0, 1).contiguous(), size=size)
    assert np.array_equal(tensor.permute(1, 2, 0).numpy(), imresize(image, size=size))
