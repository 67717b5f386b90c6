"""Tests for tile planning and tiled inference (CPU, tiny tensors)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from sst_cli.tiling import (
    Tile,
    align_overlap,
    align_tile_size,
    cheapest_tile,
    plan_tiles,
    run_tiles,
    run_tiles_adaptive,
    tile_label,
    tile_sides,
    tiling_cost,
)


def pointwise(x: torch.Tensor) -> torch.Tensor:
    """x2 nearest upsample times 2: every output pixel depends on one input pixel."""
    return x.repeat_interleave(2, -1).repeat_interleave(2, -2) * 2


def make_local(k: int, channels: int = 2) -> torch.nn.Module:
    """k fixed random 3x3 convs (receptive field radius k) then nearest x2 upsample."""
    gen = torch.Generator().manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(k):
        conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
        with torch.no_grad():
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) * 0.3)
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=gen) * 0.1)
        layers.append(conv)
    layers.append(torch.nn.Upsample(scale_factor=2, mode="nearest"))
    return torch.nn.Sequential(*layers).eval()


def rounding_bound(model: torch.nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """Per output value, a bound on how far ``model``'s float32 result can be from the exact one.

    Each conv output is an inner product of n = 9 C_in products plus the bias, and float32 computes any such
    sum, in any order, with or without FMA, to within gamma_n (|W| |x| + |b|), gamma_n = n u / (1 - n u),
    u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 3.1). An error already in the input
    is carried by |W|. Evaluated in float64 layer by layer; the nearest upsample adds nothing.
    """
    x = x.double()
    bound = torch.zeros_like(x)
    u = 2.0**-24
    for layer in model:
        if isinstance(layer, torch.nn.Conv2d):
            w, b = layer.weight.double(), layer.bias.double()
            n = w[0].numel() + 1
            gamma = n * u / (1 - n * u)
            magnitude = F.conv2d(x.abs() + bound, w.abs(), b.abs(), padding=1)
            bound = F.conv2d(bound, w.abs(), padding=1) + gamma * magnitude
            x = F.conv2d(x, w, b, padding=1)
        else:
            x, bound = layer(x), layer(bound)
    return bound


def window_mean(x: torch.Tensor, ws: int) -> torch.Tensor:
    """Per-window mean over origin-aligned ws x ws windows, reflect-padded bottom/right like SST."""
    h, w = x.shape[-2:]
    x = F.pad(x, (0, -w % ws, 0, -h % ws), mode="reflect")
    b, c, hp, wp = x.shape
    m = x.reshape(b, c, hp // ws, ws, wp // ws, ws).mean((3, 5), keepdim=True)
    return m.expand(b, c, hp // ws, ws, wp // ws, ws).reshape(b, c, hp, wp)[..., :h, :w]


def image(c: int, h: int, w: int, seed: int = 1) -> torch.Tensor:
    return torch.rand(c, h, w, generator=torch.Generator().manual_seed(seed))


class FakeOOM(RuntimeError):
    pass


# ---------------------------------------------------------------- planning


@pytest.mark.parametrize(
    ("h", "w", "tile", "overlap", "align"),
    [(20, 20, 8, 0, 1), (21, 37, 8, 3, 1), (35, 19, 16, 8, 8), (64, 48, 16, 16, 16), (9, 30, 4, 4, 2)],
)
def test_plan_partitions_image(h: int, w: int, tile: int, overlap: int, align: int) -> None:
    tiles = plan_tiles(h, w, tile, overlap, align)
    owned = torch.zeros(h, w, dtype=torch.int32)
    for t in tiles:
        owned[t.y0 : t.y1, t.x0 : t.x1] += 1
        for v in (t.y0, t.x0, t.cy0, t.cx0):
            assert v % align == 0
        assert 0 <= t.cy0 <= t.y0 < t.y1 <= t.cy1 <= h
        assert 0 <= t.cx0 <= t.x0 < t.x1 <= t.cx1 <= w
        assert (t.cy0, t.cy1) == (max(0, t.y0 - overlap), min(h, t.y1 + overlap))
        assert (t.cx0, t.cx1) == (max(0, t.x0 - overlap), min(w, t.x1 + overlap))
        assert t.y1 - t.y0 <= tile and t.x1 - t.x0 <= tile
    assert bool((owned == 1).all())
    # Row-major, on the grid from the origin; the last tile ends at the edge and is not shifted back.
    assert [(t.y0, t.x0) for t in tiles] == list(itertools.product(range(0, h, tile), range(0, w, tile)))
    assert (tiles[-1].y1, tiles[-1].x1) == (h, w)
    assert tiles[-1].y0 == (h - 1) // tile * tile


@pytest.mark.parametrize(
    ("h", "w", "tile", "overlap", "align"),
    [(35, 19, (16, 8), 8, 8), (64, 48, (16, 48), 16, 16), (21, 37, (5, 11), 3, 1), (40, 9, (8, 64), 8, 8)],
)
def test_rectangular_tiles_partition_image(h: int, w: int, tile: tuple[int, int], overlap: int, align: int) -> None:
    rows, cols = tile
    tiles = plan_tiles(h, w, tile, overlap, align)
    owned = torch.zeros(h, w, dtype=torch.int32)
    for t in tiles:
        owned[t.y0 : t.y1, t.x0 : t.x1] += 1
        assert t.y1 - t.y0 <= rows and t.x1 - t.x0 <= cols
        assert (t.cy0, t.cy1, t.cx0, t.cx1) == (
            max(0, t.y0 - overlap),
            min(h, t.y1 + overlap),
            max(0, t.x0 - overlap),
            min(w, t.x1 + overlap),
        )
    assert bool((owned == 1).all())
    assert [(t.y0, t.x0) for t in tiles] == list(itertools.product(range(0, h, rows), range(0, w, cols)))


def _summed_context(h: int, w: int, tile: int | tuple[int, int], overlap: int) -> int:
    return sum((t.cy1 - t.cy0) * (t.cx1 - t.cx0) for t in plan_tiles(h, w, tile, overlap))


@pytest.mark.parametrize(
    ("h", "w", "tile", "overlap"),
    [(20, 20, 8, 0), (21, 37, 8, 3), (21, 37, (4, 16), 5), (9, 30, 0, 4), (5, 5, 100, 2), (64, 48, (48, 16), 16)],
)
def test_tiling_cost_is_the_summed_context_area(h: int, w: int, tile: int | tuple[int, int], overlap: int) -> None:
    assert tiling_cost(h, w, tile, overlap) == pytest.approx(_summed_context(h, w, tile, overlap) / (h * w))


def _largest_context(h: int, w: int, tile: tuple[int, int], overlap: int) -> tuple[int, int]:
    tiles = plan_tiles(h, w, tile, overlap)
    return max(t.cy1 - t.cy0 for t in tiles), max(t.cx1 - t.cx0 for t in tiles)


@pytest.mark.parametrize(
    ("h", "w", "overlap", "align", "area"),
    [(40, 72, 8, 8, 24 * 40), (72, 40, 8, 8, 24 * 40), (50, 50, 4, 4, 400), (33, 130, 8, 8, 3000), (16, 16, 8, 8, 64)],
)
def test_cheapest_tile_matches_an_exhaustive_search(h: int, w: int, overlap: int, align: int, area: int) -> None:
    def fits(rows: int, cols: int) -> bool:
        return rows * cols <= area

    sides = [(r, c) for r in range(align, h + align, align) for c in range(align, w + align, align)]
    fitting = [s for s in sides if fits(*_largest_context(h, w, s, overlap))]
    chosen = cheapest_tile(h, w, overlap, align, fits)
    if not fitting:
        assert chosen is None
        return
    assert chosen is not None and chosen[0] % align == 0 and chosen[1] % align == 0
    assert fits(*_largest_context(h, w, chosen, overlap))
    assert _summed_context(h, w, chosen, overlap) == min(_summed_context(h, w, s, overlap) for s in fitting)


def test_rectangles_beat_squares_under_a_memory_budget() -> None:
    """A 480x320 photo with room for ~300x300 contexts: a 192x256 tile wastes less on overlaps than any square."""
    h, w, overlap, align, area = 320, 480, 64, 64, 90_000

    def fits(rows: int, cols: int) -> bool:
        return rows * cols <= area

    chosen = cheapest_tile(h, w, overlap, align, fits)
    squares = [s for s in range(align, w + align, align) if fits(*_largest_context(h, w, (s, s), overlap))]
    assert chosen == (192, 256)
    assert tiling_cost(h, w, chosen, overlap) < 0.85 * min(tiling_cost(h, w, s, overlap) for s in squares)


def test_tile_sizes_read_well() -> None:
    assert [tile_label(t) for t in (0, 64, (64, 64), (128, 448))] == ["whole image", "64 px", "64 px", "128x448 px"]
    assert tile_sides(64) == (64, 64) and tile_sides((8, 16)) == (8, 16)
    with pytest.raises(ValueError, match="two positive sides"):
        tile_sides((0, 16))


@pytest.mark.parametrize(("tile", "h", "w"), [(0, 13, 7), (16, 16, 9), (100, 5, 5)])
def test_plan_single_tile(tile: int, h: int, w: int) -> None:
    assert plan_tiles(h, w, tile, 4) == [Tile(0, h, 0, w, 0, h, 0, w)]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((10, 10, -8, 0, 1), "tile size"),
        ((10, 10, 8, -1, 1), "overlap"),
        ((10, 10, 8, 0, 0), "alignment"),
        ((10, 10, 12, 0, 8), "multiple"),
        ((10, 10, 16, 4, 8), "multiple"),
        ((0, 10, 8, 0, 1), "image size"),
    ],
)
def test_plan_validation(args: tuple[int, int, int, int, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_tiles(*args)


def test_align_helpers() -> None:
    assert align_tile_size(100, 16) == 96
    assert align_tile_size(5, 16) == 16
    assert align_tile_size(0, 16) == 0
    assert align_overlap(0, 16) == 0
    assert align_overlap(1, 16) == 16
    assert align_overlap(32, 16) == 32
    with pytest.raises(ValueError):
        align_tile_size(-1, 8)
    with pytest.raises(ValueError):
        align_overlap(4, 0)


# ---------------------------------------------------------------- running


@pytest.mark.parametrize("blend", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(("h", "w", "tile", "overlap"), [(16, 16, 8, 0), (21, 13, 8, 3), (17, 30, 5, 2), (7, 9, 4, 6)])
def test_pointwise_tiled_equals_untiled(h: int, w: int, tile: int, overlap: int, batch: int, blend: bool) -> None:
    img = image(3, h, w)
    want = pointwise(img[None])[0]
    got = run_tiles(pointwise, img, 2, plan_tiles(h, w, tile, overlap), batch=batch, blend=blend)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got, want)


def test_blend_constant_image_exact() -> None:
    img = torch.full((1, 23, 19), 0.3718)
    got = run_tiles(lambda x: F.interpolate(x, scale_factor=3), img, 3, plan_tiles(23, 19, 6, 4), blend=True)
    assert torch.equal(got, torch.full((1, 69, 57), 0.3718))


def test_blend_seams_continuous() -> None:
    """Each call adds its own offset: cropping shows jumps at seams, blending spreads them out."""

    def offset_model() -> object:
        calls = itertools.count()
        return lambda x: F.interpolate(x, scale_factor=2) + float(next(calls))

    img = torch.zeros(1, 24, 24)
    tiles = plan_tiles(24, 24, 8, 4)
    crop = run_tiles(offset_model(), img, 2, tiles)
    blend = run_tiles(offset_model(), img, 2, tiles, blend=True)

    def max_step(x: torch.Tensor) -> float:
        return max(x.diff(dim=-1).abs().max().item(), x.diff(dim=-2).abs().max().item())

    assert max_step(crop) >= 1.0
    assert max_step(blend) < 0.4


@pytest.mark.parametrize(("h", "w", "tile"), [(24, 24, 8), (19, 26, 7)])
def test_local_model_needs_overlap(h: int, w: int, tile: int) -> None:
    k = 3
    model = make_local(k)
    img = image(2, h, w)
    with torch.no_grad():
        want = model(img[None])[0]
        # With overlap >= k the tiles compute the same sums as the whole image, only in another order (other
        # shapes, blocking and thread splits): each result is within the rounding bound of the exact value, so
        # they differ by at most twice it (up to 1.5e-4 here; a fixed 1e-6 failed on a 16-core machine), while
        # one pixel of overlap too few leaves errors of 0.7.
        tolerance = 2 * rounding_bound(model, img[None])[0].float()
        for overlap in (k, k + 2):
            got = run_tiles(model, img, 2, plan_tiles(h, w, tile, overlap), batch=2)
            assert ((got - want).abs() <= tolerance).all(), (got - want).abs().max().item()
        seams = run_tiles(model, img, 2, plan_tiles(h, w, tile, 0))
    assert (seams - want).abs().max().item() > 1e-3


@pytest.mark.parametrize("ws", [4, 8])
@pytest.mark.parametrize(("h", "w"), [(32, 24), (30, 21)])
def test_window_model_aligned_tiles(ws: int, h: int, w: int) -> None:
    img = image(2, h, w)
    model = lambda x: window_mean(x, ws).repeat_interleave(2, -1).repeat_interleave(2, -2)  # noqa: E731
    want = model(img[None])[0]
    for overlap in (0, ws):
        if overlap == 0 and (h % ws or w % ws):
            continue  # reflect padding of a partial edge window reads pixels left of the tile core
        got = run_tiles(model, img, 2, plan_tiles(h, w, 2 * ws, overlap, align=ws), batch=2)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_window_model_misaligned_tiles_differ() -> None:
    img = image(1, 24, 24)
    model = lambda x: window_mean(x, 4)  # noqa: E731
    got = run_tiles(model, img, 1, plan_tiles(24, 24, 6, 2))
    assert (got - model(img[None])[0]).abs().max().item() > 1e-3


def test_progress_and_batching() -> None:
    calls: list[int] = []

    def model(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return pointwise(x)

    progress: list[tuple[int, int]] = []
    img = image(1, 24, 24)
    # Shapes with overlap 4: 4 corners 12x12, 2+2 edges 12x16/16x12, 1 centre 16x16.
    run_tiles(model, img, 2, plan_tiles(24, 24, 8, 4), batch=3, on_tile=lambda d, t: progress.append((d, t)))
    assert sorted(calls) == [1, 1, 2, 2, 3]
    assert progress == [(i, 9) for i in range(1, 10)]
    calls.clear()
    run_tiles(model, img, 2, plan_tiles(24, 24, 8, 0), batch=4)
    assert calls == [4, 4, 1]


def test_skip_and_resume_canvas() -> None:
    img = image(2, 20, 20)
    tiles = plan_tiles(20, 20, 8, 2)
    first = tiles[:4]
    canvas = run_tiles(pointwise, img, 2, tiles, skip=lambda t: t not in first)
    progress: list[tuple[int, int]] = []
    calls: list[int] = []

    def model(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return pointwise(x)

    out = run_tiles(
        model,
        img,
        2,
        tiles,
        skip=lambda t: t in first,
        canvas=canvas,
        on_tile=lambda d, t: progress.append((d, t)),
    )
    assert out is canvas
    assert len(calls) == len(tiles) - 4
    assert progress[-1] == (len(tiles), len(tiles)) and progress[0] == (5, len(tiles))
    assert torch.equal(out, pointwise(img[None])[0])


def test_run_errors() -> None:
    img = image(1, 8, 8)
    tiles = plan_tiles(8, 8, 4, 0)
    with pytest.raises(ValueError, match="shape"):
        run_tiles(pointwise, img, 3, tiles)
    with pytest.raises(ValueError, match="blend"):
        run_tiles(pointwise, img, 2, tiles, blend=True, canvas=torch.zeros(1, 16, 16))
    with pytest.raises(ValueError, match="canvas"):
        run_tiles(pointwise, img, 2, tiles, canvas=torch.zeros(2, 16, 16))


# ---------------------------------------------------------------- OOM retry


class LimitedModel:
    """``model`` (pointwise by default) that raises FakeOOM for inputs above ``limit`` pixels and logs successes."""

    def __init__(self, limit: int, model: Callable[[torch.Tensor], torch.Tensor] = pointwise) -> None:
        self.limit = limit
        self.model = model
        self.ok: list[tuple[int, ...]] = []
        self.failures = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] * x.shape[-2] * x.shape[-1] > self.limit:
            self.failures += 1
            raise FakeOOM("out of memory")
        self.ok.append(tuple(x.shape))
        return self.model(x)


def is_fake_oom(exc: BaseException) -> bool:
    return isinstance(exc, FakeOOM)


def test_adaptive_resumes_without_recomputing() -> None:
    img = image(2, 64, 64)
    model = LimitedModel(600)  # corner contexts (24x24) fit, edge contexts (24x32) do not
    new_tiles: list[int] = []
    progress: list[tuple[int, int]] = []
    out, used, _ = run_tiles_adaptive(
        model, img, 2, tile=16, overlap=8, align=8, is_oom=is_fake_oom,
        on_oom=lambda tile, *_: new_tiles.append(tile), on_tile=lambda d, t: progress.append((d, t)),
    )  # fmt: skip
    assert used == 8 and new_tiles == [8]
    assert torch.equal(out, pointwise(img[None])[0])
    assert model.failures == 1
    # 4 corner tiles finished at 16; at 8 the 4x4 sub-tiles inside them are skipped: 64 - 16 = 48 more.
    assert len(model.ok) == 4 + 48
    assert progress[-1] == (64, 64)


def test_adaptive_halves_both_sides_of_a_strip() -> None:
    img = image(2, 32, 64)
    model = LimitedModel(24 * 32)  # a 16x32 strip's contexts (up to 24x40) do not fit, 8x16 ones (24x32) do
    out, used, _ = run_tiles_adaptive(model, img, 2, tile=(16, 32), overlap=8, align=8, is_oom=is_fake_oom)
    assert used == (8, 16)
    assert torch.equal(out, pointwise(img[None])[0])


def test_adaptive_whole_image_and_batch() -> None:
    img = image(1, 40, 30)
    model = LimitedModel(450)
    out, used, batch = run_tiles_adaptive(model, img, 2, tile=0, overlap=0, batch=2, is_oom=is_fake_oom)
    # The whole image (one tile: fewer per pass cannot help) -> 20 px tiles, one per pass: 400 px fits.
    assert (used, batch) == (20, 1)
    assert torch.equal(out, pointwise(img[None])[0])
    covered = sum(b * h * w for b, _, h, w in model.ok)
    assert covered == 40 * 30  # every pixel computed exactly once (overlap 0)


def test_adaptive_blend_restarts() -> None:
    img = image(1, 33, 20)
    model = LimitedModel(300)
    out, used, _ = run_tiles_adaptive(model, img, 2, tile=16, overlap=2, blend=True, is_oom=is_fake_oom)
    assert used == 8
    assert torch.equal(out, pointwise(img[None])[0])


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("blend", [False, True])
def test_adaptive_takes_fewer_tiles_per_pass_before_smaller_tiles(blend: bool) -> None:
    """With --batch 8 and room for 4096 px per pass it tried 4 (then 8) 80-96 px contexts at 64 and 32 px tiles
    and gave up, though one 80x80 context fits; now the batch halves to 1 first, then the tile."""
    img = image(3, 256, 256)
    model = LimitedModel(96 * 96)
    retries: list[tuple[int, int, int]] = []
    out, used, batch = run_tiles_adaptive(
        model, img, 2, tile=64, overlap=16, align=16, batch=8, blend=blend, is_oom=is_fake_oom,
        on_oom=lambda *retry: retries.append(retry),
    )  # fmt: skip
    assert retries == [(64, 2, 4), (64, 1, 2)] and (used, batch) == (64, 1)  # the first pass: the 4 corners
    assert torch.equal(out, pointwise(img[None])[0])
    if not blend:  # cores finished before a retry are kept: every tile ran once
        assert len(model.ok) == len(plan_tiles(256, 256, 64, 16, 16))
    model = LimitedModel(64 * 64)  # no 64 px tile's context fits, one 32 px tile's does
    out, used, batch = run_tiles_adaptive(
        model, img, 2, tile=64, overlap=16, align=16, batch=8, blend=blend, is_oom=is_fake_oom
    )
    assert (used, batch) == (32, 1) and torch.equal(out, pointwise(img[None])[0])


@pytest.mark.usefixtures("one_thread")  # tiny convolutions: a second thread only waits on shared cores
def test_adaptive_results_do_not_depend_on_where_memory_ran_out() -> None:
    """Tiles are independent: wherever a pass ran out of memory, the output is an untroubled run's with the tile
    the run ended with (crop mode writes each core once, keeping those done; blend mode restarts)."""
    img = image(2, 136, 136)  # nine 48x48 contexts in one group
    convs = make_local(3)

    def local(x: torch.Tensor) -> torch.Tensor:  # one tile at a time: convolutions round by batch size
        return torch.cat([convs(x[i : i + 1]) for i in range(x.shape[0])])

    for blend, limit in itertools.product((False, True), (2000, 3000, 8000)):
        model = LimitedModel(limit, local)
        with torch.no_grad():
            got, used, batch = run_tiles_adaptive(
                model, img, 2, tile=32, overlap=8, align=8, batch=4, blend=blend, is_oom=is_fake_oom
            )
            expected = run_tiles(local, img, 2, plan_tiles(136, 136, used, 8, 8), batch=batch, blend=blend)
        assert model.failures and torch.equal(got, expected), (blend, limit, used, batch)


def test_adaptive_gives_up_when_every_smaller_tile_would_still_see_the_whole_image() -> None:
    """With 64 px of context on a 37x53 picture every tile is the whole picture: halving reran the same whole pass
    twice and then said it had tried 24 px and 8 px tiles, which never ran."""
    model, said = LimitedModel(37 * 53 - 1), []
    with pytest.raises(FakeOOM):
        run_tiles_adaptive(model, image(1, 37, 53), 2, tile=0, overlap=64, align=8, is_oom=is_fake_oom,
                           on_oom=lambda *p: said.append(p))  # fmt: skip
    assert model.failures == 1 and said == []


def test_adaptive_gives_up_and_passes_other_errors() -> None:
    img = image(1, 16, 16)
    with pytest.raises(FakeOOM):
        run_tiles_adaptive(LimitedModel(10), img, 2, tile=8, overlap=0, align=4, is_oom=is_fake_oom)

    def broken(x: torch.Tensor) -> torch.Tensor:
        raise KeyError("not an OOM")

    seen: list[tuple[int, int]] = []
    with pytest.raises(KeyError):
        run_tiles_adaptive(broken, img, 2, tile=8, overlap=0, is_oom=is_fake_oom, on_oom=lambda *p: seen.append(p))
    assert seen == []


def test_origins_tell_forward_where_each_tile_lies() -> None:
    """Position-dependent networks learn each context box's origin; a position-keyed model then tiles exactly."""
    image = torch.rand(3, 40, 50)

    def keyed(x: torch.Tensor, origins: list[tuple[int, int]]) -> torch.Tensor:
        # Adds a value that depends only on the global position, like SSTReal's noise.
        h, w = x.shape[-2:]
        out = x.clone()
        for i, (y0, x0) in enumerate(origins):
            ys = torch.arange(y0, y0 + h, dtype=torch.float32)[:, None]
            xs = torch.arange(x0, x0 + w, dtype=torch.float32)[None, :]
            out[i] += torch.sin(ys * 0.3 + xs * 0.7)
        return out

    seen: list[tuple[int, int]] = []
    whole = run_tiles(keyed, image, 1, plan_tiles(40, 50, 0, 0), origins=True)
    tiles = plan_tiles(40, 50, 16, 8, 8)
    tiled = run_tiles(lambda x, o: seen.extend(o) or keyed(x, o), image, 1, tiles, batch=3, origins=True)
    assert torch.equal(tiled, whole)
    assert sorted(seen) == sorted((t.cy0, t.cx0) for t in tiles)


def test_the_heap_is_trimmed_after_each_batch_of_tiles_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc kept what earlier tiles freed: --max-memory 512M peaked at 1.0 GiB on a 900x600 picture (0.8-0.9
    with the heap given back after each batch; sst_cli.allocator has the figures)."""
    import sst_cli.tiling as tiling
    from sst_cli.allocator import give_back_freed

    calls: list[int] = []
    passes: list[int] = []
    monkeypatch.setattr(tiling, "give_back_freed", lambda: calls.append(1) or True)

    def counted(x: torch.Tensor) -> torch.Tensor:
        passes.append(len(passes))
        return pointwise(x)

    run_tiles(counted, torch.rand(3, 23, 19), 2, plan_tiles(23, 19, 8, 4), batch=2)
    assert len(calls) == len(passes) > 1  # once per forward pass
    assert isinstance(give_back_freed(), bool)  # the real call: glibc's malloc_trim, or nothing elsewhere


def test_tiles_whose_contexts_all_cover_the_image_are_one_whole_tile() -> None:
    from sst_cli.tiling import covers_whole

    assert covers_whole(37, 53, 32, 64) and plan_tiles(37, 53, 32, 64) == [Tile(0, 37, 0, 53, 0, 37, 0, 53)]
    assert tiling_cost(37, 53, 32, 64) == 1.0
    assert not covers_whole(96, 97, 32, 64) and len(plan_tiles(96, 97, 32, 64)) == 12  # the last column's starts at 32
    assert not covers_whole(37, 53, (32, 16), 32) and covers_whole(37, 53, (16, 32), 32)
