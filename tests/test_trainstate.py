"""Training state files: every random state round-trips, bad or foreign states are refused in one sentence."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from test_train import TINY, _write_images
from typer.testing import CliRunner

from sst_cli import create_model
from sst_cli.cli import app
from sst_cli.errors import CheckpointError, ConfigError, WeightsNotFound
from sst_cli.train import TrainConfig, train
from sst_cli.trainstate import capture_rng, restore_rng, to_cpu, write_state

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> TrainConfig:
    """A finished 2-step tiny x2 run, whose state the tests try to resume in wrong ways."""
    root = tmp_path_factory.mktemp("state")
    config = TrainConfig(
        data=(_write_images(root / "images"),), out=root / "run.safetensors", iters=2, model=TINY, patch=8, batch=2,
        device="cpu", report_every=1,
    )  # fmt: skip
    train(config)
    return replace(config, resume=True, iters=4)


def _draws(generator: torch.Generator) -> tuple[object, ...]:
    return (
        torch.randint(1000, (4,), generator=generator).tolist(),
        torch.rand(3).tolist(),
        np.random.rand(3).tolist(),
        np.random.randn(),  # numpy keeps a cached Gaussian: part of its state
        random.random(),
        random.gauss(0, 1),
    )


def test_every_random_state_round_trips_through_the_file(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(4)
    np.random.randn()  # leave a cached Gaussian behind
    write_state(tmp_path / "s.pth", {"rng": capture_rng(generator, torch.device("cpu"))})
    first = _draws(generator)
    _draws(generator)  # move every stream on
    saved = torch.load(tmp_path / "s.pth", weights_only=True)  # only plain types and tensors inside
    restore_rng(saved["rng"], generator, torch.device("cpu"))
    assert _draws(generator) == first


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not a zip file at all", "is not a readable training state"),
        ("truncated", "is not a readable training state"),
        ({"format": "something else"}, "is not an sst-cli training state"),
        ({"format": "sst-cli-train/1", "params": {}}, r"is an incomplete training state \(no params_ema, optimizer"),
    ],
)
def test_a_bad_state_file_is_refused_in_one_sentence_naming_it(
    run: TrainConfig, tmp_path: Path, content: object, match: str
) -> None:
    bad = tmp_path / "bad.state.pth"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    elif content == "truncated":
        whole = run.state_file.read_bytes()
        bad.write_bytes(whole[: len(whole) // 2])
    else:
        torch.save(content, bad)
    with pytest.raises(CheckpointError, match=match) as error:
        train(replace(run, state=bad))
    message = str(error.value)
    assert message.startswith(f"resume: {bad} ") and "\n" not in message  # not the --resume it never typed
    cli = runner.invoke(
        app,
        ["train", "--data", str(run.data[0]), "--iters", "4", "--out", str(tmp_path / "x.pth"), "--resume", str(bad)],
    )
    lines = [line for line in cli.output.splitlines() if line.strip()]
    assert cli.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"error: --resume: {bad}"), cli.output


def test_a_state_of_another_network_scale_or_seed_is_refused(run: TrainConfig) -> None:
    with pytest.raises(ConfigError, match=r"run.state.pth is a x2 run and this one is x3; start the new scale"):
        train(replace(run, scale=3))
    with pytest.raises(ConfigError, match=r"run.state.pth is a run of custom x2 with another network config"):
        train(replace(run, model=replace(TINY, dim=12)))
    with pytest.raises(ConfigError, match="with another network config"):
        train(replace(run, model="sst-light", scale=2))
    with pytest.raises(ConfigError, match=r"config than custom x2; use the same model, or another out$"):
        train(replace(run, model=replace(TINY, dim=12)))  # an API caller's model is its SSTConfig: no --config
    with pytest.raises(
        ConfigError, match=r"config than custom x2; use the same --model and --config, or another --out"
    ):
        train(replace(run, model=replace(TINY, dim=12)), cli=True)
    with pytest.raises(ConfigError, match=r"^resume: .* was started with seed=0, not 1$"):
        train(replace(run, seed=1))
    with pytest.raises(ConfigError, match=r"^--resume: .* was started with --seed 0, not 1$"):
        train(replace(run, seed=1), cli=True)
    with pytest.raises(
        WeightsNotFound, match=r"^resume: there is no training state .*nowhere.state.pth; start without resume=True$"
    ):
        train(replace(run, state=run.out.with_name("nowhere.state.pth")))
    notes: list[str] = []
    assert train(run, on_message=notes.append).iteration == 4  # a longer schedule is allowed, and said
    assert notes == ["resuming with changed iters: the run continues, but not exactly as planned"]


def test_resuming_judges_the_data_by_what_it_holds_not_how_its_path_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same folder named another way was 'changed data'; images added to it were not."""
    _write_images(tmp_path / "images")
    monkeypatch.chdir(tmp_path)
    first = TrainConfig(
        data=(Path("images"),), out=tmp_path / "r.safetensors", iters=2, model=TINY, patch=8, batch=2, device="cpu",
        report_every=1,
    )  # fmt: skip
    train(first)
    notes: list[str] = []
    resumed = replace(first, data=(tmp_path / "images",), resume=True, iters=3)
    train(resumed, on_message=notes.append)
    assert [n for n in notes if "changed" in n] == ["resuming with changed iters: the run continues, but not exactly "
                                                    "as planned"]  # fmt: skip
    _write_images(tmp_path / "images", count=5)  # one image more
    notes.clear()
    train(replace(resumed, iters=4), on_message=notes.append)
    assert "resuming with changed iters, data: the run continues, but not exactly as planned" in notes


def test_a_state_from_before_the_data_fingerprint_compares_the_paths(tmp_path: Path) -> None:
    from sst_cli.trainstate import check_resume

    settings = {"scale": 2, "sst_config": {}, "model": "m", "seed": 0, "iters": 4, "batch": 2, "patch": 8, "lr": 1.0,
                "warmup": 0, "ema_decay": 0.9, "data": ["images"], "data_files": "abc", "precision": "fp32",
                "device": "cpu"}  # fmt: skip
    old = {key: value for key, value in settings.items() if key != "data_files"}
    assert check_resume({"settings": old}, settings, tmp_path / "s.pth") == []
    assert check_resume({"settings": {**old, "data": ["other"]}}, settings, tmp_path / "s.pth") == ["data_files"]


def test_sst_light_state_fits_through_the_device_tool(tmp_path: Path) -> None:
    """params + EMA + two AdamW moments of SST-light x4: about 14.6 MB, under the 16 MiB a file may come back."""
    model = create_model("sst-light", 4)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # creates the moments
    ema = {k: v.clone() for k, v in model.state_dict().items()}
    path = tmp_path / "sst-light_x4.state.pth"
    generator = torch.Generator()
    payload = {"params": model.state_dict(), "params_ema": ema, "optimizer": optimizer.state_dict()}
    write_state(path, {**payload, "rng": capture_rng(generator, torch.device("cpu")), "iteration": 0})
    size = path.stat().st_size
    parameters = sum(p.numel() for p in model.parameters())
    assert 4 * 4 * parameters < size < 16 * 2**20, size
    assert to_cpu([torch.ones(1)])[0].device.type == "cpu"
