"""The CLI skeleton: help, version, the models commands, and the hub path end to end (offline)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from conftest import GOLDEN, add_to_cache, lock, needs_golden
from typer.testing import CliRunner

from sst_cli import __version__, load_model
from sst_cli.cli import app
from sst_cli.zoo import get_variant

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


def test_models_table_lists_every_variant(offline_cache: Path, x3_untrained: Path) -> None:
    result = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    for name in ("sst-light", "sst-light+", "sst-l+", "sst-xl+", "sst-light-291"):
        assert name in result.output
    lines = result.output.splitlines()
    assert any("21.31M" in line and "x4" in line for line in lines)  # sst-l x4
    ours = next(i for i, line in enumerate(lines) if "│ sst-light-291 " in line)
    assert "x3" in lines[ours + 1] and "not trained yet" in lines[ours + 1]
    for row in (lines[ours], lines[ours + 2]):  # x2 and x4
        assert "bundled: trained by sst-cli on 291 images" in row and "not the paper's" in row
    official = next(line for line in lines if "│ sst-light " in line)
    assert "not cached" in official and "not found yet" in official
    assert "the authors' Hub collection and models by file name, then their release" in " ".join(result.output.split())


def test_models_info_of_our_weights(offline_cache: Path, x3_untrained: Path) -> None:
    result = runner.invoke(app, ["models", "info", "sst-light-291"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "not the paper's weights" in result.output and "sst-light (identical)" in result.output
    assert "x3: 899,835 parameters; weights not trained yet (sst train --model sst-light --scale 3" in result.output
    assert "sst-light-291_x2.safetensors (bundled)" in result.output
    assert "sst-light-291_x4.safetensors (bundled)" in result.output
    digest = hashlib.sha256((Path(__file__).parents[1] / "weights" / "sst-light-291_x4.safetensors").read_bytes())
    assert digest.hexdigest() in result.output  # the bundled file's own digest, as the manifest checks it
    # sst train's record in the bundled files (it was in their metadata, and shown nowhere)
    trained = "      trained by sst-cli 0.1.0: 600 iterations after its init, 96 min on CPU (2 cores of an Intel Xeon)"
    assert trained in result.output
    assert "      data    train291 (T91 + BSD200, 291 images); 284 images used" in result.output
    assert "      init    sst-light-291_x4.safetensors" in result.output
    assert "      source  sst-cli CPU demo weights: the sst-light architecture trained by sst-cli" in result.output


def test_a_training_record_in_a_few_lines() -> None:
    from sst_cli.about import training_record

    record = training_record(
        {"trained_by": "sst-cli", "sst_cli_version": "0.2.0", "iterations": "300", "planned_iterations": "400",
         "seconds": "45000", "device": "NVIDIA H100", "data": "photos", "images": "12", "init": "", "batch": "16",
         "patch": "64", "lr": "0.0005", "sst_config": "{}"}
    )  # fmt: skip
    assert record == {
        "trained": "by sst-cli 0.2.0: 300 of 400 planned iterations, 12.5 h on NVIDIA H100",
        "data": "photos; 12 images used",
        "recipe": "batch 16, LR patch 64, lr 0.0005",
    }
    assert training_record({"sst_config": "{}"}) == {} and training_record({"source": "theirs"}) == {"source": "theirs"}


def test_models_info(offline_cache: Path) -> None:
    result = runner.invoke(app, ["models", "info", "SST-L+"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "21,311,427" in result.output and "SSTLarge_Plus_DFLIP_X4.pth (not found yet)" in result.output
    assert "not downloaded: `sst models pull sst-l+ --scale 4`" in result.output
    bad = runner.invoke(app, ["models", "info", "sst", "--scale", "8"])
    assert bad.exit_code == 2 and "sst exists at x2 / x3 / x4, not x8" in bad.output


def test_text_sent_to_a_pipe_is_not_wrapped() -> None:
    """Piped, `sst models info` wrapped at 80 columns: grep found half of the weights line."""
    result = runner.invoke(app, ["models", "info", "sst-light-291"], env={"COLUMNS": "40"})
    line = "  weights          trained by sst-cli on 291 images (T91 + BSD200), not the paper's weights"
    assert result.exit_code == 0 and line in result.output.splitlines(), result.output


def test_models_info_of_a_file_takes_model_and_refuses_scale(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    bare = tmp_path / "bare.pth"  # the bundled weights without the config sst-cli stores beside them
    torch.save(load_file(Path(__file__).parents[1] / "weights" / "sst-light-291_x4.safetensors"), bare)
    needs = runner.invoke(app, ["models", "info", str(bare)])
    assert needs.exit_code == 2
    assert "name the architecture with --model (it fits sst-light or sst-light+)" in " ".join(needs.output.split())
    named = runner.invoke(app, ["models", "info", str(bare), "--model", "sst-light"], env={"COLUMNS": "200"})
    assert named.exit_code == 0 and "architecture       SST" in named.output and "x4" in named.output
    said = next(line for line in named.output.splitlines() if line.startswith("  config "))
    assert json.loads(said.split(None, 1)[1]) == get_variant("sst-light").config(4).to_kwargs()  # for --config
    assert "trained" not in named.output  # the bare .pth has no record
    bundled = runner.invoke(
        app,
        ["models", "info", str(Path(__file__).parents[1] / "weights" / "sst-light-291_x4.safetensors")],
        env={"COLUMNS": "300"},
    )
    for line in (
        "variant            sst-light-291",
        "trained            by sst-cli 0.1.0: 400 iterations after its init, 62 min on CPU (2 cores of an Intel Xeon)",
        "data               train291 (T91 + BSD200, 291 images); 219 images used",
        "init               init-x4.safetensors",
        "recipe             batch 4, LR patch 64, lr 0.00025, warm-up 16, EMA 0.999, seed 1, fp32",
        "source             sst-cli CPU demo weights:",
    ):
        assert "  " + line in bundled.output, bundled.output
    scaled = runner.invoke(app, ["models", "info", str(bare), "--scale", "2"])
    assert scaled.exit_code == 2 and "--scale applies to zoo names" in scaled.output
    missing = runner.invoke(app, ["models", "info", str(tmp_path / "nope.pth")])
    assert missing.exit_code == 1 and "weights file not found" in missing.output
    config = tmp_path / "light.json"  # the message said "or pass --config", which models info did not have
    config.write_text(json.dumps(get_variant("sst-light").kwargs | {"upscaling_factor": 4}))
    built = runner.invoke(app, ["models", "info", str(bare), "--config", str(config)], env={"COLUMNS": "200"})
    assert built.exit_code == 0 and f"parameters         {get_variant('sst-light').params[4]:,}" in built.output
    zoo = runner.invoke(app, ["models", "info", "sst-light", "--config", str(config)])
    assert zoo.exit_code == 2 and "--config applies to a weights file" in zoo.output


def test_a_zoo_name_means_the_zoo_whatever_the_working_folder_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline_cache: Path
) -> None:
    from sst_cli.loader import ModelSpec

    monkeypatch.chdir(tmp_path)
    Path("sst-light-291").mkdir()  # e.g. an output folder named after the model
    Path("sst-light").write_bytes(b"not weights")
    result = runner.invoke(app, ["models", "info", "sst-light-291"], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and "sst-light-291_x4.safetensors (bundled)" in result.output, result.output
    assert ModelSpec().load("sst-light-291", 4, device=torch.device("cpu"), dtype=torch.float32).scale == 4
    local = runner.invoke(app, ["models", "info", "./sst-light"])  # the file of that name, written as a path
    assert local.exit_code == 1 and "sst-light: not a PyTorch checkpoint: the file is text" in local.output
    from PIL import Image

    Image.new("RGB", (8, 8)).save("x.png")
    as_weights = runner.invoke(app, ["upscale", "x.png", "--weights", "sst-light", "--model", "sst-light"])
    assert "sst-light: not a PyTorch checkpoint: the file is text" in as_weights.output  # --weights: a file
    for name, message in [("x" * 300 + ".pth", "file name too long"), ("hf://", "hf://")]:
        odd = runner.invoke(app, ["models", "info", name])
        assert odd.exit_code in (1, 2) and message in odd.output and "Traceback" not in odd.output, odd.output


def test_unknown_model_is_one_clear_line() -> None:
    result = runner.invoke(app, ["models", "info", "sst-huge"])
    assert result.exit_code == 2
    assert "unknown model 'sst-huge'" in result.output
    assert "Traceback" not in result.output


def test_pull_offline_and_not_cached_says_what_to_do(offline_cache: Path) -> None:
    result = runner.invoke(app, ["models", "pull", "sst-l", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "cannot be downloaded: HF_HUB_OFFLINE is set; unset it" in text and "run this command again" in text
    assert "sst models pull" not in text  # the command that is running is not suggested as the remedy
    assert "Traceback" not in result.output


@needs_golden
def test_zoo_weights_load_from_the_cache_offline(offline_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zoo name with a repository (here SST_HUB_REPO) resolves to hf_hub_download's cache layout, loads strictly."""
    data = (GOLDEN / "light_x2.pth").read_bytes()
    add_to_cache(offline_cache, "dslisleedh/SST", COMMIT, {"SSTlight_DFLIP_X2.pth": data}, ref="main")
    monkeypatch.setenv("SST_HUB_REPO", "dslisleedh/SST")
    model = load_model("sst-light", 2)
    expected = torch.load(GOLDEN / "light_x2.pth", weights_only=True)["params_ema"]
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())
    assert model.config.window_sizes == (8, 16, 32, 16, 32, 64)
    result = runner.invoke(app, ["models", "pull", "sst-light", "--scale", "2"], env={"COLUMNS": "300"})
    assert result.exit_code == 0 and COMMIT in result.output
    table = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert f"dslisleedh/SST@{COMMIT[:7]}" in table.output and "│ cached" in table.output


def test_compare_of_a_missing_picture_is_a_command_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["compare", "missing.png", "--png", "side.png"])
    assert result.exit_code == 2 and "cannot read 'missing.png': no such file or folder" in result.output


def test_a_system_refusal_no_check_foresaw_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sst compare`` of a folder the user may not list ended in a PermissionError traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shots").mkdir()
    lock(monkeypatch, "shots")
    result = runner.invoke(app, ["compare", "shots", "--png", "side.png"])
    assert result.exit_code == 1, result.output
    assert "error: cannot use 'shots': permission denied" in result.output and "Traceback" not in result.output


def test_a_damaged_bundled_file_is_shown_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline_cache: Path
) -> None:
    import shutil

    weights = tmp_path / "weights"
    shutil.copytree(Path(__file__).parents[1] / "weights", weights)
    data = bytearray((weights / "sst-light-291_x4.safetensors").read_bytes())
    data[-1] ^= 1
    (weights / "sst-light-291_x4.safetensors").write_bytes(bytes(data))
    monkeypatch.setenv("SST_WEIGHTS_DIR", str(weights))
    table = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert table.exit_code == 0 and "│ damaged" in table.output
    info = runner.invoke(app, ["models", "info", "sst-light-291", "-s", "4"], env={"COLUMNS": "300"})
    # the folder is the user's (SST_WEIGHTS_DIR): no reinstall mends it
    assert f"(changed or damaged): the folder is SST_WEIGHTS_DIR={weights}: put the file back" in info.output


def test_a_command_line_click_refuses_is_a_json_error_event_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--scale abc --json-log`` wrote nothing to stdout: Click refuses the value before the command's own error
    handling runs, and a program reading the log never learnt why the run stopped."""
    from sst_cli.cli import main, output

    monkeypatch.setattr(output, "_errors_said", [])
    monkeypatch.setattr("sys.argv", ["sst", "upscale", "a.png", "--scale", "abc", "--json-log"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {
        "event": "error",
        "message": "the command line was refused: its message is on standard error",
        "exit_code": 2,
    }


@pytest.mark.parametrize(
    "command", [["models", "pull", "sst-light"], ["models", "info", "sst-light"], ["upscale", "x.png"]]
)
@pytest.mark.parametrize("repo", ["notvalid", "a/b/c", "owner/na me"])
def test_a_hub_repo_that_is_no_repository_id_is_refused_before_any_look_up(command: list[str], repo: str) -> None:
    """`sst models pull sst-light --hub-repo a/b/c` answered in huggingface_hub's words, about an hf:// address
    the user never typed; `--hub-repo notvalid` went on to the network step."""
    result = runner.invoke(app, [*command, "--hub-repo", repo])
    assert result.exit_code == 2, result.output
    assert f"--hub-repo '{repo}' is not a Hugging Face repository: give it as OWNER/NAME" in result.output


def test_models_legend_explains_every_status() -> None:
    """Each word the weights column can show is in the legend printed under the table (``missing`` was not)."""
    import ast
    import inspect

    from sst_cli.cli import models

    tree = ast.parse(inspect.getsource(models.status))
    returns = [n.value for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None]
    shown = {c.value for r in returns for c in ast.walk(r) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert {"missing", "damaged", "changed", "manual", "cached", "not cached", "-"} <= shown
    assert all(f"{word} " in models.LEGEND or f"{word}:" in models.LEGEND for word in shown), shown


def test_models_info_aligns_long_setting_names() -> None:
    """SSTReal's ``sampling_ig_lambda`` ran into its value: the column is as wide as the longest name."""
    result = runner.invoke(app, ["models", "info", "sst-real"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  sampling_ig_lambda 2.0" in lines and "  dim                192" in lines
