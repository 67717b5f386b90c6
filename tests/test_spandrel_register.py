"""SST and SSTReal inside spandrel (``sst_cli.spandrel.install``), checked on the authors' golden vectors,
and sst-cli's DAT cross-checked against spandrel's DAT on the DAT golden vectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sst_cli import load_model

spandrel = pytest.importorskip("spandrel", reason="spandrel is not installed (pip install -e '.[spandrel]')")

GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden"
if not GOLDEN.is_dir():
    pytest.skip(f"golden vectors not found at {GOLDEN}", allow_module_level=True)


def _io(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def _registry(*configs: Path) -> spandrel.ArchRegistry:
    from sst_cli.spandrel import install

    registry = spandrel.MAIN_REGISTRY.copy()  # the global registry stays as it was
    install(registry, configs=list(configs))
    return registry


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_spandrel_loads_sst_light_and_reproduces_the_golden_outputs(suffix: str) -> None:
    loader = spandrel.ModelLoader(registry=_registry())
    descriptor = loader.load_from_file(GOLDEN / f"light_x2{suffix}")
    assert (descriptor.architecture.name, descriptor.scale, descriptor.purpose) == ("SST", 2, "SR")
    assert any("sst-light" in tag for tag in descriptor.tags)  # windows of the matching zoo variant, said
    io = _io(GOLDEN / "light_x2_io.safetensors")
    with torch.no_grad():
        raw = descriptor.model(io["input_a"])  # the raw network output
    assert float((raw - io["output_a"]).abs().max()) <= 5e-5
    clamped = descriptor(io["input_b"])  # spandrel's call: clamped to [0, 1]
    assert float((clamped - io["output_b"].clamp(0, 1)).abs().max()) <= 5e-5


def test_windows_no_zoo_variant_has_come_from_install_configs() -> None:
    path = GOLDEN / "mini_x3.pth"
    with pytest.raises(ValueError, match="window sizes are in no tensor"):
        spandrel.ModelLoader(registry=_registry()).load_from_file(path)
    descriptor = spandrel.ModelLoader(registry=_registry(GOLDEN / "mini_x3.json")).load_from_file(path)
    io = _io(GOLDEN / "mini_x3_io.safetensors")
    with torch.no_grad():
        raw = descriptor.model(io["input_a"])
    assert float((raw - io["output_a"]).abs().max()) <= 5e-5


def test_spandrel_loads_sstreal_and_reproduces_its_golden_output() -> None:
    folder = GOLDEN / "sstreal"
    loader = spandrel.ModelLoader(registry=_registry(folder / "real_mini_x4.json"))
    descriptor = loader.load_from_file(folder / "real_mini_x4.pth")
    assert (descriptor.architecture.name, descriptor.scale) == ("SSTReal", 4)
    io = _io(folder / "real_mini_x4_io.safetensors")
    with torch.no_grad():
        sr = descriptor.model(io["lr"], noise=io["noise"])
    assert float((sr - io["sr"]).abs().max()) <= 5e-5


def test_install_twice_is_harmless_and_detects_sst_first() -> None:
    registry = _registry()
    from sst_cli.spandrel import install

    assert install(registry) == []
    order = [support.architecture.id for support in registry.architectures("detection")]
    assert order.index("SST") < order.index("SwinIR") and "SSTReal" in order


@pytest.mark.parametrize("case", ["dat_light_x4", "dat_mini_x3"])
def test_our_dat_agrees_with_spandrels_dat(case: str) -> None:
    from spandrel.architectures.DAT.__arch.DAT import DAT

    folder = GOLDEN / "dat"
    kwargs = json.loads((folder / f"{case}.json").read_text())
    theirs = DAT(**kwargs).eval()  # spandrel's loader assumes img_size 64, so the mini case is built directly
    state = torch.load(folder / f"{case}.pth", weights_only=True)
    theirs.load_state_dict(state.get("params", state.get("params_ema", state)))
    ours = load_model(folder / f"{case}.pth")
    io = _io(folder / f"{case}_io.safetensors")
    for case_io in "ab":
        x = io[f"input_{case_io}"]
        with torch.no_grad():
            a, b = ours(x), theirs(x)
        assert float((a - b).abs().max()) <= 1e-4
        assert float((b - io[f"output_{case_io}"]).abs().max()) <= 1e-4
