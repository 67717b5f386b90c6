"""spandrel checkpoints through sst-cli's engine (``sst_cli.spandrel``): random-weight files built with
spandrel's own architecture classes, run by ``sst upscale --weights`` / ``Upscaler`` and compared with
spandrel's model on the whole image (same pixels) and tiled (>= 60 dB).

Needs the optional extra (``pip install -e ".[spandrel]"``, which pulls torchvision); ``.ci/run`` runs
this file in a second environment that has it. Without it, only the no-spandrel message is tested.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from sst_cli import Upscaler, load_model
from sst_cli.errors import CheckpointError, ConfigError

HAS_SPANDREL = __import__("importlib").util.find_spec("spandrel") is not None
needs_spandrel = pytest.mark.skipif(
    not HAS_SPANDREL, reason="spandrel is not installed (pip install -e '.[spandrel]'; .ci/run installs it)"
)


def _builders() -> dict[str, Callable[[], torch.nn.Module]]:
    """Tiny configs of spandrel's own classes (seconds on 2 cores)."""
    from spandrel.architectures.Compact.__arch.SRVGG import SRVGGNetCompact
    from spandrel.architectures.DAT.__arch.DAT import DAT
    from spandrel.architectures.ESRGAN.__arch.RRDB import RRDBNet
    from spandrel.architectures.HAT.__arch.HAT import HAT
    from spandrel.architectures.OmniSR.__arch.OmniSR import OmniSR
    from spandrel.architectures.SPAN.__arch.span import SPAN
    from spandrel.architectures.SwinIR.__arch.SwinIR import SwinIR

    return {
        "ESRGAN": lambda: RRDBNet(in_nc=3, out_nc=3, num_filters=16, num_blocks=1, scale=2),
        "Compact": lambda: SRVGGNetCompact(num_in_ch=3, num_out_ch=3, num_feat=16, num_conv=4, upscale=4),
        "SwinIR": lambda: SwinIR(
            embed_dim=24,
            depths=[2, 2],
            num_heads=[2, 2],
            window_size=8,
            upscale=2,
            upsampler="pixelshuffledirect",
            img_size=32,
            mlp_ratio=2.0,
        ),
        "HAT": lambda: HAT(
            embed_dim=24,
            depths=(2,),
            num_heads=(2,),
            window_size=8,
            upscale=2,
            img_size=32,
            num_feat=16,
            compress_ratio=3,
            squeeze_factor=8,
            mlp_ratio=2.0,
        ),
        "DAT": lambda: DAT(
            embed_dim=32, split_size=[4, 8], depth=[2], num_heads=[2], upscale=2, img_size=32, expansion_factor=2.0
        ),
        "SPAN": lambda: SPAN(num_in_ch=3, num_out_ch=3, feature_channels=16, upscale=2),
        "OmniSR": lambda: OmniSR(num_in_ch=3, num_out_ch=3, num_feat=16, window_size=8, up_scale=2, block_num=1),
        "Compact-1x": lambda: SRVGGNetCompact(num_in_ch=3, num_out_ch=3, num_feat=16, num_conv=4, upscale=1),
        "ESRGAN-1x-gray": lambda: RRDBNet(in_nc=1, out_nc=1, num_filters=16, num_blocks=1, scale=1),
    }


NAMES = ["ESRGAN", "Compact", "SwinIR", "HAT", "DAT", "SPAN", "OmniSR", "Compact-1x", "ESRGAN-1x-gray"]


def _checkpoint(tmp_path: Path, name: str) -> Path:
    """A random-weight checkpoint of spandrel's class, in the usual ``params_ema`` wrapper (or safetensors)."""
    torch.manual_seed(0)
    model = _builders()[name]()
    with torch.no_grad():  # the default init leaves some of these nets near-constant: make them react
        for p in model.parameters():
            if p.ndim >= 2 and p.numel():
                p.add_(torch.randn_like(p) * 0.5 / math.sqrt(p[0].numel()))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if name == "SPAN":
        from safetensors.torch import save_file

        path = tmp_path / f"{name}.safetensors"
        save_file(state, str(path))
    else:
        path = tmp_path / f"{name}.pth"
        torch.save({"params_ema": state}, path)
    return path


def _image(height: int, width: int) -> torch.Tensor:
    """A smooth picture with some texture, (3, H, W) in [0, 1]."""
    y, x = torch.meshgrid(torch.linspace(0, 1, height), torch.linspace(0, 1, width), indexing="ij")
    g = torch.Generator().manual_seed(1)
    noise = torch.rand(3, height, width, generator=g) * 0.2
    return (torch.stack([x, y, (x + y) / 2]) * 0.6 + 0.2 + noise - 0.1).clamp(0, 1)


def _spandrel_output(path: Path, image: torch.Tensor) -> torch.Tensor:
    """What spandrel's own loader and call make of the whole image, as (3, H*s, W*s)."""
    import spandrel

    descriptor = spandrel.ModelLoader().load_from_file(path).eval()
    x = image[None].clone()  # RCAN writes into its input
    if descriptor.input_channels == 1:
        x = (x * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, keepdim=True)
    y = descriptor(x)[0]
    return y.expand(3, -1, -1) if y.shape[0] == 1 else y


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1 / mse)


@needs_spandrel
@pytest.mark.parametrize("name", NAMES)
def test_whole_image_is_spandrels_output(tmp_path: Path, name: str) -> None:
    path = _checkpoint(tmp_path, name)
    image = _image(40, 56)
    expected = _spandrel_output(path, image)
    assert float(expected.std()) > 0.01, "the random network should not be constant"
    up = Upscaler(weights=path, device="cpu", precision="fp32", tile=0)
    got = up.run(image).image
    assert got.shape == expected.shape
    if up.descriptor.architecture == "DAT":  # sst-cli's own DAT claims DAT files (same function, ~1e-6 apart)
        assert float((got.clamp(0, 1) - expected).abs().max()) < 1e-5
    else:
        assert torch.equal(got.clamp(0, 1), expected)


@needs_spandrel
@pytest.mark.parametrize("name", ["FBCNN", "FDnCNN"])
def test_models_with_their_own_call_run_as_spandrel_calls_them(tmp_path: Path, name: str) -> None:
    """FBCNN returns (image, quality); FDnCNN takes a noise-level channel its call appends: measuring the receptive
    field through the bare module crashed on both."""
    from spandrel.architectures.DnCNN.__arch.network_dncnn import DnCNN
    from spandrel.architectures.FBCNN.__arch.FBCNN import FBCNN

    torch.manual_seed(0)
    build = {
        "FBCNN": lambda: FBCNN(in_nc=3, out_nc=3, nc=[8, 16, 32, 512], nb=2),  # its quality head needs 512
        "FDnCNN": lambda: DnCNN(in_nc=4, out_nc=3, nc=16, nb=4, mode="FDnCNN"),
    }
    path = tmp_path / f"{name}.pth"
    torch.save(build[name]().state_dict(), path)
    image = _image(32, 40)
    up = Upscaler(weights=path, device="cpu", precision="fp32", tile=0)
    assert torch.equal(up.run(image).image.clamp(0, 1), _spandrel_output(path, image))


@needs_spandrel
def test_a_model_that_fails_on_an_image_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sst_cli.spandrel import foreign

    def broken(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("num_conv_kernels must be above 1")  # what a tiny AuraSR's forward raised

    monkeypatch.setattr(foreign, "measure_reach", broken)
    path = _checkpoint(tmp_path, "Compact")
    with pytest.raises(CheckpointError, match=r"Compact\.pth: the RealESRGAN Compact model spandrel built from it "
                       r"fails on a test image \(AssertionError: num_conv_kernels must be above 1\)"):  # fmt: skip
        Upscaler(weights=path, device="cpu", precision="fp32", tile=0)


@needs_spandrel
def test_a_recognised_file_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, "ESRGAN")
    state = torch.load(path, weights_only=True)["params_ema"]
    key = next(k for k, v in state.items() if v.ndim == 4 and k != "model.0.weight")
    out = state[key].shape[0]
    state[key] = torch.zeros(out, 5, 3, 3)
    torch.save(state, tmp_path / "odd.pth")
    with pytest.raises(CheckpointError) as info:
        Upscaler(weights=tmp_path / "odd.pth", device="cpu", precision="fp32", tile=0)
    text = str(info.value)
    assert "\n" not in text and "torch.Size" not in text
    assert f"size mismatch for {key}: file [{out}, 5, 3, 3] vs model" in text
    with pytest.raises(CheckpointError, match="without variant and config, spandrel may run it"):
        load_model(path, variant="sst-light")


UNTILEABLE = "OmniSR"  # its grid attention pairs pixels a fixed fraction of the image apart: see below
GLOBAL = ("HAT", "DAT")  # global channel attention: the context they get (64 px) needs a larger image to matter


@needs_spandrel
@pytest.mark.parametrize("name", [n for n in NAMES if n != UNTILEABLE])
def test_tiled_within_60_db_of_spandrel(tmp_path: Path, name: str) -> None:
    """HAT's and DAT's global channel attention make exact tiles impossible: the engine measures on a probe
    the context that keeps them within 60 dB (with a margin), and uses it."""
    path = _checkpoint(tmp_path, name)
    height, width = (192, 192) if name in GLOBAL else (72, 88)  # 192: the smallest probe (seams.MIN_PROBE)
    image = _image(height, width)
    expected = _spandrel_output(path, image)
    up = Upscaler(weights=path, device="cpu", precision="fp32", tile=32, batch=4)  # batch: fewer calls, same pixels
    plan = up.plan(height, width)
    assert plan.tile == 32 and 32 + 2 * plan.overlap < width, "tiles must really miss part of the image"
    got = up.run(image).image.clamp(0, 1)
    assert _psnr(got, expected) >= 60.0
    if up.descriptor.exact_context is not None:  # a finite measured field: tiles are exact, to rounding
        assert float((got - expected).abs().max()) < 1e-5


@needs_spandrel
def test_a_model_that_no_context_makes_tileable_runs_whole_or_says_its_bound(tmp_path: Path) -> None:
    """OmniSR (its grid attention: 37-45 dB at any context up to 64 px on the probe) runs whole when memory
    allows, as spandrel does; tiles forced on it run, saying the figure measured for them."""
    path = _checkpoint(tmp_path, UNTILEABLE)
    image = _image(160, 192)
    expected = _spandrel_output(path, image)
    whole = Upscaler(weights=path, device="cpu", precision="fp32", tile="auto", max_memory=2**34)
    assert whole.plan(160, 192).tile == 0
    assert torch.equal(whole.run(image).image.clamp(0, 1), expected)
    messages: list[str] = []
    tiled = Upscaler(weights=path, device="cpu", precision="fp32", tile=32, batch=4, on_message=messages.append)
    got = tiled.run(image).image.clamp(0, 1)
    said = " ".join(messages)
    match = re.search(r"OmniSR: .*32 px tiles with (\d+) px of context measured ([\d.]+) dB from the whole image", said)
    assert match and "no context up to 64 px reaches it" in said and "--tile auto" in said, said
    assert float(match[2]) < 60 and _psnr(got, expected) < 60, "the warning is due"


@needs_spandrel
def test_tiles_forced_below_what_a_model_needs_say_the_measured_bound(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, "HAT")
    image = _image(96, 128)
    messages: list[str] = []
    up = Upscaler(
        weights=path, device="cpu", precision="fp32", tile=16, tile_overlap=8, batch=4, on_message=messages.append
    )
    got = up.run(image).image.clamp(0, 1)
    said = " ".join(messages)
    pattern = r"HAT: .*16 px tiles with 8 px of context measured ([\d.]+) dB .* below 60 dB, which needs tiles"
    match = re.search(pattern + r" of at least 32 px with (\d+) px of context", said)
    assert match, said
    assert int(match[2]) == up.seams.needed.context > 8
    assert float(match[1]) < 60 and _psnr(got, _spandrel_output(path, image)) < 60, "the warning is due"


@needs_spandrel
def test_descriptor_facts_come_from_spandrel_and_measurement(tmp_path: Path) -> None:
    compact = load_model(_checkpoint(tmp_path, "Compact"))
    d = compact.describe()
    # conv_first + 4 body convs + the last conv, all 3x3: a radius of 6 LR pixels, plus the stated margin
    assert (d.architecture, d.scale, d.size_multiple, d.exact_context) == ("RealESRGAN Compact", 4, 1, 6 + 2)
    one = load_model(_checkpoint(tmp_path, "Compact-1x")).describe()
    assert one.scale == 1
    gray = load_model(_checkpoint(tmp_path, "ESRGAN-1x-gray"))
    assert gray.facts.input_channels == 1  # type: ignore[attr-defined]
    swinir = load_model(_checkpoint(tmp_path, "SwinIR")).describe()
    assert swinir.size_multiple == 8 and swinir.default_context >= 8  # its window, read from the module
    hat = load_model(_checkpoint(tmp_path, "HAT")).describe()
    assert hat.exact_context is None and "receptive field reaches beyond" in hat.seam_note


@needs_spandrel
def test_cli_upscale_weights_writes_spandrels_pixels(tmp_path: Path) -> None:
    from sst_cli.cli import app

    path = _checkpoint(tmp_path, "ESRGAN")
    src = tmp_path / "in.png"
    Image.fromarray(np.round(_image(24, 32).permute(1, 2, 0).numpy() * 255).astype(np.uint8)).save(src)
    out = tmp_path / "out.png"
    result = CliRunner().invoke(app, ["upscale", str(src), "--weights", str(path), "-o", str(out), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    lr = torch.from_numpy(np.asarray(Image.open(src), dtype=np.float32) / 255).permute(2, 0, 1)
    expected = np.round(_spandrel_output(path, lr).permute(1, 2, 0).numpy() * 255).astype(np.uint8)
    assert np.array_equal(np.asarray(Image.open(out)), expected)


@needs_spandrel
def test_models_info_file_says_what_was_detected(tmp_path: Path) -> None:
    from sst_cli.cli import app

    result = CliRunner().invoke(app, ["models", "info", str(_checkpoint(tmp_path, "Compact-1x"))])
    assert result.exit_code == 0, result.output
    for text in ("RealESRGAN Compact", "x1", "Restoration", "spandrel 0.4", "parameters"):
        assert text in result.output


@needs_spandrel
def test_building_a_swin_style_model_says_nothing_the_user_cannot_act_on(tmp_path: Path) -> None:
    """HAT's code calls torch.meshgrid the old way; torch's remark about it went to the terminal of every run.
    A process of its own: torch says it once per process, so an earlier test could have used it up."""
    path = _checkpoint(tmp_path, "HAT")
    run = subprocess.run(
        [sys.executable, "-m", "sst_cli", "models", "info", str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert "HAT" in run.stdout and "Warning" not in run.stdout + run.stderr, run.stderr
    debug = subprocess.run(  # --debug still shows the libraries' remarks
        [sys.executable, "-m", "sst_cli", "--debug", "models", "info", str(path)], capture_output=True, text=True
    )
    assert "meshgrid" in debug.stderr


@needs_spandrel
def test_the_measured_reach_is_kept_per_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Measuring the receptive field is a forward and a backward pass on the CPU (10 s for HAT_SRx4): a second
    load of the same weights reads it; other weights, or a cache file that is not what was written, measure."""
    from sst_cli.spandrel import foreign

    measured: list[int] = []
    real = foreign.measure_reach

    def counting(*args: object, **kwargs: object) -> object:
        measured.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(foreign, "measure_reach", counting)
    path = _checkpoint(tmp_path, "HAT")
    first = load_model(path).describe()
    assert len(measured) == 1
    again = load_model(path).describe()
    assert len(measured) == 1 and (again.exact_context, again.seam_note) == (first.exact_context, first.seam_note)
    stored = list((tmp_path / "seams-cache").glob("reach-*.json"))
    assert len(stored) == 1
    stored[0].write_text('{"exact": "twelve", "default": 8, "note": ""}')
    assert load_model(path).describe().seam_note == first.seam_note and len(measured) == 2
    load_model(_checkpoint(tmp_path, "SwinIR"))
    assert len(measured) == 3 and len(list((tmp_path / "seams-cache").glob("reach-*.json"))) == 2


@needs_spandrel
@pytest.mark.usefixtures("dynamo_only")
@pytest.mark.parametrize(
    ("name", "block", "graphs"), [("SwinIR", "SwinTransformerBlock", 2), ("HAT", "HAB", 2), ("ESRGAN", None, 1)]
)
def test_compile_takes_a_transformers_blocks_one_by_one(
    tmp_path: Path, name: str, block: str | None, graphs: int
) -> None:
    """The block a model's ModuleLists hold most is what ``--compile`` compiles one by one, as for SST; a convnet
    without one is compiled whole. Blocks that differ only in their window shift share a graph (SwinIR's 4
    blocks in 2 groups: 2 graphs), though each holds its own drop-path probability and the first of a group
    is fed a transposed view."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from sst_cli.compiling import compile_network

    torch._dynamo.reset()
    counters.clear()
    model = load_model(_checkpoint(tmp_path, name))
    regions = model.compile_regions()
    assert {type(r).__name__ for r in regions} == ({block} if block else set())
    x = _image(24, 40)[None]
    with torch.inference_mode():
        expected = model(x)
        ready, undo = compile_network(model)
        assert (ready is model) == bool(block) and all("forward" in vars(r) for r in regions)
        got = ready(x)
        undo()
    assert not any("forward" in vars(r) for r in regions)
    assert torch.allclose(got, expected, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == graphs


@needs_spandrel
def test_unrecognised_file_names_the_nearest_architecture(tmp_path: Path) -> None:
    state = {k: v for k, v in torch.load(_checkpoint(tmp_path, "SwinIR"))["params_ema"].items() if "mlp" not in k}
    path = tmp_path / "broken.pth"
    torch.save(state, path)
    message = r"broken\.pth: this is a SwinIR checkpoint .*neither sst-cli nor spandrel .* nearest .* is SwinIR.*mlp"
    with pytest.raises(CheckpointError, match=message):
        load_model(path)


@needs_spandrel
def test_bf16_only_where_the_model_supports_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sst_cli import upscaler

    model = load_model(_checkpoint(tmp_path, "Compact"))
    object.__setattr__(model.describe(), "bf16_safe", False)  # as spandrel says for e.g. AuraSR
    with pytest.raises(ConfigError, match="do not support bf16"):
        Upscaler(model, device="cpu", precision="bf16")
    monkeypatch.setattr(upscaler, "resolve_precision", lambda precision, device: torch.bfloat16)
    up = Upscaler(model, device="cpu", precision="auto")  # auto falls back to fp32
    assert up.dtype == torch.float32 and next(up.model.parameters()).dtype == torch.float32


def test_without_spandrel_the_message_says_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sst_cli.spandrel import foreign as bridge

    monkeypatch.setattr(bridge, "available", lambda: False)
    path = tmp_path / "4x-Something.pth"
    torch.save(
        {"params_ema": {"conv_first.weight": torch.zeros(4, 3, 3, 3), "body.0.rdb1.conv1.weight": torch.zeros(1)}}, path
    )
    hint = r"pip install 'spandrel>=0\.4\.2,<0\.5' with the torchvision"
    with pytest.raises(CheckpointError, match=r"4x-Something\.pth: this is a RRDBNet .*" + hint):
        load_model(path)


@needs_spandrel
def test_eval_weights_runs_a_spandrel_checkpoint(tmp_path: Path) -> None:
    from conftest import DATASETS

    from sst_cli.cli import app

    if not (DATASETS / "Set5").is_dir():
        pytest.skip(f"Set5 not found under {DATASETS}")
    path = _checkpoint(tmp_path, "Compact")  # x4
    out = tmp_path / "r.json"
    args = ["eval", "--weights", str(path), "-d", "Set5", "--data-root", str(DATASETS), "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    text = json.dumps(rows)
    assert '"scale": 4' in text and '"Set5"' in text


def _write_foreign(tmp_path: Path, name: str) -> Path:
    """A random-weight state dict of spandrel's PLKSR, RealPLKSR or RCAN (which write into tensors in place)."""
    from spandrel.architectures.PLKSR.__arch.PLKSR import PLKSR
    from spandrel.architectures.PLKSR.__arch.RealPLKSR import RealPLKSR
    from spandrel.architectures.RCAN.__arch.rcan_arch import RCAN

    build: dict[str, Callable[[], torch.nn.Module]] = {
        "PLKSR": lambda: PLKSR(dim=16, n_blocks=2, upscaling_factor=2, kernel_size=9),
        "RealPLKSR": lambda: RealPLKSR(dim=16, n_blocks=2, upscaling_factor=2, kernel_size=9),
        "RCAN": lambda: RCAN(scale=2, n_resgroups=1, n_resblocks=1, n_feats=16, reduction=4),
    }
    torch.manual_seed(0)
    path = tmp_path / f"{name}.pth"
    torch.save(build[name]().state_dict(), path)
    return path


@needs_spandrel
@pytest.mark.parametrize("name", ["PLKSR", "RealPLKSR", "RCAN"])
def test_models_writing_in_place_load_and_tile(tmp_path: Path, name: str) -> None:
    """PLKSR writes its conv's output into its input in place, RCAN scales its input in place: measuring the
    receptive field by autograd failed on both, and the files were refused as failing on a test image."""
    path = _write_foreign(tmp_path, name)
    image = _image(40, 48)
    expected = _spandrel_output(path, image)
    whole = Upscaler(weights=path, device="cpu", precision="fp32", tile=0)
    assert torch.equal(whole.run(image).image.clamp(0, 1), expected)
    assert torch.equal(image, _image(40, 48)), "the caller's image is left as it was"
    tiled = Upscaler(weights=path, device="cpu", precision="fp32", tile=16, batch=4)
    got = tiled.run(image).image.clamp(0, 1)
    if tiled.descriptor.exact_context is not None:  # a finite measured field: tiles are exact, to rounding
        assert float((got - expected).abs().max()) < 1e-5
    else:
        assert _psnr(got, expected) >= 60.0


def test_a_model_failing_without_gradients_too_still_fails() -> None:
    """The measurement without gradients is a fallback for autograd's troubles, not a way to hide a model's own."""
    from sst_cli.spandrel.context import measure_reach

    class Broken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("shapes do not match")

    with pytest.raises(RuntimeError, match="shapes do not match"):
        measure_reach(Broken(), 3, 1, probe=16)


@needs_spandrel
def test_many_size_mismatches_show_the_first_three(tmp_path: Path) -> None:
    """A wrong-shaped first conv makes spandrel build an ESRGAN whose every later layer mismatches the file: the
    message listed them all (~30 clauses, 3 KB on one line)."""
    path = _checkpoint(tmp_path, "ESRGAN")
    state = torch.load(path, weights_only=True)["params_ema"]
    state["model.0.weight"], state["model.0.bias"] = torch.zeros(24, 3, 3, 3), torch.zeros(24)
    torch.save(state, tmp_path / "odd.pth")
    with pytest.raises(CheckpointError) as info:
        Upscaler(weights=tmp_path / "odd.pth", device="cpu", precision="fp32", tile=0)
    text = str(info.value)
    assert text.count("size mismatch for") == 3 and re.search(r"\.\.\. and \d+ more$", text), text
    assert "size mismatch for model.1.sub.0.RDB1.conv1.0.weight: file [32, 16, 3, 3] vs model [32, 24, 3, 3]" in text
    assert len(text) < 600


def _drct(tmp_path: Path) -> Path:
    """A tiny DRCT: spandrel says it supports bf16, but off its img_size (32) it builds its window mask in fp32."""
    from spandrel.architectures.DRCT.__arch.drct_arch import DRCT

    torch.manual_seed(0)
    model = DRCT(
        embed_dim=12, depths=(1,), num_heads=(2,), window_size=8, upscale=2, upsampler="pixelshuffle", img_size=32, gc=8
    )
    path = tmp_path / "DRCT.pth"
    torch.save(model.state_dict(), path)
    return path


@needs_spandrel
def test_bf16_is_checked_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DRCT's bf16 flag is checked by a small bf16 forward: an explicit bf16 is refused by name, auto stays fp32;
    models whose bf16 works still run in it. The answer is kept per weights and device kind."""
    from sst_cli import upscaler

    path = _drct(tmp_path)
    with pytest.raises(
        ConfigError, match=r"^DRCT fails in bf16 on a 45x37 image \(RuntimeError: .*\): use precision='fp32'$"
    ):
        Upscaler(weights=path, device="cpu", precision="bf16")
    assert len(list((tmp_path / "seams-cache").glob("bf16-*-cpu.json"))) == 1
    for name in ("ESRGAN", "HAT"):
        up = Upscaler(weights=_checkpoint(tmp_path, name), device="cpu", precision="bf16", tile=0)
        assert up.dtype == torch.bfloat16 and up.run(_image(20, 24)).image.shape[-2:] == (40, 48)
    monkeypatch.setattr(upscaler, "resolve_precision", lambda precision, device: torch.bfloat16)
    up = Upscaler(weights=path, device="cpu", precision="auto", tile=0)
    assert up.dtype == torch.float32 and next(up.model.parameters()).dtype == torch.float32
    image = _image(37, 45)
    assert torch.equal(up.run(image).image.clamp(0, 1), _spandrel_output(path, image))


@needs_spandrel
def test_a_bf16_trial_that_runs_out_of_memory_is_not_kept_as_a_failure(tmp_path: Path) -> None:
    """A busy GPU's out-of-memory in the bf16 trial said nothing of bf16: kept, it would have turned bf16 off for
    those weights for good."""
    from sst_cli.archs import network_of

    network = network_of(Upscaler(weights=_checkpoint(tmp_path, "ESRGAN"), device="cpu", tile=0).model)
    calls = []

    def hungry(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")

    network._call = hungry  # the trial's copy calls it too
    assert network.bf16_failure(torch.device("cpu")) is None and calls == [1]  # the flag trusted
    assert list((tmp_path / "seams-cache").glob("bf16-*.json")) == []  # nothing kept: the next run tries again
