"""Upscaler: tiling exactness and seams on real photos, alpha / gray / arrays, memory planning, failures."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import GOLDEN, golden_config, needs_golden, tiny_sst
from PIL import Image

from sst_cli import SST, Upscaler, create_model
from sst_cli.errors import ConfigError, NonFiniteOutput, OutOfMemory
from sst_cli.runtime import fp32_mode
from sst_cli.tiling import plan_tiles, tile_sides, tiling_cost

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _photo(height: int, width: int) -> np.ndarray:
    """A real photo (bundled example), resized to the requested size, as float32 RGB."""
    img = Image.open(EXAMPLES / "rocket.jpg").convert("RGB").resize((width, height), Image.LANCZOS)
    return np.asarray(img, dtype=np.float32) / 255.0


def _chw(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = ((a.clamp(0, 1) - b.clamp(0, 1)) ** 2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def test_exact_tiling_matches_whole_image_tiny_model() -> None:
    model = tiny_sst()
    x = _chw(_photo(64, 96))
    whole = Upscaler(model, tile=0).run(x).image
    up = Upscaler(model, tile=32, exact=True)
    plan = up.plan(64, 96)
    assert plan.tile == 32 and plan.overlap == 48 and not plan.blend  # context 39 rounded up to L = 16
    assert _relative_error(up.run(x).image, whole) <= 1e-6  # float32 rounding only (kernels see other sizes)
    # with too little context the cut shows
    assert _relative_error(Upscaler(model, tile=32, tile_overlap=16).run(x).image, whole) > 1e-3


def test_shifted_windows_are_never_cut_under_exact() -> None:
    """Equal window sizes shift odd layers, rolling the image around unmasked, so each edge attends to the
    opposite one: --exact tiled such a config with a finite context and differed from the whole by 5e-3."""
    torch.manual_seed(0)
    model = SST(dim=12, window_sizes=[8, 8], num_heads=[2, 2], ranks=[4, 4], n_blocks=1, upscaling_factor=2).eval()
    assert model.describe().exact_context is None
    x = _chw(_photo(96, 96))
    whole = Upscaler(model, tile=0).run(x).image
    up = Upscaler(model, tile=32, exact=True)
    assert up.plan(96, 96).tile == 0  # whole: no context is enough
    assert torch.equal(up.run(x).image, whole)


@needs_golden
def test_exact_tiling_is_identical_to_whole_image_golden_model() -> None:
    model = Upscaler(weights=GOLDEN / "mini_x3.pth", config=golden_config("mini_x3"), tile=0).model
    x = _chw(_photo(48, 256))  # the first tile's context ends at 224 < 256: a real cut
    whole = Upscaler(model, tile=0).run(x).image
    up = Upscaler(model, tile=64, exact=True)
    assert up.plan(48, 256).overlap == 160
    assert torch.equal(up.run(x).image, whole)


@needs_golden
def test_default_overlap_is_seamless_on_a_real_photo() -> None:
    model = Upscaler(weights=GOLDEN / "mini_x3.pth", config=golden_config("mini_x3"), tile=0).model
    x = _chw(_photo(64, 128))
    whole = Upscaler(model, tile=0).run(x).image
    tiled = Upscaler(model, tile=32)
    assert tiled.plan(64, 128).overlap == 32  # 1 x L
    assert _psnr(tiled.run(x).image, whole) >= 45.0
    no_overlap = Upscaler(model, tile=32, tile_overlap=0).run(x).image
    assert _psnr(no_overlap, whole) < 45.0  # the threshold is meaningful: no context shows seams


def test_user_overlap_and_tile_are_aligned() -> None:
    up = Upscaler(tiny_sst(), tile=40, tile_overlap=5)
    plan = up.plan(200, 200)
    assert (plan.tile, plan.overlap, plan.align) == (32, 16, 16)


def _peak_bytes(up: Upscaler, model: SST, height: int, width: int) -> int:
    """Estimated peak of the plan's largest pass: its batch of the largest context box actually cut (a context is
    the core grown by the overlap and clipped to the image, so it is not always the tile plus twice the overlap).
    """
    plan = up.plan(height, width)
    tiles = plan_tiles(height, width, plan.tile, plan.overlap, plan.align)
    return plan.batch * max(model.activation_bytes(*t.context_shape, up.dtype) for t in tiles)


# The budget is counted in the precision the Upscaler runs (auto: bf16 on a GPU, fp32 on the CPU), so both
# are tried on any machine; a test that counted fp32 bytes failed on CUDA, where auto chose bf16.
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_auto_tile_fits_the_memory_budget(precision: str) -> None:
    model = tiny_sst()
    assert Upscaler(model, tile="auto", max_memory=1 << 40, precision=precision).plan(500, 700).tile == 0
    budget = model.activation_bytes(80, 80)
    up = Upscaler(model, tile="auto", max_memory=budget, precision=precision)
    plan = up.plan(500, 700)
    rows, cols = tile_sides(plan.tile)
    assert rows > 0 and rows % 16 == 0 and cols % 16 == 0
    assert _peak_bytes(up, model, 500, 700) <= budget
    # No square tile that fits the same budget computes fewer pixels.
    context = 2 * plan.overlap
    squares = [s for s in range(16, 700, 16) if model.activation_bytes(s + context, s + context, up.dtype) <= budget]
    assert plan.cost(500, 700) <= min(tiling_cost(500, 700, s, plan.overlap) for s in squares)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_auto_tile_shrinks_the_batch_before_the_tile(precision: str) -> None:
    model = tiny_sst()
    said: list[str] = []
    budget = model.activation_bytes(80, 80) * 2
    alone = Upscaler(model, tile="auto", max_memory=budget, precision=precision).plan(300, 300)
    up = Upscaler(model, tile="auto", max_memory=budget, batch=8, precision=precision, on_message=said.append)
    plan = up.plan(300, 300)
    assert plan.tile == alone.tile and 1 <= plan.batch < 8  # the tile a batch of one gets, fewer per pass
    assert _peak_bytes(up, model, 300, 300) <= budget
    up.run(torch.rand(3, 300, 300))
    assert any(s.startswith(f"batch 8 becomes {plan.batch}:") for s in said)


@pytest.mark.parametrize(("budget", "said"), [(1, "1 byte"), (1 << 20, "1 MiB")])
def test_a_budget_below_the_smallest_pass_says_so_once_and_runs(budget: int, said: str) -> None:
    messages: list[str] = []
    up = Upscaler(tiny_sst(), tile="auto", max_memory=budget, on_message=messages.append)
    plan = up.plan(40, 36)
    assert plan.needs > budget and plan.tile
    up.run(torch.rand(3, 40, 36))
    up.run(torch.rand(3, 24, 24))
    warned = [m for m in messages if m.startswith("the memory budget")]
    assert warned == [f"the memory budget of {said} is less than the smallest pass needs ({-(-plan.needs >> 20)} "
                      f"MiB): it runs anyway, in {plan.tile} px tiles"]  # fmt: skip
    assert Upscaler(tiny_sst(), tile="auto", max_memory=2**30).plan(70, 90).needs == 0
    small: list[str] = []  # the smallest tile with context covers the picture: run whole, over budget (was not said)
    whole = Upscaler(tiny_sst(), tile="auto", max_memory=1, on_message=small.append)
    assert whole.plan(8, 8).tile == 0 and whole.plan(8, 8).needs > 1
    whole.run(torch.rand(3, 8, 8))
    assert next(m for m in small if m.startswith("the memory budget")).endswith("it runs anyway, on the whole image")


def test_out_of_memory_halves_the_tile_and_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    messages: list[str] = []
    up = Upscaler(tiny_sst(), tile=64, tile_overlap=16, on_message=messages.append)
    x = _chw(_photo(70, 90))
    expected = Upscaler(up.model, tile=32, tile_overlap=16).run(x).image
    real = up._forward

    def limited(batch: torch.Tensor) -> torch.Tensor:
        if batch.shape[-1] * batch.shape[-2] > 64 * 64:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(batch)

    monkeypatch.setattr(up, "_forward", limited)
    out, used = up.run(x)
    assert used == 32
    assert messages == ["out of memory: retrying with 32 px tiles (later images start at that size)"]
    assert torch.equal(out, expected)


@pytest.mark.parametrize("tile", ["auto", 64])
def test_after_out_of_memory_later_images_start_at_the_size_that_ran(
    monkeypatch: pytest.MonkeyPatch, tile: str | int
) -> None:
    messages: list[str] = []
    up = Upscaler(tiny_sst(), tile=tile, tile_overlap=16, max_memory=2**40, on_message=messages.append)
    real = up._forward
    pixels: list[int] = []

    def limited(batch: torch.Tensor) -> torch.Tensor:
        pixels.append(batch.shape[-1] * batch.shape[-2])
        if batch.shape[-1] * batch.shape[-2] > 64 * 64:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(batch)

    monkeypatch.setattr(up, "_forward", limited)
    up.run(_chw(_photo(70, 90)))
    assert len(messages) == 1 and "out of memory" in messages[0]
    pixels.clear()
    out, used = up.run(_chw(_photo(66, 80)))
    assert sum("out of memory" in m for m in messages) == 1  # the second image was planned within what ran
    assert pixels and max(pixels) <= 64 * 64 and tile_sides(used)[0] > 0
    assert out.shape == (3, 132, 160)


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                   "79.19 GiB of which ... If reserved but unallocated memory is large try ..."),
            " (a single allocation of 2.00 GiB)",
        ),
        (
            RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                         "you tried to allocate 3000012000012 bytes. Error code 12 (Cannot allocate memory)"),
            " (a single allocation of 2,793.98 GiB)",
        ),
        (MemoryError(), ""),
    ],
)  # fmt: skip
def test_out_of_memory_in_the_smallest_tiles_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, raised: BaseException, said: str
) -> None:
    """It failed the file with the allocator's own words (CUDA's: five lines of advice on fragmentation)."""
    up = Upscaler(tiny_sst(), tile=32, tile_overlap=16, on_message=lambda _: None)

    def never_fits(batch: torch.Tensor) -> torch.Tensor:
        raise raised

    monkeypatch.setattr(up, "_forward", never_fits)
    with pytest.raises(OutOfMemory) as info:
        up.run(_chw(_photo(70, 90)))
    assert str(info.value) == (
        f"out of memory on cpu even with one 16 px tile per pass, the smallest pass the network allows{said}; tried "
        "32 px tiles 1 per pass, then 16 px tiles 1 per pass: a device with more memory, or a smaller model, is needed"
    )


def test_out_of_memory_takes_fewer_tiles_per_pass_before_smaller_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """--batch 8 with room for one 48x48 context: it halved only the tile, to 16 px with 8 per pass, and gave up
    advising a device with more memory; now the batch halves to 1 first, the tile stays 32 px, and later images
    start there."""
    messages: list[str] = []
    up = Upscaler(tiny_sst(), tile=32, tile_overlap=16, batch=8, on_message=messages.append)
    x = _chw(_photo(96, 96))
    real = up._forward
    passes: list[int] = []

    def limited(batch: torch.Tensor) -> torch.Tensor:
        if batch.shape[0] * batch.shape[-1] * batch.shape[-2] > 64 * 64:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        passes.append(batch.shape[0])
        return real(batch)

    monkeypatch.setattr(up, "_forward", limited)
    out, used = up.run(x)
    assert used == 32 and set(passes) == {1}
    messages[:] = [m for m in messages if "out of memory" in m]
    assert messages == [
        "out of memory with 4 tiles of 32 px in one pass: retrying with 2 per pass (later images start there)",
        "out of memory with 2 tiles of 32 px in one pass: retrying with 1 per pass (later images start there)",
    ]
    assert torch.equal(out, Upscaler(up.model, tile=32, tile_overlap=16).run(x).image)
    assert up.plan(96, 96).batch == 1, "later images start with what ran"
    passes.clear()
    up.run(x)
    assert sum("out of memory" in m for m in messages) == 2 and set(passes) == {1}

    def never_fits(batch: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(up, "_forward", never_fits)
    with pytest.raises(OutOfMemory, match=r"; tried 32 px tiles 1 per pass, then 16 px tiles 1 per pass: a device"):
        up.run(x)
    fresh = Upscaler(up.model, tile=32, tile_overlap=16, batch=8, on_message=messages.append)
    monkeypatch.setattr(fresh, "_forward", never_fits)
    with pytest.raises(OutOfMemory, match=r"; tried 32 px tiles 4, 2 and 1 per pass, then 16 px tiles 1 per pass"):
        fresh.run(x)


def test_nan_output_is_an_error_with_a_hint() -> None:
    class Broken(torch.nn.Module):
        scale = 2

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.full((x.shape[0], 3, x.shape[2] * 2, x.shape[3] * 2), float("nan"))

    with pytest.raises(NonFiniteOutput, match="NaN"):
        Upscaler(Broken(), tile=0).upscale(np.zeros((8, 8, 3), np.uint8))


def test_arrays_keep_dtype_layout_and_alpha() -> None:
    up = Upscaler(tiny_sst(), tile=0)
    rgba = np.random.default_rng(0).integers(0, 256, (10, 12, 4), dtype=np.uint8)
    out = up.upscale(rgba)
    assert out.shape == (20, 24, 4) and out.dtype == np.uint8
    gray16 = np.random.default_rng(1).integers(0, 65536, (10, 12), dtype=np.uint16)
    out16 = up.upscale(gray16)
    assert out16.shape == (20, 24) and out16.dtype == np.uint16
    flt = np.random.default_rng(2).random((9, 7, 3)).astype(np.float32)
    assert up.upscale(flt).dtype == np.float32
    with pytest.raises(ConfigError, match="image array"):
        up.upscale(np.zeros((4, 4, 5), np.uint8))


def test_alpha_modes_and_constant_alpha_passes_through() -> None:
    rng = np.random.default_rng(3)
    rgba = rng.random((12, 12, 4)).astype(np.float32)
    by_model = Upscaler(tiny_sst(), tile=0, alpha="model").upscale(rgba)[..., 3]
    resized = Upscaler(tiny_sst(), tile=0, alpha="resize").upscale(rgba)[..., 3]
    assert by_model.shape == resized.shape == (24, 24)
    assert by_model.min() >= 0 and by_model.max() <= 1
    assert not np.allclose(by_model, resized)
    rgba[..., 3] = 0.25
    assert np.all(Upscaler(tiny_sst(), tile=0).upscale(rgba)[..., 3] == 0.25)
    opaque = np.dstack([rgba[:5, :5, :3], np.ones((5, 5), np.float32)])  # 12.5 px: rounded up, as the colour is
    assert Upscaler(tiny_sst(), tile=0, outscale=2.5).upscale(opaque).shape == (13, 13, 4)  # failed: 13 vs 12


def test_pil_colour_key_transparency_becomes_alpha_as_for_files(tmp_path: Path) -> None:
    """A PNG's tRNS colour key made alpha for `sst upscale` but went through the network as a colour here."""
    colour = np.random.default_rng(5).integers(0, 200, (8, 10, 3), dtype=np.uint8)
    colour[:, 5:] = (255, 0, 255)
    Image.fromarray(colour).save(tmp_path / "key.png", transparency=(255, 0, 255))
    Image.fromarray(colour[..., 0]).save(tmp_path / "gray.png", transparency=7)
    up = Upscaler(tiny_sst(), tile=0)
    for name, mode in (("key.png", "RGBA"), ("gray.png", "LA")):
        with Image.open(tmp_path / name) as image:
            from_pil = np.asarray(up.upscale(image))
        up.upscale_file(tmp_path / name, tmp_path / f"up-{name}")
        with Image.open(tmp_path / f"up-{name}") as written:
            assert written.mode == mode and np.array_equal(np.asarray(written), from_pil)


def test_pil_gray_stays_gray_and_outscale_resizes() -> None:
    up = Upscaler(tiny_sst(), tile=0, outscale=1.5)
    gray = Image.fromarray(np.random.default_rng(4).integers(0, 256, (10, 14), dtype=np.uint8))
    out = up.upscale(gray)
    assert out.mode == "L" and out.size == (21, 15)
    palette = Image.new("P", (6, 6))
    assert up.upscale(palette).mode == "RGB"  # a palette without transparency gets no alpha


def test_result_sizes_round_half_up_and_count_what_finishing_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """round() is half-to-even: 47x33 at 1.5 gave 70x50 (one side down, the other up)."""
    import sst_cli.upscaler as upscaler

    assert upscaler.result_size(47, 33, 4, 1.5) == (71, 50)
    assert upscaler.result_size(45, 35, 4, 1.5) == (68, 53)
    assert upscaler.result_size(47, 33, 4, 0.5) == (24, 17)
    monkeypatch.setattr(upscaler, "total_ram", lambda: 1000 * 1000 * upscaler.RESULT_BYTES)
    assert upscaler.result_size(250, 250, 4, None) == (1000, 1000)
    with pytest.raises(
        ConfigError, match="the result would be 1004x1000 px, more than the memory this process may use"
    ):
        upscaler.result_size(251, 250, 4, None)
    assert upscaler.result_size(250, 250, 4, 0.5) == (125, 125)
    native = r"^the model's x4 result would be 1004x1000 px before it is resized to 126x125, more than the memory"
    with pytest.raises(ConfigError, match=native):  # it is made whole first: --outscale 0.001 passed the check
        upscaler.result_size(251, 250, 4, 0.5)


def test_result_size_refusals_name_outscale_as_the_caller_gave_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Upscaler(outscale=0.04)`` was told "at --outscale 0.04 ... use --outscale 0.0417 or more" and "lower
    --outscale"; options made by the command line (``cli=True``) still say so."""
    import sst_cli.upscaler as upscaler
    from sst_cli.upscaler import UpscaleOptions

    image = np.zeros((12, 16, 3), np.uint8)
    with pytest.raises(ConfigError) as info:
        Upscaler(tiny_sst(), tile=0, outscale=0.04).upscale(image)
    assert str(info.value) == (
        "a 16x12 px input at outscale=0.04 would give a 1x0 px result, less than 1 px on a side; "
        "use outscale=0.0417 or more"
    )
    cli = Upscaler(tiny_sst(), options=UpscaleOptions(tile=0, outscale=0.04, cli=True))
    with pytest.raises(ConfigError, match=r"at --outscale 0\.04 would .*; use --outscale 0\.0417 or more$"):
        cli.upscale(image)
    monkeypatch.setattr(upscaler, "total_ram", lambda: 1000 * 1000 * upscaler.RESULT_BYTES)
    with pytest.raises(ConfigError, match=r"can hold; lower outscale$"):
        Upscaler(tiny_sst(), tile=0, outscale=100.0).output_size(16, 12)
    with pytest.raises(ConfigError, match=r"can hold; lower --outscale$"):
        upscaler.ScaleOnly(2, 100.0, cli=True).output_size(16, 12)


def test_a_model_without_bf16_keeps_its_weights_under_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` means bf16 on a CUDA GPU: the weights were cast to bf16 before the model was asked whether it
    takes bf16, then cast back, so a model left in fp32 ran with every weight rounded (changes up to 1e-3)."""
    import dataclasses

    import sst_cli.upscaler as upscaler

    model = tiny_sst()
    described = SST.describe
    monkeypatch.setattr(SST, "describe", lambda m: dataclasses.replace(described(m), bf16_safe=False))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setattr(upscaler, "resolve_precision", lambda precision, device: torch.bfloat16)
    up = Upscaler(model, precision="auto")
    assert up.dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in up.model.state_dict().items())
    with pytest.raises(ConfigError, match="do not support bf16"):
        Upscaler(model, precision="bf16")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the user's module untouched


def test_bf16_precision_runs_and_stays_close_to_fp32() -> None:
    model = tiny_sst()
    x = _photo(20, 24)
    fp32 = Upscaler(model, tile=0, precision="fp32").upscale(x)
    bf16 = Upscaler(tiny_sst(), tile=0, precision="bf16")
    assert bf16.dtype == torch.bfloat16
    out = bf16.upscale(x)
    assert out.shape == fp32.shape and np.isfinite(out).all()
    assert np.abs(out - fp32).mean() < 0.05


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"alpha": "blend"}, "unknown alpha mode 'blend'"),
        ({"batch": 0}, "^batch must be at least 1, got 0$"),  # the keyword, not --batch
        ({"tile_overlap": -1}, "^tile_overlap must be 0 or more, got -1$"),  # was "tile overlap", neither spelling
        ({"exact": True, "tile_overlap": 0}, "^exact and tile_overlap exclude each other: exact sets the overlap"),
        ({"max_memory": 0}, "^max_memory must be positive, got 0$"),  # was "the memory budget must ..."
        ({"outscale": -1.0}, "^outscale -1: must be a finite number above 0"),
        ({"outscale": math.inf}, "^outscale inf: must be a finite number above 0"),  # the keyword, not --outscale
        ({"ig_lambda": math.nan}, "^ig_lambda nan: must be a finite number"),
        ({"tile": -3}, "tile"),
        ({"precision": "fp8"}, "unknown precision 'fp8'"),
        ({"attention": "magic"}, "unknown attention backend 'magic'"),
        ({"device": "tpu:9"}, "unknown device"),
    ],
)
def test_bad_options_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Upscaler(tiny_sst(), **kwargs)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"tile_overlap": "x"}, "^tile_overlap must be a whole number, got 'x'$"),
        ({"tile_overlap": 1.5}, "^tile_overlap must be a whole number, got 1.5$"),
        ({"batch": "2"}, "^batch must be a whole number, got '2'$"),
        ({"batch": True}, "^batch must be a whole number, got True$"),
        ({"ig_lambda": "2"}, "^ig_lambda must be a number, got '2'$"),
        ({"outscale": "2"}, "^outscale must be a number, got '2'$"),
        ({"tile": "64"}, "^tile must be 'auto', 0 .* got '64'$"),
        ({"seed": "1"}, "^seed must be a non-negative integer, got '1'$"),
        ({"max_memory": [1]}, "^max_memory must be a number of bytes or a size"),
        ({"exact": "no"}, "^exact must be True or False, got 'no'$"),  # was true: tiled by the receptive field
        ({"exact": 1}, "^exact must be True or False, got 1$"),
        ({"tile": np.float64(64.0)}, r"^tile must be 'auto', 0 .* got (np\.float64\()?64\.0"),  # numpy 1 writes 64.0
    ],
)
def test_option_values_of_the_wrong_type_are_named(kwargs: dict, message: str) -> None:
    """``Upscaler(tile_overlap="x")`` met a bare TypeError ("'<' not supported between ...") from the check."""
    with pytest.raises(ConfigError, match=message):
        Upscaler(_Bicubic(), device="cpu", **kwargs)


def test_tile_takes_any_integer_as_tile_overlap_and_batch_do() -> None:
    """``tile=np.int64(64)`` was refused ('tile must be ... a positive size in pixels') where tile_overlap and batch
    took numpy integers; it is kept as an int, which the planner tests for."""
    up = Upscaler(_Bicubic(), device="cpu", tile=np.int64(64), tile_overlap=np.int64(8), batch=np.int32(2))
    assert up.options.tile == 64 and type(up.options.tile) is int
    assert up.plan(200, 200).tile == 64


def test_fp32_on_cuda_turns_tf32_off_only_while_running() -> None:
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    with fp32_mode(torch.device("cuda"), torch.float32):
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before
    with fp32_mode(torch.device("cuda"), torch.bfloat16):
        assert torch.backends.cudnn.allow_tf32 == before[0]


class _Dimmed(torch.nn.Module):
    """The tiny SST with its output brought into [0, 1], so clamping hides nothing in comparisons."""

    scale = 2

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_sst()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) / 2000 + 0.5


def _count_passes(up: Upscaler, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    passes: list[int] = []
    real = up._forward

    def forward(x: torch.Tensor, origins: object = None) -> torch.Tensor:
        passes.append(x.shape[0])
        return real(x)

    monkeypatch.setattr(up, "_forward", forward)
    return passes


def test_upscale_batch_stacks_images_and_matches_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    up = Upscaler(_Dimmed(), device="cpu", tile=0)
    passes = _count_passes(up, monkeypatch)
    rng = np.random.default_rng(4)
    floats = [rng.random((12, 20, 3)).astype(np.float32) for _ in range(11)]
    stacked = up.upscale_batch(floats)
    assert passes == [8, 3] and up.images_per_pass(12, 20) == 8
    passes.clear()
    single = [up.upscale(image) for image in floats]
    assert passes == [1] * 11
    # float32 matrix products round differently for another number of rows: ~1e-6 of the range, not bit for bit
    for a, b in zip(stacked, single, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    eight = [np.round(image * 255).astype(np.uint8) for image in floats[:4]]
    for a, b in zip(up.upscale_batch(eight), [up.upscale(image) for image in eight], strict=True):
        assert a.dtype == np.uint8 and np.abs(a.astype(int) - b).max() <= 1


def test_images_per_pass_follows_the_memory_budget_and_tiling(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Upscaler(_Dimmed(), device="cpu", tile=0)
    one = probe.planner.activation_bytes(12, 20)
    three = Upscaler(_Dimmed(), device="cpu", tile="auto", max_memory=3 * one + 1)
    assert three.images_per_pass(12, 20) == 3
    passes = _count_passes(three, monkeypatch)
    rgba = np.random.default_rng(5).random((12, 20, 4)).astype(np.float32)
    out = three.upscale_batch([rgba] * 4)
    assert passes[:2] == [3, 1] and out[0].shape == (24, 40, 4)  # then the alpha channels, one by one
    np.testing.assert_allclose(out[3], three.upscale(rgba), rtol=0, atol=1e-5)
    tiled = Upscaler(tiny_sst(), device="cpu", tile=16)
    assert tiled.images_per_pass(40, 40) == 1
    with pytest.raises(ConfigError, match="one size"):
        tiled.upscale_batch([np.zeros((8, 8, 3), np.uint8), np.zeros((8, 9, 3), np.uint8)])


def test_upscale_batch_out_of_memory_runs_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    messages: list[str] = []
    up = Upscaler(_Dimmed(), device="cpu", tile=0, on_message=messages.append)
    real = up._forward

    def forward(x: torch.Tensor, origins: object = None) -> torch.Tensor:
        if x.shape[0] > 1:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(x)

    monkeypatch.setattr(up, "_forward", forward)
    images = [np.random.default_rng(i).random((12, 20, 3)).astype(np.float32) for i in range(3)]
    out = up.upscale_batch(images)
    assert "running them one by one (later passes take at most 1)" in messages[0]
    assert up.images_per_pass(12, 20) == 1 and up.plan(12, 20).tile == 0  # still whole images
    for a, image in zip(out, images, strict=True):
        np.testing.assert_array_equal(a, up.upscale(image))


class _Bicubic(torch.nn.Module):
    """x2 bicubic 'network': it mixes neighbours as any SR network does near an edge."""

    scale = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)


def test_alpha_through_the_model_counts_one_progress_over_both_passes() -> None:
    rgba = np.random.default_rng(4).random((40, 40, 4)).astype(np.float32)
    seen: list[tuple[int, int]] = []
    Upscaler(_Bicubic(), device="cpu", tile=16, alpha="model").upscale(rgba, on_tile=lambda d, t: seen.append((d, t)))
    done = [d for d, _ in seen]
    assert done == sorted(done) and seen[-1][0] == seen[-1][1] > 1  # once from 0 to the end: not 0..N twice
    assert {t for _, t in seen} == {seen[-1][1]}  # the colour pass already counts the alpha pass's tiles
    seen.clear()
    Upscaler(_Bicubic(), device="cpu", tile=16, alpha="resize").upscale(rgba, on_tile=lambda d, t: seen.append((d, t)))
    assert seen[-1][0] == seen[-1][1] == len(seen)  # one pass: its own tiles


@pytest.mark.parametrize("alpha_mode", ["model", "resize"])
def test_transparent_colour_does_not_bleed_into_the_edge(alpha_mode: str) -> None:
    """A white disc on transparent black: composited over white, its upscaled edge stays white (no dark halo)."""
    y, x = np.mgrid[0:24, 0:24]
    rgba = np.zeros((24, 24, 4), np.uint8)
    rgba[(x - 12) ** 2 + (y - 12) ** 2 < 49] = 255
    out = Upscaler(_Bicubic(), device="cpu", tile=0, alpha=alpha_mode).upscale(rgba)
    result = np.asarray(out, dtype=np.float64) / 255
    visible = result[..., 3:]
    assert (result[..., :3] * visible + 1 - visible).min() > 0.99
    colour_only = Upscaler(_Bicubic(), device="cpu", tile=0).upscale(rgba[..., :3])
    assert np.asarray(colour_only).min() == 0  # the same pixels without their alpha: black around the disc


def test_the_fill_keeps_visible_pixels_and_reaches_far_gaps() -> None:
    from sst_cli.upscaler import fill_hidden_colour

    colour, alpha = torch.rand(3, 37, 50), torch.zeros(37, 50)
    alpha[3, 5], alpha[30:33, 40:44] = 0.2, 1.0  # faint pixels count as visible: their colour is kept
    filled = fill_hidden_colour(colour, alpha)
    assert torch.equal(filled[:, alpha > 0], colour[:, alpha > 0])
    assert torch.isfinite(filled).all() and filled.min() >= 0 and filled.max() <= 1
    assert torch.allclose(filled[:, 31, 39], colour[:, 30:33, 40:44].mean((1, 2)), atol=0.35)
    assert torch.equal(fill_hidden_colour(colour, torch.ones(37, 50)), colour)  # nothing hidden: untouched
    assert torch.equal(fill_hidden_colour(colour, torch.zeros(37, 50)), colour)  # nothing visible: untouched


@pytest.mark.parametrize(
    ("cli", "advice"),
    [
        (False, "larger tiles are faster if memory allows (max_memory), and tile_overlap=0 costs nothing extra"),
        (True, "larger tiles are faster if memory allows (--max-memory), and --tile-overlap 0 costs nothing extra"),
    ],
)
def test_the_costly_tiles_notice_names_the_options_as_the_caller_gave_them(cli: bool, advice: str) -> None:
    """An API caller's ``on_message`` was told of ``--max-memory`` and ``--tile-overlap 0``, options it never had;
    ``sst upscale`` (``UpscaleOptions(cli=True)``) keeps them."""
    from sst_cli.options import UpscaleOptions

    said: list[str] = []
    up = Upscaler(tiny_sst(), options=UpscaleOptions(device="cpu", tile=32, cli=cli), on_message=said.append)
    up.run(torch.rand(3, 64, 64))
    costly = [text for text in said if "compute each pixel" in text]
    assert len(costly) == 1 and costly[0].endswith(f"; {advice} but can leave faint seams"), said


def test_a_module_that_does_not_say_its_scale_is_a_config_error() -> None:
    """``Upscaler(torch.nn.Conv2d(3, 3, 3))`` raised a TypeError, where ``Upscaler(5)`` gets a ConfigError: every
    error meant for a user is an SstError."""
    with pytest.raises(ConfigError, match=r"^Conv2d does not say its scale: give the module an integer 'scale'"):
        Upscaler(torch.nn.Conv2d(3, 3, 3), device="cpu")
    flagged = _Bicubic()
    flagged.scale = True  # type: ignore[assignment]
    with pytest.raises(ConfigError, match=r"^_Bicubic does not say its scale"):
        Upscaler(flagged, device="cpu")


def test_upscale_file_never_replaces_its_source_and_checks_before_computing(tmp_path: Path) -> None:
    from sst_cli.errors import ImageError, OutputIsInput

    source = tmp_path / "p.png"
    Image.fromarray((_photo(10, 12) * 255).astype(np.uint8)).save(source)
    before = source.read_bytes()
    tiles: list[int] = []
    up = Upscaler(_Bicubic(), device="cpu", tile=0)
    with pytest.raises(OutputIsInput, match="is the input itself"):
        up.upscale_file(source, source, overwrite=True)
    assert source.read_bytes() == before
    with pytest.raises(ConfigError, match="quality must be between 1 and 100"):
        up.upscale_file(source, tmp_path / "q.jpg", quality=500, on_tile=lambda d, t: tiles.append(d))
    with pytest.raises(ImageError, match=r"the folder .* does not exist"):
        up.upscale_file(source, tmp_path / "nodir" / "o.png", on_tile=lambda d, t: tiles.append(d))
    assert tiles == []  # refused before the network ran


@pytest.mark.parametrize(
    ("quality", "message"),
    [
        (90.5, "quality must be a whole number from 1 to 100, got 90.5"),
        ("90", "quality must be a whole number from 1 to 100, got '90'"),
        (True, "quality must be a whole number from 1 to 100, got True"),
        (0, "quality must be between 1 and 100, got 0"),
    ],
)
def test_upscale_file_refuses_a_quality_that_is_no_whole_number_before_computing(
    tmp_path: Path, quality: object, message: str
) -> None:
    """``quality=90.5`` failed as an ImageError once written, after the network ran; ``"90"`` met a bare
    TypeError; ``True`` ran as 1 (``checks.check_quality``, as ``WriteOptions`` and ``write_image`` check it)."""
    from sst_cli.naming import WriteOptions

    source = tmp_path / "p.png"
    Image.fromarray((_photo(10, 12) * 255).astype(np.uint8)).save(source)
    tiles: list[int] = []
    up = Upscaler(_Bicubic(), device="cpu", tile=0)
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        up.upscale_file(source, tmp_path / "q.jpg", quality=quality, on_tile=lambda d, t: tiles.append(d))  # type: ignore[arg-type]
    assert tiles == [] and not (tmp_path / "q.jpg").exists()
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        WriteOptions(quality=quality)  # type: ignore[arg-type]


def test_the_api_says_an_animation_loses_its_other_frames(tmp_path: Path) -> None:
    """sst upscale said it; upscale_file and upscale(PIL image) dropped the other frames without a word."""
    frames = [Image.new("RGB", (6, 5), c) for c in ("red", "blue", "green")]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:])
    said: list[str] = []
    up = Upscaler(tiny_sst(), device="cpu", on_message=said.append)
    up.upscale_file(tmp_path / "anim.gif", tmp_path / "o.png")
    assert said == [f"{tmp_path / 'anim.gif'}: 3 frames (an animation, or pages); only the first is upscaled"]
    with Image.open(tmp_path / "anim.gif") as animation:
        animation.seek(1)
        current = np.asarray(up.upscale(animation))
        assert np.array_equal(current, np.asarray(up.upscale(animation.copy())))  # a copy has that frame alone
    assert said[1] == "the image has 3 frames (an animation, or pages); only its current one, 2, is upscaled"
    up.upscale_file(tmp_path / "o.png", tmp_path / "single.png")
    assert len(said) == 2  # one frame: nothing to say


def test_upscale_file_refuses_a_format_its_target_extension_contradicts(tmp_path: Path) -> None:
    """``upscale_file(src, "o.png", format="jpeg")`` wrote JPEG bytes under .png without a word; ``sst upscale``
    refuses the same request (``naming.check_format_fits``, the one rule)."""
    source = tmp_path / "p.png"
    Image.fromarray((_photo(10, 12) * 255).astype(np.uint8)).save(source)
    tiles: list[int] = []
    up = Upscaler(_Bicubic(), device="cpu", tile=0)
    target = tmp_path / "o.png"
    with pytest.raises(ConfigError, match=r"^format='jpeg' does not match the extension of '.*o\.png'$"):
        up.upscale_file(source, target, format="jpeg", on_tile=lambda d, t: tiles.append(d))
    assert tiles == [] and not target.exists()  # refused before the network ran
    up.upscale_file(source, tmp_path / "o.jpg", format="JPG")  # the same format, spelt otherwise
    up.upscale_file(source, tmp_path / "o.TIF", format="tiff")
    assert Image.open(tmp_path / "o.jpg").format == "JPEG" and Image.open(tmp_path / "o.TIF").format == "TIFF"


@pytest.mark.parametrize(
    ("mode", "make", "out_mode"),
    [
        ("F", lambda g: Image.fromarray(g, "F"), "F"),
        ("I", lambda g: Image.fromarray((g * 65535).astype(np.int32), "I"), "I;16"),
        ("I;16B", lambda g: Image.frombytes("I;16B", (16, 16), (g * 65535).astype(">u2").tobytes()), "I;16"),
        ("1", lambda g: Image.fromarray(g > 0.5).convert("1"), "L"),
        (
            "RGBa",
            lambda g: Image.fromarray((np.dstack([g] * 4) * 255).astype(np.uint8), "RGBA").convert("RGBa"),
            "RGBA",
        ),
        ("La", lambda g: Image.fromarray((np.dstack([g] * 2) * 255).astype(np.uint8), "LA").convert("La"), "LA"),
        ("LAB", lambda g: Image.fromarray((np.dstack([g] * 3) * 255).astype(np.uint8)).convert("LAB"), "RGB"),
    ],
)
def test_pil_images_of_every_mode_keep_their_values(mode: str, make: object, out_mode: str) -> None:
    """F, I and I;16B were converted to 8-bit RGB (F came out nearly black); LAB came back with an alpha."""
    gradient = np.tile(np.linspace(0, 1, 16, dtype=np.float32), (16, 1))
    image = make(gradient)  # type: ignore[operator]
    assert image.mode == mode
    out = Upscaler(_Bicubic(), device="cpu", tile=0).upscale(image)
    assert out.mode == out_mode and out.size == (32, 32)
    if mode in ("F", "I", "I;16B"):
        full = 1.0 if mode == "F" else 65535.0
        assert abs(np.asarray(out, dtype=np.float64).mean() / full - gradient.mean()) < 0.01


def test_float_arrays_out_of_range_are_said_and_nan_refused() -> None:
    said: list[str] = []
    up = Upscaler(_Bicubic(), device="cpu", tile=0, on_message=said.append)
    values = np.random.default_rng(0).random((8, 8, 3)).astype(np.float32)
    up.upscale(values * 255)
    assert said and "of the float samples lie outside 0..1: they are clipped" in said[0]
    values[3, 3, 0] = np.nan
    with pytest.raises(ConfigError, match=r"^the image array holds NaN or infinite values$"):
        up.upscale(values)
    with pytest.raises(ConfigError, match=r"^images\[1\] holds NaN or infinite values$"):
        up.upscale_batch([np.zeros_like(values), values])
    for bad in (np.nan, np.inf):  # the PIL image passed, not an array the caller never made
        with pytest.raises(ConfigError, match=r"^the PIL image \(mode F\) holds NaN or infinite values$"):
            up.upscale(Image.fromarray(np.full((4, 4), bad, dtype=np.float32), "F"))
    with pytest.raises(ConfigError, match=r"upscale takes an image \(PIL or numpy array\), not the path 'photo.png'"):
        up.upscale("photo.png")  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match=r"upscale takes an image \(PIL or numpy array\), not None"):
        up.upscale(None)  # type: ignore[call-overload]
    values[3, 3, 0] = 0.5
    quiet = Upscaler(_Bicubic(), device="cpu", tile=0)  # no on_message: an API caller gets a warning
    with pytest.warns(UserWarning, match="of the float samples lie outside 0..1: they are clipped"):
        quiet.upscale(values * 255)
    with pytest.warns(UserWarning, match="of the float samples lie outside 0..1") as caught:
        quiet.upscale_batch([values * 255, values * 255])
    assert len(caught) == 2


def test_a_shared_module_moved_by_another_upscaler_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_sst()
    first = Upscaler(model, device="cpu", tile=0)
    Upscaler(model, device="cpu", tile=0, precision="bf16")  # casts the shared module in place
    with pytest.raises(ConfigError, match="another Upscaler sharing it moved it"):
        first.upscale(np.zeros((8, 8, 3), np.uint8))


def test_model_arguments_of_the_wrong_kind_are_refused_or_understood() -> None:
    with pytest.raises(ConfigError, match="scale must be an integer such as 4, got '4'"):
        Upscaler(scale="4")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="scale must be an integer such as 4, got '4'"):
        create_model("sst", "4")  # type: ignore[arg-type]  # said "sst exists at x2 / x3 / x4, not x4"
    with pytest.raises(ConfigError, match="model must be a zoo name, a weights file, a ModelSpec or a torch module"):
        Upscaler(123, device="cpu")  # type: ignore[arg-type]  # met "'int' object has no attribute 'strip'"
    bundled = Path(__file__).parents[1] / "weights" / "sst-light-291_x4.safetensors"
    assert Upscaler(bundled, device="cpu").scale == 4  # a Path is a weights file


def test_tf32_flags_survive_overlapping_fp32_blocks_in_threads() -> None:
    import threading

    cuda = torch.device("cuda")  # only the process-wide flags are touched: no GPU needed
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    inside, leave = threading.Event(), threading.Event()

    def first() -> None:
        with fp32_mode(cuda, torch.float32):
            inside.set()
            leave.wait(10)

    def second() -> None:
        inside.wait(10)
        with fp32_mode(cuda, torch.float32):
            assert not torch.backends.cuda.matmul.allow_tf32
        leave.set()

    try:
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_the_package_lists_its_lazy_exports() -> None:
    import sst_cli

    assert {"Upscaler", "load_model", "create_model"} <= set(dir(sst_cli))


def test_clipped_samples_are_said_for_files_and_pil_images_too(tmp_path: Path) -> None:
    """A 0..255 float TIFF through upscale_file, a 0..255 mode F image and a mode I image above 16 bits came back
    white without a word: only arrays were said to be clipped."""
    import tifffile

    floats = np.random.default_rng(1).random((8, 8)).astype(np.float32) * 255
    tifffile.imwrite(tmp_path / "f.tif", floats)
    said: list[str] = []
    Upscaler(_Bicubic(), device="cpu", tile=0, on_message=said.append).upscale_file(
        tmp_path / "f.tif", tmp_path / "o.tif"
    )
    assert said and "f.tif: " in said[0] and "of its samples lie outside the range the network takes" in said[0]
    quiet = Upscaler(_Bicubic(), device="cpu", tile=0)
    with pytest.warns(UserWarning, match="of its samples lie outside the range the network takes") as caught:
        quiet.upscale_file(tmp_path / "f.tif", tmp_path / "o2.tif")
    assert caught[0].filename == __file__  # the caller's line
    with pytest.warns(UserWarning, match="of the float samples lie outside 0..1: they are clipped"):
        quiet.upscale(Image.fromarray(floats, "F"))
    with pytest.warns(UserWarning, match="of the mode I samples lie outside 0..65535"):
        quiet.upscale(Image.fromarray(floats.astype(np.int32) * 1000, "I"))
    Image.fromarray(np.full((8, 8), 40000, np.int32), "I").save(tmp_path / "i.tif")  # 16-bit values in 32 bits
    with pytest.warns(UserWarning, match="i.tif: .*16-bit values stored in 32-bit integers.*nearly black"):
        quiet.upscale_file(tmp_path / "i.tif", tmp_path / "o3.tif")


def test_a_torch_device_is_taken_where_a_device_name_is() -> None:
    """Upscaler(device=torch.device("cpu")) met "'torch.device' object has no attribute 'strip'"."""
    from sst_cli import UpscaleOptions

    up = Upscaler(_Bicubic(), device=torch.device("cpu"), tile=0)
    assert up.device == torch.device("cpu") and up.options.device == "cpu"  # options hold the name, as the CLI's
    assert UpscaleOptions(device=torch.device("cpu")) == UpscaleOptions(device="cpu")
    with pytest.raises(
        ConfigError, match=r"device must be a name such as 'cpu' or 'cuda:0', or a torch\.device; got 0"
    ):
        Upscaler(_Bicubic(), device=0)


def test_max_memory_takes_the_sizes_the_cli_takes() -> None:
    """Upscaler(max_memory="2G") met "'<=' not supported between instances of 'str' and 'int'"."""
    from sst_cli import UpscaleOptions

    assert Upscaler(_Bicubic(), device="cpu", max_memory="2G").options.max_memory == 2 << 30
    assert UpscaleOptions(max_memory=" 1.5GiB") == UpscaleOptions(max_memory=3 << 29)
    assert UpscaleOptions(max_memory=np.int64(512)).max_memory == 512
    with pytest.raises(ConfigError, match="max_memory must be a size such as 4G or 512M, got 'lots'"):
        UpscaleOptions(max_memory="lots")
    assert UpscaleOptions(max_memory=4e9).max_memory == 4_000_000_000  # a float of bytes, taken before sizes were
    with pytest.raises(ConfigError, match="max_memory must be a number of bytes or a size such as '4G'"):
        UpscaleOptions(max_memory=float("inf"))


def test_a_size_text_without_a_unit_below_a_mebibyte_is_refused() -> None:
    """max_memory="5" (as ``--max-memory 5``) was 5 bytes, taken silently where the picture ran whole; a whole
    number of bytes stays bytes, as the API documents, and a unit says bytes are meant."""
    from sst_cli import UpscaleOptions

    with pytest.raises(ConfigError) as info:
        UpscaleOptions(max_memory="5")
    assert str(info.value) == "max_memory 5: 5 bytes; did you mean 5G? give a unit: 512M, 2G (5B if bytes are meant)"
    with pytest.raises(ConfigError, match=r"^max_memory 100000: 100000 bytes; give a unit"):
        UpscaleOptions(max_memory="100000")
    assert UpscaleOptions(max_memory="5B").max_memory == 5
    assert UpscaleOptions(max_memory="1048576").max_memory == 1 << 20
    assert UpscaleOptions(max_memory=5).max_memory == 5


def test_a_weights_file_named_by_text_is_loaded_as_a_path_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upscaler("mine.safetensors") was told "unknown model 'mine.safetensors'" though load_model and a Path took it."""
    import shutil

    from sst_cli.errors import WeightsNotFound

    shutil.copy(Path(__file__).parents[1] / "weights" / "sst-light-291_x4.safetensors", tmp_path / "mine.weights")
    monkeypatch.chdir(tmp_path)
    assert Upscaler("mine.weights", device="cpu").scale == 4  # an existing file, whatever its ending
    assert Upscaler(str(tmp_path / "mine.weights"), device="cpu").scale == 4
    with pytest.raises(WeightsNotFound, match=r"weights file not found: gone\.safetensors"):
        Upscaler("gone.safetensors", device="cpu")  # a weights ending: a file, though missing
    with pytest.raises(ConfigError, match=r"unknown model 'w/mine'; choose one of .*; and no weights file 'w/mine'"):
        Upscaler("w/mine", device="cpu")
    with pytest.raises(ConfigError, match=r"unknown model 'sst-lite'; did you mean sst-light\? choose one of [^;]*$"):
        Upscaler("sst-lite", device="cpu")


def test_the_exceptions_are_exported_without_importing_torch() -> None:
    """sst_cli.SstError was an AttributeError: the exceptions lived in sst_cli.errors only."""
    import subprocess
    import sys

    code = (
        "import sys, sst_cli, sst_cli.errors as e; "
        "assert sst_cli.SstError is e.SstError and issubclass(sst_cli.ConfigError, sst_cli.SstError); "
        "assert {'ImageError', 'WeightsNotFound', 'OutOfMemory'} <= set(sst_cli.__all__) & set(dir(sst_cli)); "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_inputs_upscale_does_not_take_are_refused_saying_what_it_takes(tmp_path: Path) -> None:
    """Bytes, file objects and numbers met "expected an (H, W), (H, W, 1-4) image array, got shape ()"; a CHW
    tensor that message too, an HWC uint8 one passed, one with requires_grad a bare RuntimeError; a closed PIL
    image a bare AssertionError; upscale_file with a BytesIO a bare TypeError."""
    import io

    from sst_cli.errors import ImageError

    up = Upscaler(_Bicubic(), device="cpu", tile=0)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "s.png")
    data = (tmp_path / "s.png").read_bytes()
    for value in (data, io.BytesIO(data)):
        with pytest.raises(ConfigError, match=r"takes an image \(PIL or numpy array\), not .*: open encoded image"):
            up.upscale(value)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match=r"upscale takes an image \(PIL or numpy array\), not int$"):
        up.upscale(5)  # type: ignore[call-overload]
    for tensor in (
        torch.rand(3, 8, 8),
        torch.zeros(8, 8, 3, dtype=torch.uint8),
        torch.rand(8, 8, 3, requires_grad=True),
    ):
        with pytest.raises(ConfigError, match=r"not a torch tensor: Upscaler\.run takes a \(3, H, W\) float32 CPU"):
            up.upscale(tensor)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="upscale_batch takes an image"):
        up.upscale_batch([torch.rand(8, 8, 3)])  # type: ignore[list-item]
    assert up.run(torch.rand(3, 8, 8)).image.shape == (3, 16, 16)  # where the message points
    # run() itself: a 4-channel or HWC tensor failed deep in torch, a numpy array with a TypeError, and uint8
    # samples came back as floats from -40 to 305 without a word
    for wrong, said in (
        (torch.rand(4, 8, 8), r"not one of shape \(4, 8, 8\); upscale\(\) takes gray and RGBA"),
        (torch.rand(8, 8, 3), r"not one of shape \(8, 8, 3\) \(HWC\? use image\.permute\(2, 0, 1\)\)"),
        (torch.rand(1, 3, 8, 8), r"not one of shape \(1, 3, 8, 8\)"),
        (np.zeros((3, 8, 8), np.float32), r"not ndarray, or pass it to upscale\(\)"),
        (torch.zeros(3, 8, 8, dtype=torch.uint8), r"not torch\.uint8 \(8-bit samples: image\.float\(\) / 255\)"),
    ):
        with pytest.raises(ConfigError, match=r"^Upscaler\.run takes a \(3, H, W\) float32 CPU tensor .*" + said):
            up.run(wrong)  # type: ignore[arg-type]
    assert up.run(torch.rand(3, 8, 8, dtype=torch.float64)).image.dtype == torch.float32
    with Image.open(tmp_path / "s.png") as closed:
        pass
    with pytest.raises(ImageError, match="cannot read the image: it is closed or unreadable"):
        up.upscale(closed)
    for source, target in ((io.BytesIO(data), tmp_path / "o.png"), (tmp_path / "s.png", io.BytesIO())):
        with pytest.raises(ConfigError, match=r"upscale_file takes paths \(str or os\.PathLike\), but its"):
            up.upscale_file(source, target)  # type: ignore[arg-type]


def test_arrays_of_either_byte_order_are_taken_and_kept() -> None:
    """A big-endian uint16 array was refused: "unsupported image array dtype >u2; use uint8, uint16 or float"."""
    up = Upscaler(_Bicubic(), device="cpu", tile=0)
    words = (np.random.default_rng(2).random((6, 7, 3)) * 65535).astype(np.uint16)
    native = up.upscale(words)
    for dtype in (">u2", "<u2"):
        out = up.upscale(words.astype(dtype))
        assert out.dtype == np.dtype(dtype) and np.array_equal(out, native)
    floats = words.astype(np.float32) / 65535
    assert np.array_equal(up.upscale(floats.astype(">f4")), up.upscale(floats).astype(">f4"))


def test_pil_images_keep_their_dpi_upright_as_files_do(tmp_path: Path) -> None:
    """The PIL path kept ICC and EXIF but dropped the dpi that upscale_file keeps."""
    exif = Image.Exif()
    exif[0x0112] = 6  # turned a quarter: the upright picture's x is the stored y
    Image.fromarray(np.full((6, 8, 3), 90, np.uint8)).save(tmp_path / "t.jpg", dpi=(72, 300), exif=exif.tobytes())
    up = Upscaler(_Bicubic(), device="cpu", tile=0)
    with Image.open(tmp_path / "t.jpg") as image:
        out = up.upscale(image)
    up.upscale_file(tmp_path / "t.jpg", tmp_path / "o.png")
    with Image.open(tmp_path / "o.png") as written:
        assert out.size == written.size == (12, 16)
        assert out.info["dpi"] == pytest.approx((300, 72))
        assert written.info["dpi"] == pytest.approx((300, 72), abs=0.01)


def test_a_mode_i_image_of_8_bit_values_is_said_to_come_back_dark() -> None:
    """convert("I") of an 8-bit image is read as 16 bits, as mode I files are, and came back black without a word."""
    import warnings

    gray = (np.tile(np.linspace(0, 1, 16), (16, 1)) * 255).astype(np.uint8)
    up = Upscaler(_Bicubic(), device="cpu", tile=0)
    with pytest.warns(UserWarning, match=r"values all lie in 0\.\.255, but mode I is read as 16 bits"):
        up.upscale(Image.fromarray(gray).convert("I"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        up.upscale(Image.fromarray(gray.astype(np.int32) * 257, "I"))  # 16-bit values: nothing to say
        up.upscale(Image.fromarray(np.zeros((4, 4), np.int32), "I"))  # black is black at any depth


@pytest.mark.parametrize("kind", ["bmp", "gif"])
def test_a_target_without_extension_gets_the_format_the_cli_chooses(tmp_path: Path, kind: str) -> None:
    """upscale_file('s.bmp', 'out') met "unknown output format 'bmp'" though no format was named."""
    Image.fromarray(np.full((6, 8, 3), 90, np.uint8)).save(tmp_path / f"s.{kind}")
    Upscaler(_Bicubic(), device="cpu", tile=0).upscale_file(tmp_path / f"s.{kind}", tmp_path / "out")
    with Image.open(tmp_path / "out") as written:
        assert written.format == "PNG" and written.size == (16, 12)
