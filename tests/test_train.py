"""``sst train`` and sst_cli.train on the CPU: a tiny network, tiny crops, a few dozen steps in all."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file
from typer.testing import CliRunner

from sst_cli import create_model, load_model
from sst_cli.archs.sst import SST, SSTConfig
from sst_cli.archs.sst.layers import TransformerLayer
from sst_cli.checkpoint import read_metadata, read_weights
from sst_cli.cli import app
from sst_cli.errors import CheckpointError, ConfigError, OutputExists, TrainingDiverged, WeightsNotFound
from sst_cli.recipe import MILESTONES
from sst_cli.train import (
    LR_GAMMA,
    TrainConfig,
    TrainingInterrupted,
    TrainProgress,
    init_from,
    learning_rate,
    state_path,
    train,
)
from sst_cli.trainset import benchmark_in_path, find_images, load_images

TINY = SSTConfig(
    dim=8, window_sizes=(4,), num_heads=(2,), n_blocks=1, exp_ratio=1.5, upscaling_factor=2,
    upsampler_type="pixelshuffle_direct", ranks=(2,), rib_hidden_dim=8, rib_n_freqs=2,
)  # fmt: skip
runner = CliRunner()


def _write_images(folder: Path, count: int = 4, size: int = 40) -> Path:
    """Smooth colour gradients with a few hard-edged squares: structure a network can learn quickly."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(count):
        img = np.stack([xx * (0.3 + 0.1 * i), yy * 0.6, 0.5 * (xx + yy) / 2], axis=-1) + 0.2
        for _ in range(3):
            top, left, side = *rng.integers(0, size - 8, 2), int(rng.integers(4, 10))
            img[top : top + side, left : left + side] = rng.uniform(0, 1, 3)
        Image.fromarray((np.clip(img, 0, 1) * 255).round().astype(np.uint8)).save(folder / f"img{i}.png")
    return folder


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_images(tmp_path_factory.mktemp("train") / "images")


def _config(data: Path, out: Path, **kw: object) -> TrainConfig:
    base = TrainConfig(data=(data,), out=out, iters=6, model=TINY, patch=8, batch=2, device="cpu", report_every=1)
    return replace(base, **kw)


def test_loss_goes_down_and_weights_load_with_metadata(data: Path, tmp_path: Path) -> None:
    seen: list[TrainProgress] = []
    result = train(_config(data, tmp_path / "tiny_x2.safetensors", iters=30, batch=4), on_progress=seen.append)
    assert result.finished and result.iteration == 30 and result.stopped_by == "done" and result.images == 4
    assert len(result.losses) == 30 and [p.iteration for p in seen] == list(range(1, 31))
    first, last = np.mean(result.losses[:5]), np.mean(result.losses[-5:])
    assert last < 0.7 * first, (first, last)

    model = load_model(result.out)  # the architecture comes from the file's sst_config metadata
    assert model.config == TINY and not model.training
    with safe_open(str(result.out), framework="pt") as f:
        meta = f.metadata()
    assert meta["trained_by"] == "sst-cli" and meta["iterations"] == "30" and meta["batch"] == "4"
    assert meta["patch"] == "8" and meta["data"] == str(data) and meta["seconds"].isdigit()
    assert json.loads(meta["sst_config"]) == TINY.to_kwargs() and meta["weights"] == "params_ema"
    state = torch.load(state_path(result.out), weights_only=True)  # the authors' layout, loadable as weights
    assert set(state) >= {"params", "params_ema", "optimizer", "iteration", "rng", "settings", "scheduler"}
    assert state["iteration"] == 30
    weights, _ = read_weights(state_path(result.out))  # params_ema wins, as in the official loader
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_interrupted_then_resumed_equals_one_straight_run(data: Path, tmp_path: Path, precision: str) -> None:
    straight = train(_config(data, tmp_path / "a.safetensors", precision=precision))

    def ctrl_c_at_3(p: TrainProgress) -> None:
        if p.iteration == 3:
            os.kill(os.getpid(), signal.SIGINT)

    split = _config(data, tmp_path / "b.safetensors", precision=precision)
    with pytest.raises(TrainingInterrupted) as stop:
        train(split, on_progress=ctrl_c_at_3)
    assert stop.value.result.iteration == 3 and stop.value.result.out is None
    assert not split.out.exists() and state_path(split.out).is_file()
    resumed = train(replace(split, resume=True))
    assert resumed.iteration == 6 and resumed.losses == straight.losses[3:]
    a, b = (torch.load(state_path(r.out), weights_only=True) for r in (straight, resumed))
    for key in ("params", "params_ema"):
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key]), key
    ema_a, _ = read_weights(straight.out)
    ema_b, _ = read_weights(resumed.out)
    assert all(torch.equal(ema_a[k], ema_b[k]) for k in ema_a)


def test_a_run_started_over_and_interrupted_resumes_over_the_weights_it_was_to_replace(
    data: Path, tmp_path: Path
) -> None:
    """After ``--overwrite`` and Ctrl-C, the hint's ``--resume`` met the old run's --out: "exists and was not written
    by the run", and ``--overwrite --resume`` exclude each other, so the run could not go on."""
    old = train(_config(data, tmp_path / "w.safetensors", iters=2))
    again = _config(data, old.out, overwrite=True)

    def ctrl_c_at_3(p: TrainProgress) -> None:
        if p.iteration == 3:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted):
        train(again, on_progress=ctrl_c_at_3)
    resumed = train(replace(again, overwrite=False, resume=True))
    assert resumed.iteration == 6 and read_metadata(old.out)["iterations"] == "6"
    assert str(tmp_path) not in read_metadata(old.out)["training_settings"]  # the path it replaced stays local
    elsewhere = train(_config(data, tmp_path / "other.safetensors", iters=2))
    with pytest.raises(OutputExists, match="was not written by the run"):  # only the file it was asked to replace
        train(replace(again, out=elsewhere.out, state=state_path(old.out), overwrite=False, resume=True, iters=8))


def test_a_batch_that_cannot_fit_in_ram_is_refused_before_training(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU nothing raises out of memory: ``--batch 100000`` was killed by the kernel, exit 137, no word."""
    import sst_cli.train as engine

    config = _config(data, tmp_path / "big.safetensors", batch=4)
    monkeypatch.setattr(engine, "available_ram", lambda: 1000)
    refused = r"^training with batch=4 and patch=8 needs about \d+\.\d GiB of memory on the CPU, and 0\.0 GiB are"
    with pytest.raises(ConfigError, match=refused + " available: lower them$"):
        train(config)
    assert not config.out.exists() and not state_path(config.out).exists()
    monkeypatch.setattr(engine, "available_ram", lambda: 2**30)
    assert train(config).iteration == 6


def test_a_diverging_run_stops_before_saving_anything(data: Path, tmp_path: Path) -> None:
    """--lr 5 in bf16 ended 'training L1 nan' with NaN weights saved and exit 0; then it was a usage error (exit 2)
    though no option was invalid: now a failed run, exit 1."""
    config = _config(data, tmp_path / "nan.safetensors", lr=1e30, checkpoint_iters=2)
    with pytest.raises(TrainingDiverged, match=r"training diverged by iteration \d+: the loss became -?(nan|inf) "):
        train(config)
    assert not config.out.exists() and not isinstance(TrainingDiverged("x"), ConfigError)
    state = torch.load(state_path(config.out), weights_only=True) if state_path(config.out).exists() else None
    assert state is None or all(torch.isfinite(v).all() for v in state["params"].values())
    failed = runner.invoke(app, ["train", "--data", str(data), "--iters", "2", "--out", str(tmp_path / "n.pth"),
                                 "--patch", "8", "--batch", "1", "--lr", "1e30", "--device", "cpu"])  # fmt: skip
    assert failed.exit_code == 1 and "error: training diverged" in failed.output


def test_running_out_of_memory_is_one_sentence(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sst_cli.train as training

    def no_memory(self: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(training._TrainingRun, "step", no_memory)
    with pytest.raises(ConfigError, match=r"out of memory at iteration 1 with batch=2 and patch=8 on cpu: lower"):
        train(_config(data, tmp_path / "oom.safetensors"))  # an API caller typed no --batch (it said so)
    args = ["train", "--data", str(data), "--iters", "2", "--out", str(tmp_path / "cli.safetensors")]
    result = runner.invoke(app, [*args, "--patch", "8", "--batch", "2", "--device", "cpu"])
    assert "out of memory at iteration 1 with --batch 2 and --patch 8 on cpu: lower" in " ".join(result.output.split())


def test_out_state_and_init_are_three_files_and_the_state_a_pth(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.pth"
    for kw, message in [
        ({"state": out}, "^out and state name the same file"),  # the keywords, not --out and --state
        ({"init": out}, "^out and init name the same file"),
        ({"state": data / "im0.png"}, r"^state .*im0\.png: name it \.pth"),
        ({"lr": float("inf")}, "^lr inf: must be a finite number above 0$"),  # the keyword, not --lr
        ({"seed": -1}, r"^seed must be between 0 and 2\*\*32 - 1"),  # numpy's traceback, after reading the data
        ({"state": data}, "^state .*: a folder; name the file to write"),
        ({"resume": True, "init": data / "a.png"}, "^resume continues the saved run, which began already: drop init$"),
        ({"resume": True, "overwrite": True}, "^resume and overwrite exclude each other"),
    ]:
        with pytest.raises(ConfigError, match=message):
            train(_config(data, out, **kw))


def test_precision_in_any_letter_case_is_taken(data: Path, tmp_path: Path) -> None:
    """``sst upscale --precision FP32`` is taken; ``sst train`` refused it."""
    config = _config(data, tmp_path / "w.pth", precision="BF16")
    config.check()
    assert config.precision == "bf16"


def test_compile_help_says_it_takes_no_value() -> None:
    """``--compile`` is auto|on|off in upscale and a mode in bench: train's help says its own is a bare flag."""
    helped = " ".join(runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "--compile A flag (no value), unlike upscale's --compile auto|on|off" in helped


@pytest.mark.parametrize("value", ["-1", "0", "0.5", "inf"])
def test_log_every_below_one_second_is_refused(data: Path, tmp_path: Path, value: str) -> None:
    """``--log-every -1`` was taken, unlike the other numbers of ``sst train``; ``inf`` too."""
    args = ["train", "--data", str(data), "--iters", "2", "--out", str(tmp_path / "n.pth"), "--log-every", value]
    result = runner.invoke(app, args)
    said = f"--log-every {float(value):g}: must be a finite number of seconds, 1 or more"
    assert result.exit_code == 2 and said in result.output, result.output
    assert not (tmp_path / "n.pth").exists()


def test_a_missing_init_or_resume_file_exits_1_as_a_missing_weights_file(data: Path, tmp_path: Path) -> None:
    """``--init`` / ``--resume`` naming no file exited 2 (invalid options), upscale's missing --weights 1."""
    with pytest.raises(WeightsNotFound, match=r"^init .*nowhere\.pth: no such weights file"):
        train(_config(data, tmp_path / "w.pth", init=tmp_path / "nowhere.pth"))
    base = ["train", "--data", str(data), "--iters", "2", "--out", str(tmp_path / "n.pth"), "--device", "cpu"]
    init = runner.invoke(app, [*base, "--init", str(tmp_path / "nowhere.pth")])
    assert init.exit_code == 1 and "no such weights file" in init.output, init.output
    resume = runner.invoke(app, [*base, "--resume", str(tmp_path / "nowhere.state.pth")])
    assert resume.exit_code == 1 and "there is no training state" in " ".join(resume.output.split()), resume.output


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="Windows has no SIGHUP")
def test_a_hang_up_saves_the_state_as_ctrl_c_does(data: Path, tmp_path: Path) -> None:
    """An SSH session closing sends SIGHUP: it lost everything since the last checkpoint."""

    def hang_up_at_2(p: TrainProgress) -> None:
        if p.iteration == 2:
            os.kill(os.getpid(), signal.SIGHUP)

    config = _config(data, tmp_path / "h.safetensors")
    with pytest.raises(TrainingInterrupted) as stop:
        train(config, on_progress=hang_up_at_2)
    assert stop.value.result.iteration == 2 and state_path(config.out).is_file()
    assert stop.value.exit_code == 129  # as a shell reports SIGHUP, and as upscale exits


def test_a_signal_during_the_final_write_lets_it_finish(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the finished run wrote its weights aborted the write and said "interrupted while training,
    before the state could be saved", though the state of the last iteration was saved: now the write finishes."""
    import sst_cli.train as engine

    write = engine._TrainingRun.save_weights

    def ctrl_c_then_write(run: object, *args: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        write(run, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(engine._TrainingRun, "save_weights", ctrl_c_then_write)
    result = train(_config(data, tmp_path / "f.safetensors", iters=2))
    assert result.finished and result.out is not None and result.out.is_file() and state_path(result.out).is_file()


def test_a_folder_given_to_resume_is_called_resume(data: Path, tmp_path: Path) -> None:
    """``--resume .`` said "--state .: a folder", an option the user had not typed."""
    args = ["train", "--data", str(data), "--iters", "2", "--out", str(tmp_path / "r.pth"), "--device", "cpu"]
    resumed = runner.invoke(app, [*args, "--resume", str(tmp_path)])
    assert resumed.exit_code == 2 and f"--resume {tmp_path}: a folder" in " ".join(resumed.output.split())
    state = runner.invoke(app, [*args, "--state", str(tmp_path)])
    assert state.exit_code == 2 and f"--state {tmp_path}: a folder" in " ".join(state.output.split())


def test_exit_codes_say_which_signal_stopped_the_run_and_whether_the_state_was_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM exited 130 (upscale: 143), and Ctrl-C while loading said 'state saved' in the help though none was."""
    import sst_cli.train as engine

    result = engine.TrainResult(None, tmp_path / "s.state.pth", 3, 6, 1.0, [], False, "interrupted", 4)
    stops: list[BaseException] = [engine.TrainingInterrupted(result, signal.SIGTERM), KeyboardInterrupt()]

    def stopped(*_args: object, **_kwargs: object) -> None:
        raise stops.pop(0)

    monkeypatch.setattr(engine, "train", stopped)
    data = _write_images(tmp_path / "d", count=1)
    args = ["train", "--data", str(data), "--iters", "6", "--out", str(tmp_path / "s.safetensors")]
    stopped = runner.invoke(app, [*args, "--overwrite"])
    term = " ".join(stopped.output.split())
    assert stopped.exit_code == 143 and "error: stopped by signal 15 at iteration 3 of 6; training state saved" in term
    assert "to continue, run the same command without --overwrite, plus --resume" in term  # they exclude each other
    early = runner.invoke(app, args)
    assert early.exit_code == 130 and "error: interrupted before training began: nothing was written" in early.output
    helped = " ".join(runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "1 a file could not be read or written" in helped and "143 by SIGTERM" in helped
    assert "130 interrupted (state saved)" not in helped


def test_existing_run_needs_resume_or_overwrite_and_resume_needs_the_same_network(data: Path, tmp_path: Path) -> None:
    config = _config(data, tmp_path / "run.pth", iters=1)
    result = train(config)
    saved = torch.load(result.out, weights_only=True)
    assert set(saved) == {"params_ema", "params", "meta"}  # .pth: the authors' layout
    assert read_metadata(result.out)["run"] == saved["meta"]["run"]  # read with the tensors mapped, not loaded
    with pytest.raises(OutputExists, match=r"pass resume=True to continue that run, or overwrite=True to start"):
        train(config)  # the keywords an API caller gives, not --resume / --overwrite
    with pytest.raises(OutputExists, match=r"pass --resume to continue that run, or --overwrite to start over"):
        train(config, cli=True)
    with pytest.raises(ConfigError, match=r"^resume: .* is a x2 run and this one is x3; start the new scale with init"):
        train(replace(config, resume=True, scale=3))
    with pytest.raises(WeightsNotFound, match="no training state"):
        train(replace(config, out=tmp_path / "other.pth", resume=True))
    assert train(replace(config, overwrite=True)).iteration == 1
    model = load_model(result.out)  # a .pth keeps the architecture too: it loads without --model
    assert model.config == TINY


def test_resume_never_replaces_weights_another_run_wrote(data: Path, tmp_path: Path) -> None:
    """``--out precious --resume STATE`` replaced a file that the run in STATE had never written."""
    first = train(_config(data, tmp_path / "first.safetensors", iters=2))
    precious = tmp_path / "precious.safetensors"
    precious.write_bytes(train(_config(data, tmp_path / "other.safetensors", iters=1, seed=3)).out.read_bytes())
    before = precious.read_bytes()
    resumed = _config(data, precious, iters=3, resume=True, state=state_path(first.out))
    refused = r"precious\.safetensors exists and was not written by the run in .*first.*give that run's --out"
    with pytest.raises(OutputExists, match=refused):
        train(resumed)
    assert precious.read_bytes() == before
    assert train(replace(resumed, out=first.out)).iteration == 3  # its own weights are replaced as it goes on


def test_a_damaged_out_of_the_same_run_is_said_to_be_damaged(data: Path, tmp_path: Path) -> None:
    """A truncated --out of the run being resumed was said to be written by another run."""
    config = _config(data, tmp_path / "w.safetensors", iters=2)
    train(config)
    config.out.write_bytes(config.out.read_bytes()[:50])
    with pytest.raises(OutputExists) as refused:
        train(replace(config, iters=4, resume=True))
    message = str(refused.value)
    assert message.startswith(f"--out {config.out}: not a readable safetensors file (truncated or corrupt?)")
    assert "wrote it, delete it and --resume writes it again" in message and "not written by" not in message
    config.out.unlink()
    assert train(replace(config, iters=4, resume=True)).iteration == 4


def test_time_limit_stops_cleanly_and_saves(data: Path, tmp_path: Path) -> None:
    result = train(_config(data, tmp_path / "t.safetensors", iters=1000, time_limit=1e-9))
    assert result.stopped_by == "time limit" and not result.finished and result.iteration == 0
    assert result.out.is_file() and result.state.is_file()


def test_init_from_x2_loads_everything_but_resizes_the_upsampler(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x2 = create_model("sst-light", 2)
    save_file(x2.state_dict(), str(tmp_path / "x2.safetensors"))
    x3 = create_model("sst-light", 3)
    report = init_from(x3, tmp_path / "x2.safetensors")
    up = ["upsampler.up_conv.weight", "upsampler.up_conv.bias"]
    assert report.resized == up and report.reinitialised == [] and report.unused == []
    assert len(report.loaded) == len(x3.state_dict()) - 2
    new, old = x3.state_dict(), x2.state_dict()
    assert all(torch.equal(new[k], old[k]) for k in report.loaded)
    # Sub-pixel (i, j) of x3 takes the x2 sub-pixel whose centre is nearest: colour 1, (2, 0) <- (1, 0).
    assert torch.equal(new[up[0]][1 * 9 + 2 * 3 + 0], old[up[0]][1 * 4 + 1 * 2 + 0])
    assert report.summary().startswith(f"init from {tmp_path / 'x2.safetensors'}: 676 tensors loaded; resized")

    with pytest.raises(CheckpointError, match="only 0 of the network's"):
        tiny = SST(**TINY.to_kwargs())
        save_file(tiny.state_dict(), str(tmp_path / "tiny.safetensors"))
        init_from(create_model("sst-light", 3), tmp_path / "tiny.safetensors")
    (tmp_path / "notes.pth").write_text("hi\n")
    with pytest.raises(CheckpointError, match=r"^init: .*notes\.pth: not a PyTorch checkpoint: the file is text"):
        init_from(create_model("sst-light", 3), tmp_path / "notes.pth")


@pytest.mark.parametrize("name", ["Set5", "set14", "B100", "BSD100", "Urban100", "manga109", "DIV2K_valid_HR"])
def test_benchmark_test_sets_are_refused(tmp_path: Path, name: str) -> None:
    folder = _write_images(tmp_path / "datasets" / name / "HR", count=1)
    with pytest.raises(ConfigError, match=f"'{name}' is a benchmark test set"):
        find_images([folder])
    with pytest.raises(ConfigError, match=f"contains the benchmark test set.*{name}"):
        find_images([tmp_path / "datasets"])  # a parent folder would pull the test set in


def test_linked_folders_are_followed_once_and_links_into_test_sets_refused(tmp_path: Path) -> None:
    """A linked folder was skipped without a word, a folder given twice trained twice, and a link to a Set5
    image trained on it."""
    real = _write_images(tmp_path / "photos", count=2, size=20)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "photos").symlink_to(real, target_is_directory=True)
    (tmp_path / "mine" / "photos" / "loop").symlink_to(tmp_path / "mine", target_is_directory=True)
    files = find_images([tmp_path / "mine", tmp_path / "mine", real])
    assert len(files) == 2 and all(f.is_file() for f in files)
    test_set = _write_images(tmp_path / "datasets" / "Set5" / "HR", count=1)
    (tmp_path / "mine" / "baby.png").symlink_to(next(test_set.iterdir()))
    with pytest.raises(ConfigError, match=r"baby\.png is a link into the benchmark test set 'Set5'"):
        find_images([tmp_path / "mine"])


def test_training_folders_images_and_their_sizes(tmp_path: Path) -> None:
    assert benchmark_in_path("/data/datasets/train291/t91") is None and benchmark_in_path("x/SET5/HR") == "SET5"
    good = _write_images(tmp_path / "train291" / "t91", count=2, size=20)
    _write_images(tmp_path / "train291" / "bsd200", count=1, size=40)
    files = find_images([tmp_path / "train291"])
    assert [f.parent.name for f in files] == ["bsd200", "t91", "t91"]
    notes: list[str] = []
    images = load_images(files, 24, notes.append)
    assert len(images) == 1 and images[0].dtype == np.uint8 and images[0].shape == (40, 40, 3)
    assert notes == ["skipped 2 image(s) smaller than the 24x24 HR patch: img0.png, img1.png"]
    with pytest.raises(ConfigError, match="no training image is at least 48x48"):
        load_images(files, 48)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="empty: no images"):
        find_images([tmp_path / "empty"])
    with pytest.raises(ConfigError, match="is not a folder"):
        find_images([good / "img0.png"])


def test_a_bad_init_and_a_patch_larger_than_every_image_are_refused_before_any_image_is_decoded(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both were found only after every image was decoded (minutes for a large --data)."""
    import sst_cli.trainset as trainset

    decoded: list[Path] = []
    monkeypatch.setattr(trainset, "read_image", lambda path, **kw: decoded.append(path))
    (tmp_path / "bad.safetensors").write_bytes(b"not weights")
    with pytest.raises(CheckpointError, match=r"^init: "):
        train(_config(data, tmp_path / "w.safetensors", init=tmp_path / "bad.safetensors"))
    with pytest.raises(CheckpointError, match=r"^--init: "):
        train(_config(data, tmp_path / "w.safetensors", init=tmp_path / "bad.safetensors"), cli=True)
    with pytest.raises(ConfigError, match=r"no training image is at least 80x80 pixels .*: give a smaller patch$"):
        train(_config(data, tmp_path / "w.safetensors", patch=40))
    assert decoded == []


def test_learning_rate_schedule() -> None:
    base, iters, warmup = 5e-4, 1000, 40
    assert learning_rate(0, iters, base, warmup) == pytest.approx(base / warmup)
    assert learning_rate(39, iters, base, warmup) == pytest.approx(base)
    assert learning_rate(499, iters, base, warmup) == pytest.approx(base)
    for halvings, fraction in enumerate(MILESTONES, start=1):
        assert learning_rate(round(fraction * iters), iters, base, warmup) == pytest.approx(base * LR_GAMMA**halvings)
    assert learning_rate(999, iters, base, 0) == pytest.approx(base * LR_GAMMA ** len(MILESTONES))
    # --iters 1 was halved from step 0 ("halved at 0, 1, 1, 1, 1"): the milestones never come before step 1
    assert learning_rate(0, 1, base, 0) == base and learning_rate(1, 1, base, 0) == base * LR_GAMMA**5
    assert [round(m * 500_000) for m in MILESTONES] == [250_000, 400_000, 450_000, 475_000, 490_000]
    assert all(learning_rate(i, 500_000, base, 20_000) == learning_rate_before(i, 500_000, base, 20_000)
               for i in (0, 19_999, 249_999, 250_000, 399_999, 400_000, 489_999, 490_000, 499_999))  # fmt: skip
    for iters in range(2, 60):  # the recipe as it was for every run longer than one step
        assert all(learning_rate(i, iters, base, 3) == learning_rate_before(i, iters, base, 3) for i in range(iters))


def learning_rate_before(iteration: int, iters: int, base: float, warmup: int) -> float:
    """The schedule before milestones were kept from step 0, for the comparison above."""
    halvings = sum(iteration >= round(m * iters) for m in MILESTONES)
    ramp = min(1.0, (iteration + 1) / warmup) if warmup > 0 else 1.0
    return base * ramp * LR_GAMMA**halvings


def test_the_help_says_what_the_defaults_and_files_are() -> None:
    """--scale said "(default 4)" also with --config, the test sets left DIV2K valid out, and .pt was not named."""
    helped = " ".join(runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "(default 4, or --config's upscaling_factor)" in helped
    assert "Manga109, DIV2K valid) are refused" in helped and "or .pth / .pt" in helped
    with pytest.raises(ConfigError, match=r"name it .safetensors \(recommended\), .pth or .pt$"):
        TrainConfig(data=("d",), out=Path("w.bin"), iters=1).check()


def test_a_scale_refused_names_the_option() -> None:
    """--config tiny.json -s 5 said 'scale must be one of 2, 3, 4, got 5', naming no option."""
    with pytest.raises(ConfigError, match=r"^--scale must be one of 2, 3, 4, got 5$"):
        TrainConfig(data=("d",), out=Path("w.safetensors"), iters=1, model=TINY, scale=5).check(cli=True)


@pytest.mark.parametrize(
    ("given", "api", "cli"),
    [
        ({"data": ()}, "give at least one data folder", "give at least one --data folder"),
        ({"out": Path("w.bin")}, "out w.bin: name it", "--out w.bin: name it"),
        ({"out": Path("w.pth"), "state": Path("w.pth")}, "out and state name the same", "--out and --state name the"),
        ({"init": Path("w.safetensors")}, "out and init name the same file", "--out and --init name the same"),
        ({"init": Path("nowhere.pth")}, "init nowhere.pth: no such weights file", "--init nowhere.pth: no such"),
        ({"state": Path("s.png")}, "state s.png: name it .pth", "--state s.png: name it .pth"),
        (
            {"resume": True, "state": Path("s.png")},
            "state s.png: a training state is a .pth that train wrote beside out (weights to start from go to init)",
            "--resume s.png: a training state is a .pth that sst train wrote beside --out (weights to start from go",
        ),
        ({"resume": True, "init": Path("i.pth")}, "resume continues the saved run", "--resume continues the saved"),
        ({"resume": True, "overwrite": True}, "resume and overwrite exclude", "--resume and --overwrite exclude"),
    ],
)
def test_the_api_names_its_path_keywords(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: dict, api: str,
                                        cli: str) -> None:  # fmt: skip
    """``TrainConfig.check()`` said --out, --state, --init, --resume and --data to an API caller who gave
    ``out=``, ``state=``, ``init=``, ``resume=`` and ``data=``; ``check(cli=True)`` names the options."""
    config = TrainConfig(**({"data": ("d",), "out": Path("w.safetensors"), "iters": 1} | given))
    monkeypatch.chdir(tmp_path)  # no file of these names is there
    for wanted, as_cli in ((api, False), (cli, True)):
        with pytest.raises((ConfigError, WeightsNotFound)) as refused:
            config.check(cli=as_cli)
        assert str(refused.value).startswith(wanted), str(refused.value)


@pytest.mark.parametrize("folder", ["tiny/HR", Path("/data/train")])
def test_one_data_folder_is_one_folder_not_its_letters(folder: str | Path) -> None:
    """data='tiny/HR' was read as the folders 't', 'i', ...; data='/work/x' as '/' first, walked whole."""
    assert TrainConfig(data=folder, out=Path("w.safetensors"), iters=1).data == (Path(folder),)  # type: ignore[arg-type]
    assert TrainConfig(data=[folder, "b"], out=Path("w.safetensors"), iters=1).data == (Path(folder), Path("b"))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"iters": "3"}, "iters must be a whole number, got '3'"),  # a bare TypeError from the comparisons
        ({"iters": 3.5}, "iters must be a whole number, got 3.5"),  # trained 4 iterations
        ({"patch": 8.0}, "patch must be a whole number, got 8.0"),  # an IndexError in torch, after decoding
        ({"batch": True}, "batch must be a whole number, got True"),  # a TypeError in torch.randint
        ({"scale": "2"}, "scale must be a whole number, got '2'"),  # "must be one of 2, 3, 4, got 2"
    ],
)
def test_whole_number_settings_are_integers(given: dict, message: str) -> None:
    config = TrainConfig(**({"data": ("d",), "out": Path("w.safetensors"), "iters": 1} | given))
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        config.check()


def test_iters_are_bounded() -> None:
    """--iters 99999999999999999999999 was accepted (lr 1.25e-25 by the end, an ETA of 3.2e21 minutes)."""
    with pytest.raises(ConfigError, match=r"^iters must be at most 1,000,000,000 \(the paper trains 500,000\)"):
        TrainConfig(data=("d",), out=Path("w.safetensors"), iters=99999999999999999999999).check()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"lr": float("inf")}, "lr inf: must be a finite number above 0"),  # was '--lr must be positive, got inf'
        ({"lr": float("nan")}, "lr nan: must be a finite number above 0"),
        ({"lr": -1e-4}, "lr -0.0001: must be a finite number above 0"),
        ({"lr": "5e-4"}, "lr must be a number, got '5e-4'"),  # a TypeError from math.isfinite
        ({"ema_decay": float("nan")}, "ema_decay nan: must be a number from 0 up to (not including) 1"),
        ({"ema_decay": 1.0}, "ema_decay 1: must be a number from 0 up to (not including) 1"),
        ({"checkpoint_every": float("inf")}, "checkpoint_every inf: must be a finite number of seconds, 0 or more"),
        ({"checkpoint_every": -1.0}, "checkpoint_every -1: must be a finite number of seconds, 0 or more"),
        ({"time_limit": float("inf")}, "time_limit inf: must be a finite number of seconds above 0"),  # was taken
        ({"time_limit": float("nan")}, "time_limit nan: must be a finite number of seconds above 0"),
        ({"time_limit": 0.0}, "time_limit 0: must be a finite number of seconds above 0"),
        ({"iters": 0}, "iters must be at least 1, got 0"),
        ({"batch": 0}, "batch must be at least 1, got 0"),
        ({"patch": 0}, "patch must be at least 1 LR pixel, got 0"),
        ({"warmup": -1}, "warmup must be >= 0 iterations, got -1"),
        ({"checkpoint_iters": -1}, "checkpoint_iters must be >= 0 steps, got -1"),
        ({"report_every": 0}, "report_every must be at least 1 step, got 0"),
    ],
)
def test_the_api_refuses_numbers_by_their_keywords(given: dict, message: str) -> None:
    """TrainConfig names its keywords (``lr``), ``sst train`` its options (``--lr``): one rule each."""
    config = TrainConfig(**({"data": ("d",), "out": Path("w.safetensors"), "iters": 1} | given))
    with pytest.raises(ConfigError) as api:
        config.check()
    assert str(api.value) == message
    with pytest.raises(ConfigError) as cli:
        config.check(cli=True)
    option = next(iter(given))
    assert str(cli.value) == message.replace(option, "--" + option.replace("_", "-"), 1)


def test_cli_trains_end_to_end_and_reports_bad_data_in_one_line(data: Path, tmp_path: Path) -> None:
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.to_kwargs()))
    out = tmp_path / "cli_x2.safetensors"
    args = ["train", "--config", str(config), "--data", str(data), "--iters", "3", "--out", str(out)]
    result = runner.invoke(app, [*args, "--patch", "8", "--batch", "2", "--device", "cpu", "--half"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "training custom x2 on 4 images" in text and "done: 3 iterations" in text
    with safe_open(str(out), framework="pt") as f:
        assert all(f.get_tensor(k).dtype == torch.float16 for k in f.keys())  # noqa: SIM118
    assert load_model(out).config == TINY

    testset = _write_images(tmp_path / "Set14", count=1)
    bad = runner.invoke(app, ["train", "--data", str(testset), "--iters", "3", "--out", str(tmp_path / "x.pth")])
    assert bad.exit_code == 2
    lines = [line for line in bad.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "benchmark test set" in lines[0]
    missing = runner.invoke(app, [*args[:3], "--data", str(tmp_path / "nowhere"), "--iters", "3", "--out", "y.pth"])
    assert missing.exit_code == 2 and "is not a folder" in missing.output
    config.write_text(json.dumps({**TINY.to_kwargs(), "num_heads": 0}))
    zero = runner.invoke(app, [*args, "--device", "cpu"])  # it said neither the file nor, at first, the key
    assert zero.exit_code == 2 and f"error: config {config}: num_heads must be positive" in " ".join(
        zero.output.split()
    )


def test_bf16_autocast_trains_with_float32_master_weights(data: Path, tmp_path: Path) -> None:
    kw = {"iters": 30, "batch": 4}
    bf16 = train(_config(data, tmp_path / "bf16.safetensors", precision="bf16", **kw))
    fp32 = train(_config(data, tmp_path / "fp32.safetensors", precision="fp32", **kw))
    first, last = np.mean(bf16.losses[:5]), np.mean(bf16.losses[-5:])
    assert last < 0.7 * first, (first, last)
    assert bf16.losses != fp32.losses  # autocast did run the network in bfloat16
    state = torch.load(bf16.state, weights_only=True)
    assert state["settings"]["precision"] == "bf16 autocast"
    assert all(v.dtype == torch.float32 for v in state["params"].values())  # the master copy stays fp32
    moments = [s["exp_avg"] for s in state["optimizer"]["state"].values()]
    assert moments and all(m.dtype == torch.float32 for m in moments)
    with pytest.raises(ConfigError, match="precision must be one of auto, bf16, fp32"):
        train(_config(data, tmp_path / "x.safetensors", precision="fp16"))


# What makes the host wait for a GPU: reading a tensor's value on the host, or an explicit synchronize.
HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")


def _count_host_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(
            self: torch.Tensor, *args: object, _name: str = name, _f: object = original, **kw: object
        ) -> object:
            calls.append(_name)
            return _f(self, *args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(torch.Tensor, name, counted)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append("synchronize"))
    return calls


OLD_TORCH = tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 4)


@pytest.mark.skipif(OLD_TORCH, reason="torch < 2.4 has no fused AdamW on the CPU; its per-tensor path reads steps")
def test_the_loop_reads_the_loss_once_per_report_and_never_inside_a_step(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sst_cli.train as engine

    calls = _count_host_reads(monkeypatch)
    in_step: list[str] = []
    step = engine._TrainingRun.step

    def watched(self: engine._TrainingRun) -> torch.Tensor:
        before = len(calls)
        loss = step(self)
        in_step.extend(calls[before:])
        return loss

    monkeypatch.setattr(engine._TrainingRun, "step", watched)
    train(_config(data, tmp_path / "warm.safetensors", iters=1))  # once per process: attention kernel plans
    in_step.clear()
    counts, reports = [], []
    for iters in (8, 16):
        calls.clear()
        seen: list[TrainProgress] = []
        kw = {"iters": iters, "report_every": 4, "checkpoint_every": 1e9}
        result = train(_config(data, tmp_path / f"s{iters}.safetensors", **kw), on_progress=seen.append)
        counts.append(len(calls))
        reports.append([p.iteration for p in seen])
        assert len(result.losses) == iters  # every step's loss is still kept, read in batches
    assert in_step == []  # a step (sampling, forward, backward, AdamW, EMA) never reads a value on the host
    assert reports == [[1, 4, 8], [1, 4, 8, 12, 16]]
    assert counts[1] - counts[0] == 2  # 8 more steps cost 2 more reads: one per report, not one per step


def test_checkpoint_every_n_steps_then_resume_that_state_from_the_cli(data: Path, tmp_path: Path) -> None:
    straight = train(_config(data, tmp_path / "a.safetensors"))
    copy = tmp_path / "at3.state.pth"

    def keep_the_checkpoint(text: str) -> None:
        if text.startswith("checkpoint: iteration 3,"):
            copy.write_bytes(state_path(tmp_path / "b.safetensors").read_bytes())

    notes: list[str] = []
    train(
        _config(data, tmp_path / "b.safetensors", checkpoint_iters=3),
        on_message=lambda t: (notes.append(t), keep_the_checkpoint(t)),
    )
    assert [n.split(",")[0] for n in notes] == ["checkpoint: iteration 3"]  # every 3 steps, but not at the end
    assert torch.load(copy, weights_only=True)["iteration"] == 3

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.to_kwargs()))
    out = tmp_path / "c.safetensors"
    args = ["train", "--config", str(config), "--data", str(data), "--iters", "6", "--out", str(out)]
    args += ["--patch", "8", "--batch", "2", "--device", "cpu", "--resume", str(copy)]
    cli = runner.invoke(app, args)
    assert cli.exit_code == 0, cli.output
    assert "resuming at iteration 3" in " ".join(cli.output.split())
    a, b = (torch.load(p, weights_only=True) for p in (straight.state, copy))  # --resume STATE keeps writing STATE
    assert b["iteration"] == 6 and not state_path(out).exists()
    for key in ("params", "params_ema"):
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key]), key
    assert all(
        torch.equal(a["optimizer"]["state"][i]["exp_avg_sq"], s["exp_avg_sq"])
        for i, s in b["optimizer"]["state"].items()
    )
    both = runner.invoke(app, [*args, "--state", str(tmp_path / "other.state.pth")])
    assert both.exit_code == 2 and "give --resume or --state, not both" in both.output


def test_checkpoint_every_0_is_off_as_checkpoint_iters_0_is(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--checkpoint-every 0 saved the state after every step (15 MB a step for SST-light)."""
    import sst_cli.train as training

    saves: list[int] = []
    save = training._TrainingRun.save_state
    monkeypatch.setattr(training._TrainingRun, "save_state", lambda run: saves.append(run.iteration) or save(run))
    train(_config(data, tmp_path / "w.safetensors", iters=4, checkpoint_every=0))
    assert saves == [4]  # the end only
    train(_config(data, tmp_path / "s.safetensors", iters=4, checkpoint_every=0, checkpoint_iters=2))
    assert saves == [4, 2, 4]


def test_x3_starts_from_a_tiny_x2_training_state(data: Path, tmp_path: Path) -> None:
    x2 = train(_config(data, tmp_path / "x2.safetensors", iters=3))
    x3_config = _config(data, tmp_path / "x3.safetensors", iters=2, scale=3, patch=6, init=x2.state)
    fresh = SST(**replace(TINY, upscaling_factor=3).to_kwargs())
    report = init_from(fresh, x2.state)  # the state's params_ema, as the official loader prefers
    ema = torch.load(x2.state, weights_only=True)["params_ema"]
    up = ["upsampler.up_conv.weight", "upsampler.up_conv.bias"]
    assert report.resized == up and report.reinitialised == [] and len(report.loaded) == len(ema) - 2
    assert all(torch.equal(fresh.state_dict()[k], ema[k]) for k in report.loaded)
    x3 = train(x3_config)
    assert x3.init is not None and x3.init.resized == up and x3.finished
    with safe_open(str(x3.out), framework="pt") as f:
        meta = f.metadata()
    assert meta["init"] == x2.state.name and meta["lr"] == "0.00025" and meta["scale"] == "3"


def test_compile_runs_the_same_step(data: Path, tmp_path: Path, dynamo_only: list[object]) -> None:
    compiled = dynamo_only
    plain = train(_config(data, tmp_path / "p.safetensors", iters=2))
    fast = train(_config(data, tmp_path / "c.safetensors", iters=2, compile=True))
    owners = [getattr(fn, "__self__", None) for fn in compiled]  # the network's layers, one by one
    assert owners and all(isinstance(layer, TransformerLayer) for layer in owners)
    assert len({id(layer) for layer in owners}) == len(owners) == TINY.n_blocks * len(TINY.window_sizes)
    a, b = (torch.load(r.state, weights_only=True) for r in (plain, fast))
    assert set(a["params"]) == set(b["params"])  # no _orig_mod. prefixes: the plain module is saved
    assert all(torch.allclose(a["params"][k], b["params"][k], atol=1e-6) for k in a["params"])
    assert b["settings"]["compile"] is True


def test_folders_that_cannot_be_written_are_refused_first_and_a_lost_state_keeps_the_weights(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only or full --state folder failed only at the end, in torch's words, and lost the weights too."""
    import sst_cli.train as training
    from sst_cli.errors import WriteError

    (tmp_path / "file").write_text("in the way")
    read: list[object] = []
    monkeypatch.setattr(training, "large_enough", lambda *args: read.append(args) or [])
    with pytest.raises(WriteError, match=r"--state .*: cannot write into '.*file': '.*file' is a file, not a folder"):
        train(_config(data, tmp_path / "w.safetensors", state=tmp_path / "file" / "w.state.pth"))
    assert read == []  # refused before any image was read
    monkeypatch.undo()

    def full(self: object) -> None:
        raise WriteError("cannot write 'w.state.pth': no space left on device")

    monkeypatch.setattr(training._TrainingRun, "save_state", full)
    config = _config(data, tmp_path / "kept.safetensors", iters=2)
    with pytest.raises(WriteError, match=r"no space left on device; the weights were written to .*kept\.safetensors"):
        train(config)
    assert config.out.is_file()


def test_a_run_that_writes_nothing_leaves_no_folder_it_made(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out deep/a/b/w.safetensors with an empty --data (a diverged loss, Ctrl-C while loading) left deep/a/b/."""
    import sst_cli.train as training

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no images"):
        train(_config(empty, tmp_path / "deep" / "a" / "b" / "w.safetensors"))
    assert not (tmp_path / "deep").exists()
    with pytest.raises(TrainingDiverged, match="training diverged"):
        train(_config(data, tmp_path / "nan" / "w.safetensors", lr=1e30, state=tmp_path / "st" / "w.state.pth"))
    assert not (tmp_path / "nan").exists() and not (tmp_path / "st").exists()
    monkeypatch.setattr(training, "decode_images", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        train(_config(data, tmp_path / "c" / "w.safetensors"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    monkeypatch.undo()
    train(_config(data, tmp_path / "made" / "w.safetensors", iters=1))  # a folder written into stays
    assert sorted(p.name for p in (tmp_path / "made").iterdir()) == ["w.safetensors", "w.state.pth"]


def test_a_checkpoint_that_cannot_be_written_does_not_end_the_run(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk at a periodic checkpoint ended the run with nothing saved, even the weights."""
    import sst_cli.train as training
    from sst_cli.errors import WriteError

    real = training._TrainingRun.save_state
    calls: list[int] = []

    def full_once(self: training._TrainingRun) -> None:
        calls.append(self.iteration)
        if len(calls) == 1:
            raise WriteError("cannot write 'w.state.pth': no space left on device")
        real(self)

    monkeypatch.setattr(training._TrainingRun, "save_state", full_once)
    said: list[str] = []
    result = train(_config(data, tmp_path / "w.safetensors", iters=3, checkpoint_iters=1), on_message=said.append)
    assert result.finished and result.out is not None and result.out.is_file() and calls == [1, 2, 3]
    assert (
        "checkpoint at iteration 1 not saved (cannot write 'w.state.pth': no space left on device); training "
        "goes on and tries again" in said
    )
    assert "checkpoint: iteration 2, state saved to " + str(result.state) in said


def test_when_neither_weights_nor_state_can_be_written_the_message_says_so(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sst_cli.train as training
    from sst_cli.errors import WriteError

    def full(*args: object) -> None:
        raise WriteError("cannot write there: no space left on device")

    monkeypatch.setattr(training._TrainingRun, "save_state", full)
    monkeypatch.setattr(training._TrainingRun, "save_weights", full)
    with pytest.raises(WriteError, match=r"could not be written either: nothing of this run was saved$"):
        train(_config(data, tmp_path / "w.safetensors", iters=2))


def test_torch_save_failures_are_said_in_plain_words(tmp_path: Path) -> None:
    from sst_cli.errors import WriteError
    from sst_cli.files import atomic_save

    def refused(temp: Path) -> None:
        raise RuntimeError(
            "[enforce fail at inline_container.cc:747] . open file failed with strerror: Read-only file system"
        )

    with pytest.raises(WriteError, match=r"cannot write '.*w\.pth': the file system is read-only$"):
        atomic_save(tmp_path / "w.pth", refused)


@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs on Windows")
def test_an_out_that_is_no_file_is_refused_before_any_image_is_read(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out FIFO --overwrite trained, then renamed the weights over the pipe, leaving a plain file there."""
    import sst_cli.train as training
    from sst_cli.errors import WriteError

    os.mkfifo(tmp_path / "pipe.safetensors")
    read: list[object] = []
    monkeypatch.setattr(training, "large_enough", lambda *args: read.append(args) or [])
    with pytest.raises(WriteError, match=r"--out .*pipe\.safetensors: it is a named pipe \(FIFO\), not a file"):
        train(_config(data, tmp_path / "pipe.safetensors", overwrite=True))
    assert read == [] and (tmp_path / "pipe.safetensors").is_fifo()


def test_a_second_run_writing_the_same_files_is_refused_while_the_first_runs(data: Path, tmp_path: Path) -> None:
    from sst_cli.train import _claimed

    out = tmp_path / "w.safetensors"
    refused = pytest.raises(ConfigError, match=r"--out .*w\.safetensors: another sst train is writing it now")
    with _claimed([("--out", out)]), refused:  # as a first run holds them
        train(_config(data, out, iters=1))
    assert not out.exists() and not list(tmp_path.glob(".*.lock"))  # nothing written, and no lock left behind
    train(_config(data, out, iters=1))  # once the first is done, the file is free
    assert out.is_file() and not list(tmp_path.glob(".*.lock"))


def test_resume_given_weights_points_at_init(data: Path, tmp_path: Path) -> None:
    weights = train(_config(data, tmp_path / "w.pth", iters=1)).out
    with pytest.raises(CheckpointError, match=r"not an sst-cli training state .*; weights to start a run from go to"):
        train(_config(data, tmp_path / "next.safetensors", resume=True, state=weights))
    with pytest.raises(ConfigError, match=r"^state .*w\.safetensors: a training state is a \.pth .*go to init\)$"):
        _config(data, tmp_path / "x.safetensors", resume=True, state=tmp_path / "w.safetensors").check()


def test_a_warm_up_longer_than_the_run_and_a_finished_run_resumed_are_said(data: Path, tmp_path: Path) -> None:
    notes: list[str] = []
    first = train(_config(data, tmp_path / "w.safetensors", iters=2, warmup=5), on_message=notes.append)
    assert "--warmup 5 is not shorter than --iters 2: the peak lr is never reached" in notes
    notes.clear()
    again = train(_config(data, first.out, iters=2, warmup=1, resume=True), on_message=notes.append)
    assert again.iteration == 2 and any("already reached iteration 2 of --iters 2" in n for n in notes)


def test_an_unknown_model_name_offers_only_networks_sst_train_can_train(data: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"did you mean sst-light\?") as unknown:
        train(_config(data, tmp_path / "w.safetensors", model="sst-lite"))
    assert "sst-l+" in str(unknown.value) and "dat" not in str(unknown.value) and "sst-real" not in str(unknown.value)
    with pytest.raises(ConfigError, match="sst train trains SST networks; dat is another architecture"):
        train(_config(data, tmp_path / "w.safetensors", model="dat"))


def test_a_run_resumed_with_other_settings_records_which_made_which_iterations(data: Path, tmp_path: Path) -> None:
    """Resumed with another --data, --batch and --lr, the weights said the last stretch's settings alone (data
    ds/HR, batch 2, lr 0.001) although most iterations ran with the first ones."""
    from sst_cli.about import training_record

    more = _write_images(tmp_path / "more", count=2, size=32)
    first = train(_config(data, tmp_path / "w.safetensors", iters=4, batch=1))
    resumed = train(_config(more, first.out, iters=5, batch=2, lr=1e-3, resume=True))
    assert resumed.iteration == 5
    meta = read_metadata(resumed.out)
    assert meta["batch"] == "2" and meta["data"] == str(more)  # the flat keys, as older readers take them
    record = training_record(meta)
    assert record["history"] == f"iterations 1-4: data {data}, batch 1, lr 0.0005; 5: data {more}, batch 2, lr 0.001"
    assert record["data"] == f"{data}, then {more}; 2 images used from {more}"
    assert "batch" not in record["recipe"] and "lr " not in record["recipe"] and "LR patch 8" in record["recipe"]

    again = train(_config(more, first.out, iters=6, resume=True))  # the same settings: the last stretch goes on
    assert training_record(read_metadata(again.out))["history"].endswith(f"; 5-6: data {more}, batch 2, lr 0.001")
    state = torch.load(first.state, weights_only=True)
    del state["settings"]["history"]  # a state of an older sst-cli: its first stretch begins at iteration 1
    torch.save(state, first.state)
    older = train(_config(data, first.out, iters=7, batch=1, resume=True))
    assert training_record(read_metadata(older.out))["history"] == (
        f"iterations 1-6: data {more}, batch 2; 7: data {data}, batch 1"
    )  # only what differs between the stretches


def test_a_run_of_one_stretch_records_no_history(data: Path, tmp_path: Path) -> None:
    first = train(_config(data, tmp_path / "w.safetensors", iters=2))
    resumed = train(_config(data, first.out, iters=3, resume=True))  # only --iters changed: the same stretch
    assert "history" not in read_metadata(resumed.out)


def test_a_training_state_loads_as_its_ema_weights_in_the_network_it_records(data: Path, tmp_path: Path) -> None:
    """``sst models info STATE`` and ``sst upscale --weights STATE`` said "window sizes cannot be read from the SST
    weights", although the state records its network and --init takes it."""
    first = train(_config(data, tmp_path / "w.safetensors", iters=2))
    model = load_model(first.state)
    ema = torch.load(first.state, weights_only=True)["params_ema"]
    assert model.config == TINY and all(torch.equal(ema[k], v) for k, v in model.state_dict().items())
    info = runner.invoke(app, ["models", "info", str(first.state)], env={"COLUMNS": "300"})
    assert info.exit_code == 0, info.output
    assert "  source             training state of sst train at iteration 2: these are its EMA weights" in info.output
    image = tmp_path / "x.png"
    Image.new("RGB", (12, 12), (90, 120, 150)).save(image)
    out = tmp_path / "x_up.png"
    upscaled = runner.invoke(app, ["upscale", str(image), "--weights", str(first.state), "-o", str(out), "-q"])
    assert upscaled.exit_code == 0 and Image.open(out).size == (24, 24), upscaled.output
