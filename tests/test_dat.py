"""DAT: golden outputs of the official implementation, keyword inference, odd sizes, loading errors, CLI."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SHARED
from PIL import Image
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from sst_cli.archs import ARCHITECTURES, detect_architecture
from sst_cli.archs.dat import DAT, DATConfig
from sst_cli.archs.dat.infer import infer
from sst_cli.archs.dat.window import full_shift_mask
from sst_cli.cli import app
from sst_cli.errors import CheckpointError, ConfigError, WeightsNotFound
from sst_cli.loader import load_model
from sst_cli.spandrel.foreign import available as spandrel_available
from sst_cli.upscaler import Upscaler
from sst_cli.zoo import SCALES, VARIANTS, create_model, get_variant

DAT_GOLDEN = SHARED / "golden" / "dat"
needs_dat_golden = pytest.mark.skipif(
    not (DAT_GOLDEN / "dat_mini_x3.pth").is_file(), reason=f"DAT golden vectors not found in {DAT_GOLDEN}"
)
HAS_SPANDREL = spandrel_available()  # unknown files are tried with spandrel too: its messages differ
DAT_NAMES = [name for name, v in VARIANTS.items() if v.arch == "dat"]
PAPER_X4 = {"dat": 14.80e6, "dat-s": 11.21e6, "dat-2": 11.21e6, "dat-light": 573e3}
runner = CliRunner()

# A tiny DAT with every mechanism: two groups (the second shifts its block 0), 3conv, pixelshuffle.
TINY = {"embed_dim": 32, "depth": [2, 2], "num_heads": [2, 4], "split_size": [2, 4], "expansion_factor": 2.0,
        "img_size": 8, "upscale": 2, "resi_connection": "3conv"}  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(seed: int = 0, **overrides: object) -> DAT:
    torch.manual_seed(seed)
    model = DAT(**(TINY | overrides)).eval()
    for module in model.modules():  # non-trivial norm statistics, so that every term matters
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


def save_pth(model: torch.nn.Module, path: Path) -> Path:
    torch.save({"params": model.state_dict()}, path)  # BasicSR's layout
    return path


def save_pth_state(state: dict[str, torch.Tensor], path: Path) -> Path:
    torch.save({"params": state}, path)
    return path


# ----------------------------------------------------------------------------- golden (official outputs)
@needs_dat_golden
@pytest.mark.parametrize("case", ["dat_mini_x3", "dat_light_x4"])
@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_golden_outputs(case: str, suffix: str) -> None:
    model = load_model(DAT_GOLDEN / f"{case}{suffix}")  # architecture and keywords from the file alone
    official = json.loads((DAT_GOLDEN / f"{case}.json").read_text())
    assert model.config == DATConfig.from_kwargs(official)
    io = load_file(DAT_GOLDEN / f"{case}_io.safetensors")
    with torch.no_grad():
        for name in ("a", "b"):
            out = model(io[f"input_{name}"])
            assert out.shape == io[f"output_{name}"].shape
            assert (out - io[f"output_{name}"]).abs().max().item() <= 5e-5, name
        if suffix == ".pth":  # the authors' formulation gives the same numbers
            with model.reference_path():
                plain = model(io["input_a"])
            assert (plain - io["output_a"]).abs().max().item() <= 5e-5


@needs_dat_golden
def test_golden_files_hold_the_official_buffers() -> None:
    state = load_file(DAT_GOLDEN / "dat_mini_x3.safetensors")
    assert {k.rsplit(".", 1)[1] for k in state if "attn_mask" in k} == {"attn_mask_0", "attn_mask_1"}
    model = load_model(DAT_GOLDEN / "dat_mini_x3.safetensors")
    assert set(model.state_dict()) == set(state)
    for key in [k for k in state if k.endswith(("attn_mask_0", "relative_position_index", "rpe_biases"))]:
        assert torch.equal(model.state_dict()[key], state[key]), key  # the constructor builds them identically


# ----------------------------------------------------------------------------- zoo and inference
@pytest.mark.parametrize("name", DAT_NAMES)
@pytest.mark.parametrize("scale", SCALES)
def test_zoo_round_trips_through_the_state_dict_on_meta(name: str, scale: int) -> None:
    with torch.device("meta"):
        model = create_model(name, scale)
    state = model.state_dict()
    assert detect_architecture(state, name) is ARCHITECTURES["dat"]
    kwargs, complete = infer(state)
    assert complete and DATConfig.from_kwargs(kwargs) == get_variant(name).config(scale)
    assert sum(p.numel() for p in model.parameters()) == get_variant(name).params[scale]


@pytest.mark.parametrize("name", DAT_NAMES)
def test_parameter_counts_are_the_papers(name: str) -> None:
    count = get_variant(name).params[4]
    paper = PAPER_X4[name]
    assert abs(count - paper) <= (0.005e6 if paper > 1e6 else 0.5e3)  # 14.80M, 11.21M, 573K as printed


def test_zoo_keywords_are_the_authors_option_files() -> None:
    light, dat, small, two = (get_variant(n).config(4).to_kwargs() for n in ("dat-light", "dat", "dat-s", "dat-2"))
    assert (light["embed_dim"], light["depth"], light["num_heads"], light["split_size"]) == (60, [18], [6], [8, 32])
    assert (light["upsampler"], light["resi_connection"], light["expansion_factor"]) == (
        "pixelshuffledirect",
        "3conv",
        2.0,
    )
    for cfg in (dat, small, two):
        assert (cfg["embed_dim"], cfg["depth"], cfg["num_heads"]) == (180, [6] * 6, [6] * 6)
        assert (cfg["resi_connection"], cfg["upsampler"], cfg["img_size"]) == ("1conv", "pixelshuffle", 64)
    assert (dat["split_size"], dat["expansion_factor"]) == ([8, 32], 4.0)
    assert (small["split_size"], small["expansion_factor"]) == ([8, 16], 2.0)
    assert (two["split_size"], two["expansion_factor"]) == ([8, 32], 2.0)


OTHER_CONFIGS = [
    {"resi_connection": "1conv", "depth": [1, 3], "num_heads": [2, 4]},  # a one-block group: heads from the bias
    {"split_size": [4, 2], "img_size": 16, "depth": [3, 5], "num_heads": [4, 2]},  # wider than tall
    {"split_size": [4, 4], "upsampler": "pixelshuffledirect", "upscale": 3, "qkv_bias": False, "embed_dim": 48},
    {"in_chans": 1, "expansion_factor": 1.5, "upscale": 8, "depth": [2, 2, 2], "num_heads": [2, 2, 2]},
    {"split_size": [2, 8], "img_size": 24, "depth": [1], "num_heads": [2], "upscale": 1},
]


@pytest.mark.parametrize("overrides", OTHER_CONFIGS)
def test_other_configurations_round_trip(overrides: dict) -> None:
    model = DAT(**(TINY | overrides))
    kwargs, complete = infer(model.state_dict())
    expected = model.config
    if not expected.has_shifted_blocks:  # no stored masks: img_size shapes nothing and reads as the default
        expected = replace(expected, img_size=64)
    assert complete and DATConfig.from_kwargs(kwargs) == expected


def test_stored_masks_are_the_official_geometry() -> None:
    """Swin-style labels of the rolled image, windowed: the official per-window masks, written plainly."""
    hp, wp, hs, ws = 8, 12, 2, 4
    label = np.zeros((hp, wp), dtype=int)
    for i, rows in enumerate((slice(0, -hs), slice(-hs, -(hs // 2)), slice(-(hs // 2), None))):
        for j, cols in enumerate((slice(0, -ws), slice(-ws, -(ws // 2)), slice(-(ws // 2), None))):
            label[rows, cols] = 3 * i + j
    windows = label.reshape(hp // hs, hs, wp // ws, ws).transpose(0, 2, 1, 3).reshape(-1, hs * ws)
    expected = np.where(windows[:, None, :] != windows[:, :, None], -100.0, 0.0)
    assert np.array_equal(full_shift_mask(hp, wp, hs, ws, hs // 2, ws // 2).numpy(), expected)


# ----------------------------------------------------------------------------- the network
@pytest.mark.parametrize("size", [(1, 1), (5, 300), (7, 9), (8, 8), (13, 4)])
def test_any_size_and_the_fast_path_matches_the_plain_one(size: tuple[int, int]) -> None:
    model = tiny()
    x = torch.rand(1, 3, *size)
    with torch.no_grad():
        fast = model(x)
        with model.reference_path():
            plain = model(x)
    assert fast.shape == (1, 3, size[0] * 2, size[1] * 2)
    assert torch.isfinite(fast).all() and (fast - plain).abs().max().item() < 2e-5


def test_batch_items_are_independent() -> None:
    model = tiny()
    x = torch.rand(3, 3, 11, 6)
    with torch.no_grad():
        together = model(x)
        alone = torch.cat([model(x[i : i + 1]) for i in range(3)])
    assert (together - alone).abs().max().item() < 1e-5


def test_stored_masks_are_used_at_img_size_only() -> None:
    """As in the official code: the buffers serve inputs padded to exactly img_size, other sizes recompute."""
    model = tiny()
    mask = model.layers[1].blocks[0].attn.attn_mask_0
    at_size, other = torch.rand(1, 3, 8, 8), torch.rand(1, 3, 12, 8)
    with torch.no_grad():
        before = model(at_size), model(other)
        mask.zero_()
        after = model(at_size), model(other)
    assert not torch.allclose(before[0], after[0]) and torch.equal(before[1], after[1])


def test_describe_tells_the_engine_what_it_needs() -> None:
    d = tiny(split_size=[8, 32], img_size=32).describe()
    assert (d.architecture, d.scale, d.size_multiple, d.exact_context) == ("DAT", 2, 32, None)
    up = Upscaler(tiny(split_size=[8, 32], img_size=32), device="cpu", tile=64)
    plan = up.plan(200, 150)
    assert plan.blend and plan.align == 32 and plan.overlap % 32 == 0 and plan.tile == 64
    exact = Upscaler(tiny(), device="cpu", tile=64, exact=True).plan(200, 150)
    assert exact.tile == 0  # the receptive field is the whole image: only an untiled run is exact
    out = up.run(torch.rand(3, 70, 40)).image
    assert out.shape == (3, 140, 80) and torch.isfinite(out).all()


def test_config_refuses_unknown_and_impossible_keywords() -> None:
    with pytest.raises(ConfigError, match=r"unknown DAT config key.*window_size"):
        DATConfig.from_kwargs({"window_size": 8})
    with pytest.raises(ConfigError, match="act_layer / norm_layer are Python classes"):
        DATConfig.from_kwargs({"act_layer": "GELU"})
    with pytest.raises(ConfigError, match="num_heads has 1 entries but depth has 2"):
        DATConfig(depth=(2, 2), num_heads=(2,))
    with pytest.raises(ConfigError, match="img_size 20 must be a multiple of both split sizes"):
        DATConfig(depth=(3,), num_heads=(2,), split_size=(8, 32), img_size=20)
    with pytest.raises(ConfigError, match=r"supports scales 2\^n and 3, not 5"):
        DATConfig(upscale=5)


# ----------------------------------------------------------------------------- loading
def test_pth_and_safetensors_load_strictly(tmp_path: Path) -> None:
    model = tiny()
    state = model.state_dict()
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "t.safetensors")
    torch.save({"params_ema": state, "params": {}}, tmp_path / "ema.pth")
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, tmp_path / "wrapped.pth")
    torch.save({k: v for k, v in state.items() if "num_batches_tracked" not in k}, tmp_path / "converted.pth")
    x = torch.rand(1, 3, 9, 10)
    with torch.no_grad():
        want = model(x)
        for name in ("t.safetensors", "ema.pth", "wrapped.pth", "converted.pth"):
            # same weights; safetensors' buffers may be aligned differently, which can move a SIMD rounding
            assert (load_model(tmp_path / name)(x) - want).abs().max().item() <= 1e-6, name


def test_loading_errors_are_readable(tmp_path: Path) -> None:
    state = tiny().state_dict()
    broken = dict(state)
    del broken["layers.0.blocks.0.ffn.fc2.bias"]
    torch.save(broken, tmp_path / "missing.pth")
    with pytest.raises(CheckpointError, match=r"missing.pth does not fit the network: 1 missing: .*ffn.fc2.bias"):
        load_model(tmp_path / "missing.pth")
    torch.save(state | {"extra.weight": torch.zeros(1)}, tmp_path / "extra.pth")
    with pytest.raises(CheckpointError, match=r"1 unexpected: extra.weight"):
        load_model(tmp_path / "extra.pth")
    near = {k: v for k, v in state.items() if "rpe_biases" not in k}
    torch.save(near, tmp_path / "near.pth")
    with pytest.raises(CheckpointError, match=r"looks like a DAT checkpoint but lacks .*rpe_biases") as near_miss:
        load_model(tmp_path / "near.pth")
    assert "spandrel" not in str(near_miss.value)  # one of sst-cli's own, damaged: another library is no answer
    with pytest.raises(CheckpointError, match="holds x2 weights but x4 was requested"):
        load_model(save_pth(tiny(), tmp_path / "x2.pth"), config=TINY | {"upscale": 4})
    with pytest.raises(CheckpointError, match="embed_dim: file has 32, model needs 64"):
        load_model(tmp_path / "x2.pth", config=TINY | {"embed_dim": 64})


def test_integer_buffers_stored_as_floats_load_back_and_bad_indices_are_refused(tmp_path: Path) -> None:
    """A "convert everything to half" script made relative_position_index floats, and an index out of range was
    kept: both loaded, then every upscale died at the first forward pass with an IndexError traceback."""
    state = tiny().state_dict()
    half = {k: v.half() for k, v in state.items()}
    reference = tiny()
    reference.load_state_dict(half)  # torch's copying load casts the floats back to the buffers' integers
    loaded = load_model(save_pth_state(half, tmp_path / "half.pth"))
    x = torch.rand(1, 3, 9, 10)
    with torch.no_grad():
        assert (loaded(x) - reference(x)).abs().max().item() <= 1e-6
    key = "layers.1.blocks.0.attn.attns.1.relative_position_index"
    for name, index, message in [
        ("far.pth", state[key] + 100000, rf"far\.pth: {key} holds indices from 100000 to 100020, outside the 21 rows"),
        ("minus.pth", state[key] - 1, rf"minus\.pth: {key} holds indices from -1 to 19, outside the 21 rows"),
        ("half.pth", state[key] + 0.5, rf"stored as floats that do not hold whole numbers exactly: {key} float32$"),
    ]:
        with pytest.raises(CheckpointError, match=message):
            load_model(save_pth_state(state | {key: index}, tmp_path / name))


def test_window_sides_read_from_values_are_checked_against_the_shapes(tmp_path: Path) -> None:
    """The split size is read from the last row of rpe_biases: (3000, 3000) had the build allocate 81 TB of masks
    and (-5, 2) met isqrt of a negative number, both as tracebacks; a stored mask for other windows (a few
    bytes a window) had the build allocate N x N floats a window."""
    state = tiny().state_dict()
    key = "layers.0.blocks.0.attn.attns.0.rpe_biases"
    for name, last, said in [
        ("huge", [3000.0, 3000.0], r"\(3000, 3000\) means a 3001 x 3001 window, but relative_position_index \(8, 8\)"),
        ("negative", [-5.0, 2.0], r"\(-5, 2\) means a -4 x 3 window"),
        ("fraction", [1.5, 3.0], r"\(1\.5, 3\) is not a pair of whole numbers"),
    ]:
        offsets = state[key].clone()
        offsets[-1] = torch.tensor(last)
        with pytest.raises(CheckpointError, match=rf"{name}\.pth: {key}: its last offset {said}"):
            load_model(save_pth_state(state | {key: offsets}, tmp_path / f"{name}.pth"))
    result = runner.invoke(app, ["models", "info", str(tmp_path / "huge.pth")])
    assert result.exit_code == 1 and "3001 x 3001 window" in result.output and "Traceback" not in result.output
    mask = "layers.1.blocks.0.attn.attn_mask_0"
    with pytest.raises(CheckpointError, match=rf"mask\.pth: {mask} \(100000, 1, 1\) is not the \(windows, 8, 8\)"):
        load_model(save_pth_state(state | {mask: torch.zeros(100000, 1, 1)}, tmp_path / "mask.pth"))


def test_a_tensor_of_another_number_of_dimensions_or_missing_is_named(tmp_path: Path) -> None:
    """Inference read sizes from shapes by index: a raw IndexError traceback, and a missing tensor unnamed."""
    state = tiny().state_dict()
    with pytest.raises(CheckpointError, match=r"flat\.pth: conv_first\.weight has the shape \(32,\): 1-D, where DAT's"):
        load_model(save_pth_state(state | {"conv_first.weight": torch.zeros(32)}, tmp_path / "flat.pth"))
    key = "layers.0.blocks.0.ffn.fc1.weight"
    gone = {k: v for k, v in state.items() if k != key}
    with pytest.raises(CheckpointError, match=rf"gone\.pth: an incomplete DAT checkpoint: key '{key}' is missing"):
        load_model(save_pth_state(gone, tmp_path / "gone.pth"))


def test_tensors_that_describe_no_valid_network_are_named(tmp_path: Path) -> None:
    """Three heads for 32 channels: the config's refusal said neither the file nor that its tensors are at fault
    (exit 2, as if an option were wrong)."""
    state = tiny().state_dict() | {"layers.0.blocks.1.attn.temperature": torch.zeros(3, 1, 1)}
    with pytest.raises(CheckpointError, match=r"heads\.pth: its tensors describe no valid DAT network: num_heads 3"):
        load_model(save_pth_state(state, tmp_path / "heads.pth"))


def test_other_architectures_are_named_and_refused(tmp_path: Path) -> None:
    swinir = {
        "conv_first.weight": torch.zeros(60, 3, 3, 3),
        "patch_embed.norm.weight": torch.zeros(60),
        "layers.0.residual_group.blocks.0.attn.relative_position_bias_table": torch.zeros(225, 6),
    }
    torch.save({"params": swinir}, tmp_path / "swinir.pth")
    # with spandrel installed it was tried too (and found too few keys); without, the message says to install it
    tail = "neither sst-cli nor spandrel can load it" if HAS_SPANDREL else "runs SST, DAT, SSTReal networks"
    refused = rf"swinir.pth: this is a SwinIR checkpoint .*{tail}"
    with pytest.raises(CheckpointError, match=refused):
        load_model(tmp_path / "swinir.pth")
    torch.save({"params_ema": {"body.0.rdb1.conv1.weight": torch.zeros(1), "conv_first.weight": torch.zeros(1)}},
               tmp_path / "esrgan.pth")  # fmt: skip
    with pytest.raises(CheckpointError, match="RRDBNet"):
        load_model(tmp_path / "esrgan.pth")
    torch.save({"net.weight": torch.zeros(2)}, tmp_path / "other.pth")
    unknown = (
        "neither sst-cli nor spandrel recognises" if HAS_SPANDREL else "not a checkpoint of an architecture sst-cli"
    )
    with pytest.raises(CheckpointError, match=rf"{unknown} .*net.weight"):
        load_model(tmp_path / "other.pth")


def test_config_with_official_keywords_overrides(tmp_path: Path) -> None:
    path = save_pth(tiny(), tmp_path / "t.pth")
    x = torch.rand(1, 3, 6, 6)
    (tmp_path / "c.json").write_text(json.dumps(TINY | {"img_range": 255.0, "drop_path_rate": 0.0}))
    scaled = load_model(path, config=tmp_path / "c.json")  # img_range is in no tensor: only a config says it
    assert scaled.config.img_range == 255.0
    with torch.no_grad():
        assert not torch.allclose(scaled(x), load_model(path)(x))
    with pytest.raises(ConfigError, match=r"unknown DAT config key.*patch_size"):
        load_model(path, config=TINY | {"patch_size": 1})


def test_zoo_name_without_local_weights_says_where_to_get_them() -> None:
    with pytest.raises(WeightsNotFound) as info:
        load_model("dat", 4)
    text = str(info.value)
    assert "DAT_x4.pth" in text and "--weights DAT_x4.pth" in text and "github.com/zhengchen1999/DAT" in text
    assert "hf://" in text and text.count(". ") == 0  # one sentence
    with pytest.raises(WeightsNotFound, match=r"DAT_light_x2.pth"):
        load_model("dat-light", 2)


def test_zoo_name_with_a_file_checks_the_architecture(tmp_path: Path) -> None:
    official = save_pth(create_model("dat-light", 2), tmp_path / "DAT_light_x2.pth")
    assert load_model(official, variant="dat-light").config == get_variant("dat-light").config(2)
    path = save_pth(tiny(), tmp_path / "t.pth")
    with pytest.raises(CheckpointError, match=r"does not match the requested DAT architecture: .*embed_dim"):
        load_model(path, 2, variant="dat")
    with pytest.raises(CheckpointError, match="holds DAT weights, but sst-light is a SST model"):
        load_model(path, 2, variant="sst-light")


# ----------------------------------------------------------------------------- the CLI, end to end
def _image(path: Path, size: tuple[int, int]) -> Path:
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def test_cli_upscale_eval_and_bench_with_a_dat_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    weights = str(save_pth(tiny(), tmp_path / "tiny_dat_x2.pth"))
    _image(tmp_path / "in.png", (20, 14))
    result = runner.invoke(app, ["upscale", "in.png", "--weights", weights, "-o", "out.png", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert Image.open("out.png").size == (40, 28)
    Path("c.json").write_text(json.dumps(TINY | {"img_range": 255.0}))  # official keywords override the file's
    result = runner.invoke(app, ["upscale", "in.png", "--weights", weights, "--config", "c.json", "-o", "c.png"])
    assert result.exit_code == 0, result.output
    assert not np.array_equal(np.asarray(Image.open("c.png")), np.asarray(Image.open("out.png")))
    (tmp_path / "ds" / "HR").mkdir(parents=True)
    _image(tmp_path / "ds" / "HR" / "a.png", (24, 16))
    result = runner.invoke(app, ["eval", "--weights", weights, "-d", str(tmp_path / "ds"), "--json", "r.json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(Path("r.json").read_text())
    assert report["results"][0]["model"] == "tiny_dat_x2" and report["results"][0]["scale"] == 2
    result = runner.invoke(
        app,
        ["bench", "--weights", weights, "--size", "24x16", "--runs", "1", "--warmup", "0", "--device", "cpu",
         "--precision", "fp32", "--reference", "--json", "b.json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(Path("b.json").read_text())["results"]
    assert [(r["model"], r["scale"], r["path"]) for r in rows] == [
        ("tiny_dat_x2", 2, "ours"),
        ("tiny_dat_x2", 2, "reference"),
    ]
    assert rows[1]["max_abs_diff"] < 1e-4


def test_cli_refuses_a_foreign_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    torch.save({"params": {"head.0.weight": torch.zeros(1), "body.0.body.0.weight": torch.zeros(1),
                           "tail.0.0.weight": torch.zeros(1)}}, "edsr.pth")  # fmt: skip
    _image(tmp_path / "in.png", (8, 8))
    result = runner.invoke(app, ["upscale", "in.png", "--weights", "edsr.pth", "-o", "out.png", "--device", "cpu"])
    assert result.exit_code != 0 and "EDSR checkpoint" in result.output and "Traceback" not in result.output


def test_dat_compiles_block_by_block_without_graph_breaks(dynamo_only: list[object]) -> None:
    """``--compile`` compiles each DAT block, blocks alike sharing a graph. The bias check (constant along the
    keys?) is data-dependent: while tracing it is skipped, else it split every spatial block's graph in two."""
    from torch._dynamo.utils import counters

    from sst_cli.archs.dat.blocks import DATBlock
    from sst_cli.compiling import compile_network

    compiled = dynamo_only
    model = tiny()
    blocks = model.compile_regions()
    assert blocks and all(isinstance(b, DATBlock) for b in blocks) and len(blocks) == 4
    x = torch.rand(1, 3, 12, 10)
    torch._dynamo.reset()
    counters.clear()
    with torch.inference_mode(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        expected = model(x)
        ready, undo = compile_network(model)
        assert ready is model and [getattr(fn, "__self__", None) for fn in compiled] == blocks
        got = model(x)
        undo()
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert not [w for w in said if "lru_cache" in str(w.message)]  # the shift masks' cache, traced
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert all("forward" not in vars(block) for block in blocks)
