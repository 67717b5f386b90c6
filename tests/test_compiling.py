"""``--compile``: compiled == eager on the CPU, a second process hits the cache, failures fall back to eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from compile_child import tiny_sst
from typer.testing import CliRunner

from sst_cli import Upscaler
from sst_cli import upscaler as upscaler_module
from sst_cli.cli import app
from sst_cli.compiling import AUTO_COMPILE_MEGAPIXELS, compile_cache_dir, compile_network, wants_compile
from sst_cli.errors import ConfigError
from sst_cli.options import UpscaleOptions
from sst_cli.runtime import package_version

CHILD = Path(__file__).with_name("compile_child.py")
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_auto_compiles_only_long_batches_on_cuda() -> None:
    assert not wants_compile("auto", CUDA, AUTO_COMPILE_MEGAPIXELS - 1)
    assert wants_compile("auto", CUDA, AUTO_COMPILE_MEGAPIXELS)
    assert not wants_compile("auto", CPU, 1e9)
    assert wants_compile("on", CPU, 0) and not wants_compile("off", CUDA, 1e9)


def test_cache_folder_is_keyed_by_versions_unless_the_user_chose_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ours = compile_cache_dir()
    assert ours.parent == tmp_path / "sst-cli" / "compile"
    assert package_version() in ours.name and torch.__version__.replace("+", "_") in ours.name
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache_dir() == tmp_path / "mine"
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    cache_dir()  # what importing torchvision does: torch writes its /tmp default into the variable
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] and compile_cache_dir() == ours  # not taken for the user's choice


def test_unknown_choice_is_an_option_error() -> None:
    with pytest.raises(ConfigError, match="unknown compile choice 'fast'"):
        Upscaler(tiny_sst(), compile="fast")
    result = CliRunner().invoke(app, ["upscale", "x.png", "--compile", "fast"])
    assert result.exit_code == 2 and "unknown compile choice 'fast'" in result.output


def _eager(image: torch.Tensor) -> torch.Tensor:
    return Upscaler(tiny_sst(), tile=16, tile_overlap=8, compile="off").run(image).image


def test_missing_compiler_runs_eager_with_one_notice() -> None:
    from torch._inductor import config

    image = torch.rand(3, 24, 24)
    said: list[str] = []
    up = Upscaler(tiny_sst(), tile=16, tile_overlap=8, compile="on", on_message=said.append)
    with config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        assert torch.equal(up.run(image).image, _eager(image))
    notices = [s for s in said if "compile" in s]
    assert notices == ["--compile: no C++ compiler '/nonexistent/g++' found (install g++ or set CXX); running eager"]


def test_failing_compile_runs_eager_with_one_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        def run(*args: object, **kwargs: object) -> torch.Tensor:
            raise RuntimeError("C++ compile error\ncc1plus: fatal error")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    image = torch.rand(3, 24, 24)
    said: list[str] = []
    up = Upscaler(tiny_sst(), tile=16, tile_overlap=8, compile="on", on_message=said.append)
    assert torch.equal(up.run(image).image, _eager(image))
    assert said[-1] == "torch.compile failed (RuntimeError: C++ compile error); running eager"
    assert len([s for s in said if "failed" in s]) == 1  # said once, not per tile
    assert up.compiled is not None and up.compiled.eager


def test_sst_compiles_layer_by_layer_in_place_and_undo_makes_it_eager(dynamo_only: list[object]) -> None:
    compiled = dynamo_only
    model = tiny_sst()
    model.set_attention_backend("sdpa")  # as Upscaler._prime does on the CPU: the C kernel would break graphs
    layers = model.compile_regions()
    x = torch.rand(1, 3, 16, 16)
    with torch.inference_mode():
        expected = model(x)
        ready, undo = compile_network(model)
        assert ready is model and [getattr(fn, "__self__", None) for fn in compiled] == layers
        assert all("forward" in vars(layer) for layer in layers)
        assert torch.allclose(model(x), expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
        undo()
    assert all("forward" not in vars(layer) for layer in layers)


@pytest.mark.usefixtures("dynamo_only")
def test_a_network_without_regions_is_compiled_whole() -> None:
    plain = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3, padding=1))
    ready, _ = compile_network(plain)
    assert ready is not plain and ready._orig_mod is plain  # type: ignore[union-attr]
    model = tiny_sst()
    model.repeated_block = None  # what bench_compile.py's "whole" variant does
    assert compile_network(model)[0] is not model


def test_auto_waits_for_the_batch_to_be_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upscaler_module, "wants_compile", lambda choice, device, mp: choice == "auto" and mp >= 10)
    up = Upscaler(tiny_sst(), compile="auto")
    assert up.compiled is None
    up.expect(5.0)
    assert up.compiled is None
    up.expect(20.0)
    assert up.compiled is not None


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """The same tiled run compiled in two fresh processes sharing one empty cache folder."""
    cache = tmp_path_factory.mktemp("inductor")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(CHILD)], env=env, capture_output=True, text=True, timeout=900, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs[0], runs[1]


def test_compiled_equals_eager_on_the_cpu(two_processes: tuple[dict, dict]) -> None:
    """fp32 both ways; inductor fuses and vectorises (reductions in another order, no fast-math), so outputs
    agree to rounding: 1e-5 of the output's range is ~100 float32 ulps over this network's ~30 ops in a row."""
    first, _ = two_processes
    assert first["compiled"], first["messages"]
    assert first["max_abs_diff"] <= 1e-5 * first["max_abs"]
    compiling = [m for m in first["messages"] if "compil" in m]
    assert compiling[0].startswith("compiling the network for cpu") and compiling[1].startswith("compiled in ")
    assert first["misses"] > 0


def test_layers_alike_share_one_compiled_graph(two_processes: tuple[dict, dict]) -> None:
    """Four transformer layers, two kinds (windows 4 and 8): two graphs, each compiled once for both blocks."""
    first, _ = two_processes
    assert first["layers"] == 4 and first["graphs"] == 2


def test_a_second_process_hits_the_cache(two_processes: tuple[dict, dict]) -> None:
    first, second = two_processes
    assert second["compiled"] and second["misses"] == 0 and second["hits"] >= first["misses"]
    assert second["max_abs_diff"] == first["max_abs_diff"]


def test_start_up_does_not_import_the_compiler() -> None:
    """``torch.compiler.disable`` at import time loaded torch._dynamo (~3.5 s); runs that never compile skip it."""
    code = "import sys, sst_cli.cli.upscale, sst_cli.batch, sst_cli.upscaler; print('torch._dynamo' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "False"


def test_prepare_tracing_hides_the_eager_only_functions_from_dynamo() -> None:
    from sst_cli.archs import attention, cpu_kernel
    from sst_cli.archs.tracing import prepare_tracing

    prepare_tracing()
    for marked in (cpu_kernel.cpu_attention, attention._resolve):
        assert marked.run is not marked.fn  # type: ignore[attr-defined]
        assert getattr(marked.run, "_torchdynamo_disable", False)


def test_a_batch_announces_the_megapixels_it_will_compute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from PIL import Image

    from sst_cli.batch import Naming, discover_inputs, run_batch

    monkeypatch.chdir(tmp_path)
    Path("in").mkdir()
    for name, size in (("a.png", (40, 30)), ("b.png", (20, 10))):
        Image.fromarray(np.zeros((size[1], size[0], 3), dtype=np.uint8)).save(Path("in") / name)
    Path("in/broken.png").write_bytes(b"not an image")
    up = Upscaler(tiny_sst(), compile="auto")
    announced: list[float] = []
    monkeypatch.setattr(up, "expect", announced.append)
    run_batch(discover_inputs(["in"]), up, naming=Naming(model="tiny", scale=2, folder=Path("out")))
    assert announced == [pytest.approx((40 * 30 + 20 * 10) / 1e6)]


def test_a_position_dependent_network_stays_eager_and_says_so_once() -> None:
    import torch.nn.functional as F

    from sst_cli.archs import ModelDescriptor, SRNetwork

    class Positional(SRNetwork):
        def describe(self) -> ModelDescriptor:
            return ModelDescriptor("POS", 2, position_dependent=True)

        def activation_bytes(self, height: int, width: int, dtype: torch.dtype = torch.float32) -> int:
            return height * width

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(x, scale_factor=2, mode="nearest")

    said: list[str] = []
    up = Upscaler(Positional(), compile="on", on_message=said.append)
    up.expect(100.0)
    assert up.compiled is None and up.run(torch.rand(3, 8, 8)).image.shape == (3, 16, 16)
    assert said == ["compile='on': this network's output depends on tile positions, which compiling would fix; eager"]
    said.clear()
    on = Upscaler(Positional(), options=UpscaleOptions(compile="on", cli=True), on_message=said.append)
    on.expect(100.0)  # from the command line, the option as it spells it
    assert said == ["--compile: this network's output depends on tile positions, which compiling would fix; eager"]
