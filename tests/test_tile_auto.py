"""``--tile auto`` on a big GPU, with the device's memory mocked: big tiles, and the same plan after a warm-up."""

from __future__ import annotations

import pytest
import torch

from sst_cli import Upscaler, create_model
from sst_cli import planner as planner_module
from sst_cli.runtime import GPU_MEMORY_FRACTION, memory_budget
from sst_cli.tiling import plan_tiles
from sst_cli.widest import INDEX_LIMIT, widest_per_pixel

GIB = 1 << 30
CUDA = torch.device("cuda")


class FakeCard:
    """torch.cuda's memory queries for an 80 GB card on which PyTorch may already hold a cache."""

    def __init__(self, free: float, reserved: float = 0.0, allocated: float = 0.0) -> None:
        self.free, self.reserved, self.allocated = int(free * GIB), int(reserved * GIB), int(allocated * GIB)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (self.free, 80 * GIB))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.allocated)


def test_budget_counts_what_pytorch_caches_but_does_not_use(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCard(free=79).install(monkeypatch)
    fresh = memory_budget(CUDA)
    assert fresh == int(79 * GIB * GPU_MEMORY_FRACTION)
    # After a big tile: the driver sees 1 GB free, but 74 of PyTorch's 76 GB reserved are unused cache.
    FakeCard(free=1, reserved=76, allocated=2).install(monkeypatch)
    assert memory_budget(CUDA) == int(75 * GIB * GPU_MEMORY_FRACTION)
    # Memory other processes or live tensors hold is not counted.
    FakeCard(free=10, reserved=30, allocated=30).install(monkeypatch)
    assert memory_budget(CUDA) == int(10 * GIB * GPU_MEMORY_FRACTION)


@pytest.fixture(scope="module")
def sst_l_x4() -> Upscaler:
    torch.manual_seed(0)
    return Upscaler(create_model("sst-l", 4), tile="auto", precision="fp32")


@pytest.mark.parametrize(
    "card", [FakeCard(free=79), FakeCard(free=0.5, reserved=75, allocated=0.4)], ids=["fresh", "after-warm-up"]
)
def test_a_4k_frame_on_an_80_gb_card_gets_big_tiles(
    sst_l_x4: Upscaler, card: FakeCard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measured case: 3840x2160 at x4 with SST-L in bf16 chose 64 px tiles with 64 px of overlap. On CUDA
    the tiles also keep every tensor under 2**31 elements (SST-L x4: 1536 per LR pixel, measured on the CPU
    by ``widest_per_pixel``), where the memory alone would allow the whole image."""
    card.install(monkeypatch)
    monkeypatch.setattr(planner_module, "memory_budget", lambda device: memory_budget(CUDA))
    monkeypatch.setattr(sst_l_x4.planner, "dtype", torch.bfloat16)
    plan = sst_l_x4.plan(2160, 3840)  # the CPU upscaler: memory is the only limit
    tiles = plan_tiles(2160, 3840, plan.tile, plan.overlap, plan.align)
    assert 1 <= len(tiles) <= 2
    assert plan.cost(2160, 3840) < 1.05  # overlap adds under 5 % to the work
    assert max(t.context_shape[0] * t.context_shape[1] for t in tiles) * 2 > 2160 * 3840 / 2
    monkeypatch.setattr(sst_l_x4.planner, "widest_per_pixel", lambda: 1536.0)  # as on CUDA
    plan = sst_l_x4.plan(2160, 3840)
    tiles = plan_tiles(2160, 3840, plan.tile, plan.overlap, plan.align)
    largest = max(t.context_shape[0] * t.context_shape[1] for t in tiles)
    assert largest * 1536 <= INDEX_LIMIT < 2 * largest * 1536  # as big as the limit allows, within a factor 2
    assert plan.cost(2160, 3840) < 1.3


def test_the_widest_tensor_is_measured_per_input_pixel() -> None:
    """A 1x1 conv to 48 channels and a x2 pixel shuffle: both write 48 elements per input pixel; 64 channels
    before a 2x2 pooling: 64."""
    shuffle = torch.nn.Sequential(torch.nn.Conv2d(3, 48, 1), torch.nn.PixelShuffle(2))
    assert widest_per_pixel(shuffle, 32, torch.device("cpu"), torch.float32) == 48
    pooled = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.AvgPool2d(2))
    assert widest_per_pixel(pooled, 16, torch.device("cpu"), torch.float32) == 64


def test_the_widest_tensor_on_shapes_alone_is_the_real_one() -> None:
    """On the meta device (no kernel runs, nothing compiles) the same figure as a real forward; the model
    works on its own device afterwards. A network with an op that has no meta kernel refuses: the planner
    then measures on the device."""
    torch.manual_seed(0)
    model = create_model("sst-light", 4).eval()
    meta = widest_per_pixel(model, 64, torch.device("meta"), torch.float32)
    assert meta == widest_per_pixel(model, 64, torch.device("cpu"), torch.float32) == 144
    with torch.inference_mode():
        assert torch.isfinite(model(torch.rand(1, 3, 16, 16))).all()

    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if bool(x.sum() > 0) else x

    with pytest.raises((NotImplementedError, RuntimeError)):
        widest_per_pixel(DataDependent(), 16, torch.device("meta"), torch.float32)


def test_the_planner_measures_on_the_device_where_shapes_alone_fail(
    sst_l_x4: Upscaler, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices: list[str] = []

    def measure(model: torch.nn.Module, side: int, device: torch.device, dtype: torch.dtype) -> float:
        devices.append(device.type)
        if device.type == "meta":
            raise NotImplementedError("aten::equal has no meta kernel")
        return 7.0

    monkeypatch.setattr(planner_module, "widest_per_pixel", measure)
    monkeypatch.setattr(sst_l_x4.planner, "device", CUDA)
    monkeypatch.setattr(sst_l_x4.planner, "_widest", None)
    assert sst_l_x4.planner.widest_per_pixel() == 7.0
    assert devices == ["meta", "cuda"]


def test_a_small_card_still_tiles_within_its_budget(sst_l_x4: Upscaler, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCard(free=8, reserved=4, allocated=4).install(monkeypatch)
    monkeypatch.setattr(planner_module, "memory_budget", lambda device: memory_budget(CUDA))
    monkeypatch.setattr(sst_l_x4.planner, "dtype", torch.bfloat16)
    plan = sst_l_x4.plan(2160, 3840)
    tiles = plan_tiles(2160, 3840, plan.tile, plan.overlap, plan.align)
    largest = max(sst_l_x4.planner.activation_bytes(*t.context_shape) for t in tiles)
    assert largest <= 8 * GIB * GPU_MEMORY_FRACTION
    assert len(tiles) > 2 and plan.cost(2160, 3840) < 1.5
