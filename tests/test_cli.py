"""The CLI skeleton: help, version, the models commands, and the hub path end to end (offline)."""

from __future__ import annotations

from pathlib import Path

import torch
from conftest import GOLDEN, add_to_cache, needs_golden
from typer.testing import CliRunner

from sst_cli import __version__, load_model
from sst_cli.cli import app

runner = CliRunner()
COMMIT = "c3" * 20


def test_help_shows_examples() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "Examples" in result.output and "sst upscale" in result.output


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_models_table_lists_every_variant(offline_cache: Path) -> None:
    result = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    for name in ("sst-light", "sst-light+", "sst-l+", "sst-xl+", "sst-light-291"):
        assert name in result.output
    assert "21.31M" in result.output  # sst-l x4
    row = next(line for line in result.output.splitlines() if "sst-light-291" in line)
    assert "not trained / not trained / bundled" in row and "trained by sst-cli on 291 images" in row
    assert "not the paper's weights" in row
    official = next(line for line in result.output.splitlines() if "│ sst-light " in line)
    assert "hub / hub / hub" in official and "the paper's authors" in official


def test_models_info_of_our_weights(offline_cache: Path) -> None:
    result = runner.invoke(app, ["models", "info", "sst-light-291"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "not the paper's weights" in result.output and "sst-light (identical)" in result.output
    assert "x2: 893,340 parameters; weights not trained yet (sst train --model sst-light --scale 2" in result.output
    assert "sst-light-291_x4.safetensors (bundled)" in result.output


def test_models_info(offline_cache: Path) -> None:
    result = runner.invoke(app, ["models", "info", "SST-L+"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "21,311,427" in result.output and "SSTLarge_Plus_DFLIP_X4.pth" in result.output


def test_unknown_model_is_one_clear_line() -> None:
    result = runner.invoke(app, ["models", "info", "sst-huge"])
    assert result.exit_code == 2
    assert "unknown model 'sst-huge'" in result.output
    assert "Traceback" not in result.output


def test_pull_offline_and_not_cached_says_what_to_do(offline_cache: Path) -> None:
    result = runner.invoke(app, ["models", "pull", "sst-l", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "not in the Hugging Face cache" in text and "HF_HUB_OFFLINE" in text
    assert "Traceback" not in result.output


@needs_golden
def test_zoo_weights_load_from_the_cache_offline(offline_cache: Path) -> None:
    """A zoo name resolves through the manifest to hf_hub_download's cache layout and loads strictly."""
    data = (GOLDEN / "light_x2.pth").read_bytes()
    add_to_cache(offline_cache, "dslisleedh/SST", COMMIT, {"SSTlight_DFLIP_X2.pth": data}, ref="main")
    model = load_model("sst-light", 2)
    expected = torch.load(GOLDEN / "light_x2.pth", weights_only=True)["params_ema"]
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())
    assert model.config.window_sizes == (8, 16, 32, 16, 32, 64)
    result = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and COMMIT in result.output
    table = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert "cached" in table.output
