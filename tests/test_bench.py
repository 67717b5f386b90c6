"""``sst bench``: the API returns the paper's protocol figures (tiny sizes here), the CLI prints and saves them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import GOLDEN, needs_golden
from typer.testing import CliRunner

from sst_cli.archs import attention
from sst_cli.archs.sst.layers import WindowAttention, reference_path
from sst_cli.bench import BenchSettings, lr_size, quick_cpu_settings, run_bench
from sst_cli.cli import app
from sst_cli.cli.bench import _quick_notice, _settings
from sst_cli.errors import ConfigError, WeightsNotFound
from sst_cli.zoo import create_model

TINY = {"models": ("sst-light",), "scales": (4,), "size": (64, 48), "runs": 2, "warmup": 1, "device": "cpu"}
runner = CliRunner()


def test_lr_size_covers_the_output() -> None:
    assert lr_size(1280, 720, 2) == (640, 360)
    assert lr_size(1280, 720, 3) == (427, 240)  # 1281x720: no LR size gives 1280 exactly
    assert lr_size(1280, 720, 4) == (320, 180)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"models": ("sst-xxl",)}, "unknown model"),
        ({"scales": (5,)}, "scale must be"),
        ({"precisions": ("fp16",)}, "unknown precision"),
        ({"runs": 0}, "^--runs must be at least 1, got 0$"),
        ({"warmup": -1}, "^--warmup must be 0 or more, got -1$"),  # it said "runs must be >= 1 and warm-up >= 0"
        ({"size": (0, 5)}, "^--size must be positive on both sides, got 0x5$"),
        ({"size": None}, "nothing to measure"),
        ({"compile": "fast"}, "compile mode"),
        ({"attention": "xformers"}, "attention backend"),
    ],
)
def test_bad_settings_are_named(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BenchSettings(**(TINY | overrides)).validate()


def test_paper_protocol_is_the_default_and_cpu_gets_a_quick_one() -> None:
    paper = BenchSettings()
    assert (paper.size, paper.runs, paper.warmup, paper.scales) == ((1280, 720), 10, 3, (2, 3, 4))
    assert set(paper.models) == {"sst-light", "sst", "sst-l"} and paper.precisions == ("fp32", "bf16")
    quick = quick_cpu_settings()
    assert quick.size == (320, 180) and quick.models == ("sst-light",)
    options = CLI_DEFAULTS
    assert _settings(**options) == (quick_cpu_settings(device="cpu"), True)
    chosen, is_quick = _settings(**(options | {"models": ["SST"], "size": "320x180"}))
    assert not is_quick and chosen.models == ("sst",) and chosen.size == (320, 180) and chosen.runs == 10
    tiled_only, _ = _settings(**(options | {"models": ["sst"], "tiled": "640x360"}))
    assert tiled_only.size is None and tiled_only.tiled == (640, 360)
    quick_tiled, is_quick = _settings(**(options | {"tiled": "640x360"}))
    assert is_quick and quick_tiled.size is None and quick_tiled.models == ("sst-light",)
    real, _ = _settings(**(options | {"models": ["sst-real"], "size": "64x64"}))  # it exists at x4 only
    assert real.scales == (4,) and chosen.scales == (2, 3, 4)


CLI_DEFAULTS = {
    "device": "cpu", "models": None, "scales": None, "precisions": None, "size": None, "tiled": None,
    "runs": None, "warmup": None, "attention": "auto", "reference": False, "tile": "auto",
    "compile_mode": "none", "tf32": False, "input_image": None,
}  # fmt: skip


def test_a_model_or_precision_named_twice_is_timed_once(tmp_path: Path) -> None:
    """``-m sst-light -m sst-light`` or ``--precision bf16 --precision BF16`` timed the same block twice, and the
    first bf16 row's "x fp32 speed" divided by the other block's fp32 median."""
    repeated = {"models": ("sst-light", " SST-Light"), "scales": (4, 4), "precisions": ("bf16", "BF16", "fp32", "bf16")}
    twice = BenchSettings(**(TINY | repeated))
    assert (twice.models, twice.scales, twice.precisions) == (("sst-light",), (4,), ("bf16", "fp32"))
    given, _ = _settings(**(CLI_DEFAULTS | {"models": ["sst-light", "SST-LIGHT"], "precisions": ["bf16", "bf16"]}))
    assert given.models == ("sst-light",) and given.precisions == ("bf16",)
    out = tmp_path / "bench.json"
    args = ["bench", "-m", "sst-light", "-m", "SST-light", "-s", "2", "--size", "32x24", "--runs", "1", "--warmup",
            "0", "--device", "cpu", "--precision", "fp32", "--precision", "bf16", "--precision", "BF16"]  # fmt: skip
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["results"]
    assert [(r["model"], r["precision"]) for r in rows] == [("sst-light", "fp32"), ("sst-light", "bf16")]
    assert result.output.count("x fp32 speed") == 1


@pytest.mark.parametrize(
    "options,words",
    [
        ({}, "sst-light, x2 and x4, 320x180 output, 3 runs"),
        ({"scales": [3]}, "sst-light, x3, 320x180 output, 3 runs"),  # it said x2 and x4
        ({"tiled": "64x48"}, "sst-light, x2 and x4, tiled 64x48 output, 3 runs"),  # it said 320x180
        ({"scales": [2, 3, 4], "tiled": "64x48"}, "sst-light, x2, x3 and x4, tiled 64x48 output, 3 runs"),
    ],
)
def test_the_quick_defaults_notice_names_what_runs(options: dict, words: str) -> None:
    settings, quick = _settings(**(CLI_DEFAULTS | options))
    assert quick
    assert _quick_notice(settings) == (
        f"CPU: quick defaults ({words}); the paper's protocol needs a GPU or explicit --model/--size/--runs"
    )


def test_the_cli_prints_the_quick_defaults_notice_of_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import sst_cli.bench as bench

    monkeypatch.setattr(bench, "_planned", lambda settings, cli: [])  # nothing timed: the notice is what is tested
    result = runner.invoke(app, ["bench", "--device", "cpu", "--scale", "3", "--tiled", "64x48"])
    assert result.exit_code == 0, result.output
    assert "CPU: quick defaults (sst-light, x3, tiled 64x48 output, 3 runs)" in " ".join(result.output.split())


def test_reduce_overhead_on_the_cpu_says_cuda_graphs_do_nothing_there(monkeypatch: pytest.MonkeyPatch) -> None:
    import sst_cli.bench as bench

    monkeypatch.setattr(bench, "_planned", lambda settings, cli: [])  # nothing timed: the notices are what is tested
    said = "--compile reduce-overhead: its CUDA graphs run on CUDA GPUs only; on "
    reduce = run_bench(BenchSettings(**TINY, compile="reduce-overhead"))
    assert [n for n in reduce.notices if n.startswith(said)] == [f"{said}{reduce.device} it times as --compile default"]
    assert not any("CUDA graphs" in n for n in run_bench(BenchSettings(**TINY, compile="default")).notices)
    result = runner.invoke(app, ["bench", "--device", "cpu", "--size", "32x24", "--compile", "reduce-overhead"])
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()).count("its CUDA graphs run on CUDA GPUs only") == 1


def test_no_warm_up_says_the_figures_include_first_use_and_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--warmup 0`` on the CPU said "peak RSS growth from the first warm-up run on" of a figure that counts
    first-use allocations, and with --compile the timed run compiled the model without a word."""
    out = tmp_path / "bench.json"
    args = ["bench", "-m", "sst-light", "-s", "2", "--size", "16x16", "--runs", "1", "--device", "cpu"]
    cold = runner.invoke(app, [*args, "--warmup", "0", "--json", str(out)])
    assert cold.exit_code == 0, cold.output
    kind = json.loads(out.read_text())["memory_kind"]
    if kind != "not available on this system":
        assert kind.startswith("peak RSS growth including first-use allocations (no warm-up run")
        assert "first warm-up" not in kind
        warm = runner.invoke(app, [*args, "--warmup", "1", "--json", str(out), "--overwrite"])
        assert warm.exit_code == 0, warm.output
        assert json.loads(out.read_text())["memory_kind"].startswith("peak RSS growth from the first warm-up run on")
    import sst_cli.bench as bench

    monkeypatch.setattr(bench, "_planned", lambda settings, cli: [])  # nothing timed: the notices are what is tested
    said = "--compile default with --warmup 0: the first timed run includes compiling the model"
    compiled = runner.invoke(app, [*args, "--warmup", "0", "--compile", "default"])
    assert compiled.exit_code == 0, compiled.output
    assert " ".join(compiled.output.split()).count(said) == 1
    assert not any(said in n for n in run_bench(BenchSettings(**TINY, compile="default")).notices)  # warmup 1


def test_reference_path_is_swapped_in_and_out() -> None:
    model = create_model("sst-light", 2).eval()
    layer = next(m for m in model.modules() if isinstance(m, WindowAttention))
    with reference_path(model):
        assert layer.plain
    assert not layer.plain


def test_running_out_of_memory_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    import sst_cli.bench as bench

    def no_memory(*_args: object, **_kwargs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 TiB")

    monkeypatch.setattr(bench, "_measure_forward", no_memory)
    with pytest.raises(ConfigError, match=r"sst-light x4 fp32: out of memory on .*; time a smaller --size or --tiled"):
        run_bench(BenchSettings(**(TINY | {"runs": 1, "warmup": 0}), precisions=("fp32",)))


def test_cpu_peak_reset_trims_the_heap_only_where_glibc_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reset asks sst_cli.allocator, which knows the platforms (bench loaded libc.so.6 wherever it ran)."""
    import ctypes
    import sys

    from sst_cli import allocator
    from sst_cli.bench import _PeakMemory

    def no_libc(name: str, *_args: object, **_kwargs: object) -> object:
        raise AssertionError(f"{name} loaded on a platform without it")

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    allocator._glibc.cache_clear()
    try:
        _PeakMemory(torch.device("cpu")).reset()
    finally:
        allocator._glibc.cache_clear()


def test_sizes_that_cannot_fit_are_refused_before_anything_is_allocated(monkeypatch: pytest.MonkeyPatch) -> None:
    """--size / --tiled 200000x200000 relied on catching out-of-memory: under no ulimit the machine swapped or the
    system killed sst; now refused up front, naming the option and the limit."""
    import sst_cli.bench as bench

    def built(*_args: object) -> None:
        raise AssertionError("a network was built for timing")

    monkeypatch.setattr(bench, "_make_model", built)
    monkeypatch.setattr(bench, "free_memory", lambda device: 2 << 30)
    monkeypatch.setattr(bench, "total_ram", lambda: 4 << 30)
    whole = BenchSettings(**(TINY | {"size": (8000, 8000)}))
    with pytest.raises(ConfigError, match=r"^--size 8000x8000: a whole-image pass of sst-light x4 fp32 needs about "
                       r"[\d.]+ GiB, more than the 2.0 GiB of free RAM; give a smaller --size"):  # fmt: skip
        run_bench(whole)
    tiled = BenchSettings(**(TINY | {"size": None, "tiled": (200000, 200000)}))
    with pytest.raises(ConfigError, match=r"^--tiled 200000x200000: the x4 result needs about 1220.0 GiB, more than "
                       "the 4.0 GiB this process may use; give a smaller --tiled$"):  # fmt: skip
        run_bench(tiled)
    monkeypatch.setattr(bench, "free_memory", lambda device: 1 << 40)  # what fits is still timed
    monkeypatch.setattr(bench, "_make_model", lambda name, scale, seed: create_model(name, scale).eval())
    assert run_bench(BenchSettings(**(TINY | {"runs": 1, "warmup": 0}), precisions=("fp32",))).results


def test_run_bench_measures_ours_and_the_reference() -> None:
    progress: list[str] = []
    settings = BenchSettings(**(TINY | {"runs": 1, "warmup": 0}), precisions=("fp32", "bf16"), reference=True)
    report = run_bench(settings, progress.append)
    assert report.device_type == "cpu" and report.torch == torch.__version__ and report.threads >= 1
    assert "median of 1 timed runs" in report.protocol and "LR = ceil(64/s) x ceil(48/s)" in report.protocol
    assert "TF32" not in report.protocol  # an NVIDIA setting: said on CUDA only
    native = attention.kernel_problem() is None
    expected = "sst-cli CPU kernel (C, built by " if native else "PyTorch SDPA (CPU flash kernel, fp32"
    assert report.kernels["sst-light fp32"].startswith("attention kernel: " + expected)
    assert [(r.precision, r.path) for r in report.results] == [
        ("fp32", "ours"), ("fp32", "reference"), ("bf16", "ours"), ("bf16", "reference"),
    ]  # fmt: skip
    for row in report.results:
        assert row.lr == (16, 12) and row.output == (64, 48) and len(row.times_ms) == 1
        assert row.median_ms > 0 and row.params == 908_928
    ours, ref, bf16, _ = report.results
    assert ours.speedup == pytest.approx(ref.median_ms / ours.median_ms)
    assert ref.max_abs_diff is not None and ref.max_abs_diff <= 1e-5
    assert bf16.psnr_vs_fp32 is not None and bf16.psnr_vs_fp32 > 30
    assert len(progress) == 4 and progress[0].startswith("sst-light x4 fp32 ours")
    json.dumps(report.to_dict())  # plain data all the way down


def test_compiled_ours_leaves_the_reference_path_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--compile`` compiles SST's layers in place: the reference path, timed after ours, must not run them."""
    compiled_calls: list[bool] = []  # per call of a compiled layer: was the reference path on?

    def recording(fn: Callable[..., torch.Tensor], **kw: object) -> Callable[..., torch.Tensor]:
        layer = fn.__self__  # type: ignore[attr-defined]  # a bound TransformerLayer.forward

        def run(*args: object, **kwargs: object) -> torch.Tensor:
            compiled_calls.append(layer.attn.plain)
            return fn(*args, **kwargs)

        return run

    monkeypatch.setattr(torch, "compile", recording)
    settings = BenchSettings(
        **(TINY | {"runs": 1, "warmup": 0}), precisions=("fp32",), reference=True, compile="default"
    )
    report = run_bench(settings)
    assert [r.path for r in report.results] == ["ours", "reference"]
    assert compiled_calls and not any(compiled_calls)


def test_run_bench_tiled_throughput() -> None:
    settings = BenchSettings(**(TINY | {"size": None, "runs": 1}), precisions=("fp32",), tiled=(256, 192), tile=64)
    report = run_bench(settings)
    (tiled,) = report.tiled
    assert "tiled 256x192 output, tile 64 asked (the table: what ran)" in report.protocol
    assert tiled.lr == (64, 48) and tiled.output == (256, 192)
    assert tiled.tile == 0 and tiled.overlap == 64 and tiled.tiles == 1  # 64 px tiles cover 64x48: it ran whole
    assert tiled.megapixels_per_s == pytest.approx(256 * 192 / 1e6 / tiled.median_s)


def test_cli_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["bench", "-m", "sst-light", "-s", "4", "--size", "64x48", "--runs", "1", "--warmup", "0"]
    result = runner.invoke(app, [*args, "--precision", "fp32", "--device", "cpu", "--reference", "--json", str(out)])
    assert result.exit_code == 0, result.output
    for text in ("device:", "torch:", "date:", "attention kernel: ", "sst-light", "reference speed"):
        assert text in result.output
    data = json.loads(out.read_text())
    assert [r["path"] for r in data["results"]] == ["ours", "reference"]
    # the version and the settings as data (runs, warm-up, attention were only inside the protocol sentence)
    from sst_cli import __version__

    assert data["sst_cli_version"] == __version__
    settings = data["settings"]
    assert settings["runs"] == 1 and settings["warmup"] == 0 and settings["attention"] == "auto"
    assert settings["size"] == [64, 48] and settings["models"] == ["sst-light"] and settings["reference"] is True


@pytest.mark.parametrize(
    "args,message",
    [
        (["--size", "big"], "--size must be WIDTHxHEIGHT"),
        (["--precision", "fp16"], "unknown precision 'fp16'"),
        (["--attention", "magic"], "unknown attention backend 'magic'"),
        (["--compile", "fast"], "unknown compile mode 'fast'"),
        (["--channels-last", "maybe"], "unknown --channels-last"),
        (["--model", "nope", "--size", "64x48"], "unknown model"),
    ],
)
def test_cli_refuses_bad_options(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["bench", "--device", "cpu", *args])
    assert result.exit_code == 2
    assert message in result.output and "quick defaults" not in result.output  # refused before anything else


def test_compile_takes_on_and_off_as_upscale_does() -> None:
    """``sst upscale --compile on|off`` was refused by ``sst bench --compile`` ("unknown compile mode 'on'")."""
    base = TINY | {"runs": 1, "warmup": 0}
    assert BenchSettings(**base, compile="on").compile == "default"
    assert BenchSettings(**base, compile="OFF").compile == "none"
    assert BenchSettings(**base, compile="max-autotune").compile == "max-autotune"
    with pytest.raises(ConfigError, match=r"unknown compile mode 'fast' for --compile; .*on \(= default\), off"):
        BenchSettings(**base, compile="fast")
    helped = " ".join(runner.invoke(app, ["bench", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "none (or off), default (or on)" in helped


def test_precision_auto_is_taken_and_the_json_names_what_ran(tmp_path: Path) -> None:
    """``--precision auto`` was refused by bench alone; on the CPU it is fp32, as in upscale, and said so."""
    out = tmp_path / "bench.json"
    args = ["bench", "-m", "sst-light", "-s", "2", "--size", "32x24", "--runs", "1", "--warmup", "0", "--device", "cpu"]
    result = runner.invoke(app, [*args, "--precision", "auto", "--precision", "FP32", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "--precision auto: fp32 on" in result.output
    data = json.loads(out.read_text())
    assert [r["precision"] for r in data["results"]] == ["fp32"]  # auto and fp32 are one run here
    assert data["settings"]["precisions"] == ["fp32"]
    assert any(n.startswith("--precision auto: fp32") for n in data["notices"])


def test_a_missing_weights_file_exits_1_as_in_upscale(tmp_path: Path) -> None:
    """``sst bench --weights missing.pth`` exited 2 (invalid options) where upscale, eval and compare exit 1."""
    result = runner.invoke(app, ["bench", "--device", "cpu", "--weights", str(tmp_path / "missing.pth")])
    assert result.exit_code == 1, result.output
    assert "weights file not found" in result.output and "missing.pth" in result.output
    assert "error: --weights: weights file not found" in " ".join(result.output.split())
    config = runner.invoke(app, ["bench", "--device", "cpu", "--config", str(tmp_path / "c.json")])
    assert "error: --config describes the architecture of --weights" in " ".join(config.output.split())


def test_the_weights_are_named_as_an_api_caller_gave_them(tmp_path: Path) -> None:
    """``BenchSettings(weights=...)`` was told about ``--weights`` and ``--config``, options it never typed."""
    with pytest.raises(WeightsNotFound, match=r"^weights: weights file not found: .*missing\.pth$"):
        BenchSettings(weights=str(tmp_path / "missing.pth"))
    with pytest.raises(ConfigError, match=r"^config describes the architecture of weights; give the weights too$"):
        BenchSettings(config=str(tmp_path / "c.json"))


@needs_golden
def test_an_sst_file_is_timed_in_the_architecture_model_names(tmp_path: Path) -> None:
    """SST files hold no window sizes: bench said to add --model, then refused --model beside --weights."""
    args = ["bench", "--weights", str(GOLDEN / "light_x2.pth"), "--device", "cpu", "--size", "32x24", "--runs", "1",
            "--warmup", "0", "--precision", "fp32"]  # fmt: skip
    needs = runner.invoke(app, args)
    assert needs.exit_code == 2 and "name the architecture with --model" in " ".join(needs.output.split())
    named = runner.invoke(app, [*args, "-m", "sst-light", "--json", str(tmp_path / "b.json")])
    assert named.exit_code == 0, named.output
    assert json.loads((tmp_path / "b.json").read_text())["results"][0]["model"] == "light_x2"
    two = runner.invoke(app, [*args, "-m", "sst-light", "-m", "sst"])
    assert two.exit_code == 2 and "give at most one --model" in two.output
    matching = runner.invoke(app, [*args, "-m", "sst-light", "-s", "2", "-s", "2"])
    assert matching.exit_code == 0, matching.output
    scaled = runner.invoke(app, [*args, "-m", "sst-light", "-s", "4"])
    assert scaled.exit_code == 2 and "holds x2 weights but x4 was requested" in " ".join(scaled.output.split())
    several = runner.invoke(app, [*args, "-m", "sst-light", "-s", "2", "-s", "4"])
    assert several.exit_code == 2 and "--weights holds one scale: give at most one --scale" in several.output
    untiled = runner.invoke(app, [*args, "-m", "sst-light", "--tile", "64"])
    assert untiled.exit_code == 2 and "--tile sets the tiles of a --tiled run" in untiled.output


def test_a_json_another_run_wrote_meanwhile_is_not_replaced_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `sst bench --json` at once: the later silently replaced the earlier's file, both exiting 0."""
    from sst_cli import bench

    out = tmp_path / "bench.json"
    original = bench.run_bench

    def racing(*args: object, **kwargs: object) -> object:
        out.write_text("theirs")  # another run, meanwhile
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bench, "run_bench", racing)
    args = ["bench", "-m", "sst-light", "-s", "2", "--size", "32x24", "--runs", "1", "--warmup", "0", "--device", "cpu"]
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 1 and "written while this run worked" in result.output, result.output
    assert out.read_text() == "theirs"
