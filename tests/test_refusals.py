"""A refused command line answers at once: exit 2, one sentence, and torch is never imported where the answer
does not need it (importing it takes about a second, several on a busy machine). Nothing here is timed: the
tests check what the refusal path imports, which is what makes it fast."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from sst_cli.checks import check_device_name, check_devices
from sst_cli.errors import ConfigError
from sst_cli.inputs import check_inputs_exist

# Runs the CLI as `sst` does, then says on stderr whether torch was imported on the way.
PROBE = """
import sys
from sst_cli.cli import main
try:
    main()
finally:
    print("torch imported" if "torch" in sys.modules else "torch not imported", file=sys.stderr)
"""


def _sst(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return done.returncode, lines


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    Image.new("RGB", (8, 8)).save(tmp_path / "photo.png")
    return tmp_path / "photo.png"


TRAIN_ARGS = ["train", "--data", ".", "--iters", "9", "--out", "w.pth"]  # valid but for the option added

NO_TORCH_NEEDED = [
    (["--precision", "fp8"], "unknown precision 'fp8'"),
    (["--attention", "foo"], "unknown attention backend 'foo'"),
    (["--tile", "abc"], "--tile must be auto, 0 (whole image) or a tile size"),
    (["--tile", "99999999999999999999"], "is larger than any picture sst-cli reads; 0 runs the whole image"),
    (["--max-memory", "lots"], "--max-memory must be a size such as 4G"),
    # 5 bytes, taken silently where the picture ran whole
    (["--max-memory", "5"], "--max-memory 5: 5 bytes; did you mean 5G? give a unit: 512M, 2G (5B if bytes are meant)"),
    (["--batch", "0"], "--batch must be at least 1, got 0"),  # was "batch must ...", the keyword
    (["--tile-overlap", "-1"], "--tile-overlap must be 0 or more, got -1"),  # was "tile overlap must ..."
    (["--alpha", "x"], "unknown alpha mode 'x'"),
    (["--format", "bmp"], "unknown output format 'bmp'"),
    (["--quality", "0"], "quality must be between 1 and 100"),
    (["--name", "{nope}.png"], "unknown field {nope}"),
    (["--name", "{stem.upper}.{ext}"], "unknown field {stem.upper}"),
    (["--name", "{stem}.gif"], "must end with .{ext}"),
    (["--name", "{stem:>8}.{ext}"], "formats {stem}: use the plain field {stem}"),
    (["--name", ".{ext}"], "gives hidden files (a leading dot)"),
    (["--name", "../../x.{ext}"], "must give a plain file name (no folders)"),
    (["--outscale", "1e-300"], "--outscale 1e-300 leaves less than 1 px of any picture's side"),
    (["--outscale", "1e308"], "--outscale 1e+308 makes even a 1 px picture larger than sst-cli writes"),
    (["--outscale", "inf"], "--outscale inf: must be a finite number above 0"),  # was "a positive number"
    (["--outscale", "nan"], "--outscale nan: must be a finite number above 0"),
    (["--outscale", "-inf"], "--outscale -inf: must be a finite number above 0"),
    (["--ig-lambda", "nan"], "--ig-lambda nan: must be a finite number"),  # was "ig_lambda must be ..."
    (["-o", "-"], "-o: - (standard input/output) is not supported: give a file name"),
    (["--overwrite", "--skip-existing"], "--overwrite and --skip-existing exclude each other"),
    (["--exact", "--tile-overlap", "0"], "--exact and --tile-overlap exclude each other: --exact sets the overlap"),
    (["--workers", "0"], "--workers must be 1 or more"),
    (["--device", "cuda:0,"], "has an empty entry"),
    (["--model", "sst-lite"], "unknown model 'sst-lite'; did you mean sst-light?"),
    (["--model", "sst", "--scale", "5"], "scale must be one of 2, 3, 4, got 5"),
    (["--weights", ""], "--weights: an empty name; give a file or folder"),  # was "'.': a folder"
    (["-o", " "], "-o: an empty name; give a file or folder"),
    (["--scale", "20000"], "scale must be one of 2, 3, 4, got 20000"),  # the default model: was "too big for memory"
    (["--weights", "w.pth", "--hub-repo", "a/b"], "--hub-repo says where zoo weights come from"),
]
if sys.platform != "darwin":  # Apple's GPU exists on macOS only: anywhere else the answer needs no torch
    NO_TORCH_NEEDED.append((["--device", "mps"], "device 'mps' (Apple GPU) is not available here"))


@pytest.mark.parametrize(("options", "message"), NO_TORCH_NEEDED)
def test_refused_options_answer_without_importing_torch(
    tmp_path: Path, photo: Path, options: list[str], message: str
) -> None:
    code, lines = _sst(tmp_path, "upscale", photo.name, *options)
    assert code == 2, lines
    assert lines[-1] == "torch not imported", lines
    assert len(lines) == 2 and lines[0].startswith("error: ") and message in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photo.png"]  # nothing written


OTHER_COMMANDS = [
    (["eval", "-d", "Set5", "--precision", "fp8"], "unknown precision 'fp8'"),
    (["eval", "-d", "Set5", "--max-memory", "lots"], "--max-memory must be a size"),
    (["compare", "photo.png", "--max-memory", "512"], "--max-memory 512: 512 bytes; did you mean 512M?"),
    (["compare", "photo.png", "--tile", "abc"], "--tile must be auto, 0"),
    (["compare", "photo.png", "--attention", "foo"], "unknown attention backend 'foo'"),
    (["bench", "--precision", "fp16"], "unknown precision 'fp16'"),
    (["bench", "--attention", "foo"], "unknown attention backend 'foo'"),
    (["bench", "--compile", "fast"], "unknown compile mode 'fast' for --compile"),
    (["bench", "--size", "12x"], "--size must be WIDTHxHEIGHT in pixels, e.g. 1280x720, got '12x'"),
    (["bench", "--tiled", "12x"], "--tiled must be WIDTHxHEIGHT in pixels, e.g. 1280x720, got '12x'"),
    (["bench", "-m", "nosuch"], "unknown model 'nosuch'"),
    (["bench", "--scale", "5"], "scale must be one of 2, 3, 4, got 5"),
    (["bench", "--runs", "0"], "--runs must be at least 1, got 0"),  # was refused after importing torch
    (["bench", "--runs", "-1"], "--runs must be at least 1, got -1"),
    (["bench", "--warmup", "-1"], "--warmup must be 0 or more, got -1"),
    (["train", "--data", ".", "--iters", "0", "--out", "w.safetensors"], "iters must be at least 1"),
    (["train", "--data", ".", "--iters", "9", "--out", "w.bin"], "name it .safetensors (recommended), .pth or .pt"),
    # inf was taken by --time-limit, --checkpoint-every and --log-every
    ([*TRAIN_ARGS, "--time-limit", "-1"], "--time-limit -1: must be a finite number of minutes above 0"),
    ([*TRAIN_ARGS, "--time-limit", "nan"], "--time-limit nan: must be a finite number of minutes above 0"),
    ([*TRAIN_ARGS, "--time-limit", "inf"], "--time-limit inf: must be a finite number of minutes above 0"),
    ([*TRAIN_ARGS, "--lr", "inf"], "--lr inf: must be a finite number above 0"),  # was '--lr must be positive, got inf'
    ([*TRAIN_ARGS, "--lr", "nan"], "--lr nan: must be a finite number above 0"),
    ([*TRAIN_ARGS, "--lr", "-inf"], "--lr -inf: must be a finite number above 0"),
    ([*TRAIN_ARGS, "--lr", "0"], "--lr 0: must be a finite number above 0"),
    ([*TRAIN_ARGS, "--ema-decay", "nan"], "--ema-decay nan: must be a number from 0 up to (not including) 1"),
    ([*TRAIN_ARGS, "--ema-decay", "1"], "--ema-decay 1: must be a number from 0 up to (not including) 1"),
    (
        [*TRAIN_ARGS, "--checkpoint-every", "inf"],
        "--checkpoint-every inf: must be a finite number of seconds, 0 or more",
    ),
    (
        [*TRAIN_ARGS, "--checkpoint-every", "nan"],
        "--checkpoint-every nan: must be a finite number of seconds, 0 or more",
    ),
    ([*TRAIN_ARGS, "--log-every", "inf"], "--log-every inf: must be a finite number of seconds, 1 or more"),
    ([*TRAIN_ARGS, "--log-every", "nan"], "--log-every nan: must be a finite number of seconds, 1 or more"),
    (["train", "--data", ".", "--iters", "9", "--out", "w.pth", "--precision", "fp8"], "precision must be one of"),
    (["train", "--data", ".", "--iters", "9", "--out", "w.pth", "-m", "sst", "--config", "c.json"], "not both"),
    (["upscale", "-"], "INPUT: - (standard input/output) is not supported: give a file name"),
    (["eval", "-d", "Set5", "--json", "-"], "--json: - (standard input/output) is not supported"),
    (["eval", "-d", "Set5", "--csv", "-"], "--csv: - (standard input/output) is not supported"),
    (["eval", "-d", "Set5", "--report", "-"], "--report: - (standard input/output) is not supported"),
    (["compare", "photo.png", "--png", "-"], "--png: - (standard input/output) is not supported"),
    (["compare", "-"], "IMAGES: - (standard input/output) is not supported"),
    (["bench", "--json", "-"], "--json: - (standard input/output) is not supported"),
    (["train", "--data", ".", "--iters", "9", "--out", "-"], "--out: - (standard input/output) is not supported"),
]
if sys.platform != "darwin":
    OTHER_COMMANDS.append((["bench", "--device", "mps"], "device 'mps' (Apple GPU) is not available here"))


@pytest.mark.parametrize(("args", "message"), OTHER_COMMANDS)
def test_other_commands_refuse_without_importing_torch(
    tmp_path: Path, photo: Path, args: list[str], message: str
) -> None:
    code, lines = _sst(tmp_path, *args)
    assert code == 2, lines
    assert lines[-1] == "torch not imported", lines
    assert len(lines) == 2 and lines[0].startswith("error: ") and message in lines[0], lines


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "-d", "Set5", "--json", ""],  # wrote to the working folder: "it is a folder"
        ["bench", "--json", ""],  # exit 0, and no JSON written
        ["train", "--data", ".", "--iters", "9", "--out", ""],
        ["compare", ""],
    ],
)
def test_an_empty_path_is_refused_as_such(tmp_path: Path, args: list[str]) -> None:
    """Path('') is the working folder: an empty name was taken for it, or dropped without a word."""
    code, lines = _sst(tmp_path, *args)
    assert code == 2 and lines[-1] == "torch not imported", lines
    assert any("an empty name; give a file or folder" in line for line in lines), lines


def test_missing_inputs_answer_without_importing_torch(tmp_path: Path) -> None:
    code, lines = _sst(tmp_path, "upscale", "missing.png", "gone/*.jpg")
    assert code == 2 and lines[-1] == "torch not imported", lines
    said = "nothing to upscale: none of 'missing.png', 'gone/*.jpg' exists (no such file, folder or match)"
    assert lines[0] == f"error: {said}"


def test_the_probe_sees_torch_when_the_answer_needs_it(tmp_path: Path, photo: Path) -> None:
    """Whether cuda:99 exists only PyTorch can say: refused too, but after importing torch (the probe works)."""
    code, lines = _sst(tmp_path, "upscale", photo.name, "--device", "cuda:99")
    assert code == 2 and lines[-1] == "torch imported", lines


@pytest.mark.parametrize(
    ("name", "platform", "refused"),
    [
        ("mps", "linux", "Apple GPU"),
        ("MPS:0", "win32", "Apple GPU"),
        ("mps", "darwin", None),
        ("cuda", "darwin", "no CUDA GPU"),
        ("cuda:1", "darwin", "no CUDA GPU"),
        ("cuda", "linux", None),
        ("cpu", "darwin", None),
        ("auto", "linux", None),
    ],
)
def test_devices_a_platform_never_has(name: str, platform: str, refused: str | None) -> None:
    if refused is None:
        check_device_name(name, platform)
    else:
        with pytest.raises(ConfigError, match=refused):
            check_device_name(name, platform)


def test_a_refused_device_suggests_the_cpu_as_its_caller_writes_it() -> None:
    """``Upscaler(device="mps")`` was told to 'use --device cpu', an option of a command line it never used."""
    for name, platform in (("mps", "linux"), ("cuda", "darwin")):
        with pytest.raises(ConfigError, match=r"; use device='cpu'$"):
            check_device_name(name, platform)
        with pytest.raises(ConfigError, match=r"; use --device cpu$"):
            check_device_name(name, platform, cli=True)


def test_cuda_without_a_gpu_suggests_the_cpu_as_its_caller_writes_it(tmp_path: Path, photo: Path) -> None:
    """What only PyTorch can say (no CUDA GPU here) names ``device='cpu'`` to the API and ``--device cpu`` to
    ``sst``, whose commands build the API's options after checking the device themselves."""
    import torch

    from sst_cli.options import UpscaleOptions

    if torch.cuda.is_available() or sys.platform == "darwin":
        pytest.skip("device cuda is taken here (a CUDA GPU), or refused before torch (macOS): tested above")
    with pytest.raises(ConfigError, match=r"no CUDA GPU here; use device='cpu'$"):
        UpscaleOptions(device="cuda")
    for command in (["upscale", photo.name], [*TRAIN_ARGS], ["bench"]):
        code, lines = _sst(tmp_path, *command, "--device", "cuda")
        assert code == 2 and lines[0].endswith("no CUDA GPU here; use --device cpu"), lines


def test_device_lists_and_workers() -> None:
    check_devices("cuda:0,cuda:1", 1)
    check_devices("cuda:all", 1)
    with pytest.raises(ConfigError, match="--workers applies to one device"):
        check_devices("cuda:0,cuda:1", 2)
    with pytest.raises(ConfigError, match="--workers must be 1 or more"):
        check_devices("cpu", True)  # type: ignore[arg-type]


def test_one_missing_input_among_others_is_the_batch_s_to_report(tmp_path: Path, photo: Path) -> None:
    check_inputs_exist([str(tmp_path / "missing.png"), str(photo)])
    check_inputs_exist([str(tmp_path / "*.png")])  # a pattern that matches
    with pytest.raises(ConfigError, match=r"missing\.png' does not exist"):
        check_inputs_exist([str(tmp_path / "missing.png")])
