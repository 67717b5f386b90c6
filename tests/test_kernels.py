"""SST's fused Triton kernels (``sst_cli/archs/sst/kernels.py``): exactness under Triton's interpreter on the CPU,
the meta device's view of them (memory traffic), where they run, and the fall-back when one fails."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sst_cli import SST
from sst_cli.archs.sst import kernels

CHILD = Path(__file__).with_name("kernels_child.py")
TINY = {"dim": 16, "window_sizes": (4, 8), "num_heads": (2, 4), "ranks": (3, 5), "n_blocks": 2}
needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed (pip install -e '.[gpu]')"
)


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """Every interpreter case, run once in a child process (TRITON_INTERPRET must precede importing triton)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(CHILD)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["cases"]


FP32_FFN = ["ffn-1x1-fp32", "ffn-3x5-batch2-fp32-rows", "ffn-9x19-c70-fp32-channels_last", "ffn-9x19-c70-fp32-nchw"]
BF16 = [
    "ffn-3x5-batch2-bf16-rows",
    "ffn-9x19-c70-bf16-channels_last",
    "merge-bf16",
    "partition-fp32-into-bf16",
    "partition-bf16",
]
FP32_MERGE = ["merge-fp32-shift0-channels_last", "merge-fp32-shift2-nchw", "merge-bf16-windows-in-fp32"]


@needs_triton
@pytest.mark.parametrize("case", FP32_FFN)
def test_ffn_kernel_in_fp32_matches_float64(interpreted: dict, case: str) -> None:
    """Odd sizes (1x1, 3x5, 9 rows x 19 columns), 70 channels (two blocks, not a power of two), batch 2, NCHW,
    channels-last and the FFN's real (pixels, C + 8) destination; values up to ~12, as in the golden networks."""
    result = interpreted[case]
    assert result["ran"]
    assert result["max_abs_vs_float64"] < 5e-6, result
    assert result["max_abs_vs_plain"] < 5e-6, result  # the plain fp32 steps (PyTorch's GELU and conv)


@needs_triton
@pytest.mark.parametrize("case", FP32_MERGE)
def test_merge_kernel_is_roll_crop_and_sigmoid_gate(interpreted: dict, case: str) -> None:
    result = interpreted[case]
    assert result["ran"]
    assert result["max_abs_vs_float64"] < 1e-6, result


PARTITION = ["partition-fp32-shift0-channels_last", "partition-fp32-shift2-nchw", "partition-fp32-shift2-pad3"]


@needs_triton
@pytest.mark.parametrize("case", PARTITION)
def test_partition_kernel_is_reflect_pad_roll_and_windows(interpreted: dict, case: str) -> None:
    """Odd sizes padded in both directions (by up to 3 rows), shifted and not, NCHW and channels-last: the
    plain ``partition_into``'s values, q scaled, and the channels past the content left alone."""
    result = interpreted[case]
    assert result["ran"] and result["tails_untouched"], result
    assert result["max_abs_vs_float64"] < 1e-6, result
    assert result["max_abs_vs_plain"] == 0, result  # one fp32 multiply, as torch.mul: the same bits


@needs_triton
@pytest.mark.parametrize("case", BF16)
def test_bf16_kernels_round_once(interpreted: dict, case: str) -> None:
    """Accumulated in fp32, rounded once to bf16, against float64 from the same bf16 inputs. The interpreter
    (Triton 3.9) truncates fp32 -> bf16 where the GPU rounds to nearest, so the bound here is one bf16 step
    (2**-7 of the value) plus fp32's own error, not half a step."""
    result = interpreted[case]
    assert result["ran"]
    assert result["excess_over_one_bf16_step"] < 1e-5, result


@needs_triton
@pytest.mark.parametrize("case", ["model-tiny", "model-shifted"])
def test_whole_forward_through_the_kernels_matches_the_reference_path(interpreted: dict, case: str) -> None:
    """A tiny SST (odd input 13x10, batch 2; plain and shifted windows) with every FFN middle, every gated merge
    and every window partition in the kernels: no GELU or sigmoid left as separate ops, and the reference path's
    output."""
    result = interpreted[case]
    assert result["ffn_kernel_calls"] == result["layers"] == result["merge_kernel_calls"], result
    assert result["partition_kernel_calls"] == 3 * result["layers"], result  # q, k and v
    assert result["gelu_calls"] == 0 and result["sigmoid_calls"] == 0, result
    assert result["max_abs_vs_plain"] < 2e-5, result


@needs_triton
def test_the_check_before_first_use_turns_a_wrong_kernel_off(interpreted: dict) -> None:
    result = interpreted["self-check"]
    assert result["clean"] == {"torch.float32": "", "torch.bfloat16": ""}, result
    assert not result["ran_wrong_kernel"] and not result["enabled_after"], result
    assert len(result["warnings"]) == 1 and "FFN kernel differs from PyTorch" in result["warnings"][0], result


@needs_triton
def test_kernels_compile_for_an_h100_without_a_gpu(tmp_path: Path) -> None:
    """Triton's compiler and bundled ptxas, target sm_90: what the interpreter cannot catch (it runs the kernels
    as Python). Whether they are fast, and right on the chip, stays for a GPU (benchmarks/gpu_kernels.py)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update({"TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"})
    done = subprocess.run([sys.executable, str(CHILD), "compile"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert len(results) == 9 and all(v == "ok" for v in results.values()), results


class _Writes(TorchDispatchMode):
    """(op name, bytes written) for every op, as ``../shared/bench/traffic.py`` counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name.endswith("_") and args and isinstance(args[0], torch.Tensor):
            self.ops.append((name, args[0].numel() * args[0].element_size()))
        return out


@needs_triton
def test_meta_sees_each_kernel_as_one_op_writing_one_tensor() -> None:
    torch.manual_seed(0)
    model = SST(**TINY, upscaling_factor=2).eval().to("meta")
    x = torch.empty(1, 3, 16, 24, device="meta")
    with torch.inference_mode(), _Writes() as writes:
        model(x)
    ffn = [b for name, b in writes.ops if name == "dwconv3x3_gelu_residual_"]
    merge = [b for name, b in writes.ops if name == "merge_windows_gated_"]
    partition = [b for name, b in writes.ops if name == "partition_windows_"]
    hidden = model.config.ffn_hidden
    assert ffn == [hidden * 16 * 24 * 4] * 4  # one fp32 hidden tensor per layer
    assert merge == [TINY["dim"] * 16 * 24 * 4] * 4
    assert partition == [TINY["dim"] * 16 * 24 * 4] * 12  # q, k and v per layer: their content channels


def test_cpu_runs_the_plain_steps() -> None:
    """Outside the interpreter the CPU never reaches the kernels, and calling one there says why."""
    if kernels.interpreting():
        pytest.skip("TRITON_INTERPRET is set in this process")
    x = torch.zeros(1, 4, 3, 3)
    assert not kernels.runs_kernels(x)
    assert not kernels.ffn_middle(torch.empty_like(x), x, torch.nn.Conv2d(4, 4, 3, padding=1, groups=4))
    with pytest.raises(RuntimeError, match="interpreter"):
        torch.ops.sst.dwconv3x3_gelu_residual_(torch.empty_like(x), x, torch.zeros(4, 1, 3, 3), torch.zeros(4))


@needs_triton
def test_disabled_turns_the_kernels_off_on_meta_too() -> None:
    x = torch.empty(1, 4, 3, 3, device="meta")
    assert kernels.runs_kernels(x)
    with kernels.disabled():
        assert not kernels.runs_kernels(x)
    assert kernels.runs_kernels(x)


def test_a_failing_kernel_warns_once_and_the_plain_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU outside the interpreter each op refuses to run: as a kernel that fails to compile would."""
    if kernels.interpreting():
        pytest.skip("TRITON_INTERPRET is set in this process")
    monkeypatch.setitem(kernels._state, "enabled", True)
    monkeypatch.setattr(kernels, "runs_kernels", lambda x: kernels._state["enabled"])
    torch.manual_seed(0)
    model = SST(**TINY, upscaling_factor=2).eval()
    x = torch.rand(1, 3, 13, 10)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="plain PyTorch path") as caught:
        fused = model(x)
    assert len([w for w in caught if "Triton" in str(w.message)]) == 1
    assert not kernels._state["enabled"]
    with torch.no_grad(), model.reference_path():
        plain = model(x)
    torch.testing.assert_close(fused, plain, atol=2e-5, rtol=0)


@needs_triton
def test_sst_fused_kernels_0_turns_them_off() -> None:
    code = (
        "import torch\nfrom sst_cli.archs.sst import kernels\n"
        "print(kernels.runs_kernels(torch.empty(0, device='meta')))"
    )
    for value, expected in (("0", "False"), ("1", "True")):
        env = {**os.environ, "SST_FUSED_KERNELS": value}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == expected, done.stderr[-2000:]
