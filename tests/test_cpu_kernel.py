"""sst-cli's own CPU attention kernel: numerics against float64, building, caching, refusing a bad build."""

from __future__ import annotations

import math
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sst_cli.archs import attention, cpu_kernel
from sst_cli.archs.attention import attend, plan_attention
from sst_cli.archs.cpu_kernel import cpu_attention, kernel_problem, kernel_vector

needs_native = pytest.mark.skipif(kernel_problem() is not None, reason=f"no CPU kernel here: {kernel_problem()}")


pytestmark = pytest.mark.usefixtures("fresh_plans")


@pytest.fixture
def fresh_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty kernel cache and no loaded library; the session's library is restored afterwards."""
    monkeypatch.setenv("SST_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    cpu_kernel._library.cache_clear()
    yield tmp_path / "kernels"
    cpu_kernel._library.cache_clear()
    monkeypatch.undo()
    attention.reset_attention_plans()


def _exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: tuple | None = None) -> torch.Tensor:
    if bias is not None:
        n = q.shape[0]
        q = torch.cat([q, bias[0].expand(n, -1, -1, -1)], -1)
        k = torch.cat([k, bias[1].expand(n, -1, -1, -1)], -1)
    return torch.softmax(q.double() @ k.double().transpose(-1, -2), -1) @ v.double()


def _inputs(batch: int, heads: int, tokens: int, d: int, rank: int, dv: int, seed: int, scale: float = 1.5) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, heads, tokens, d, generator=gen) for _ in range(2))
    v = torch.randn(batch, heads, tokens, dv, generator=gen)
    bias = None
    if rank:
        bias = (
            torch.randn(heads, tokens, rank, generator=gen) * rank**-0.5 * scale,
            torch.randn(heads, tokens, rank, generator=gen) * scale,
        )
    return q * d**-0.5 * scale, k, v, bias


@needs_native
@pytest.mark.parametrize(
    "batch,heads,tokens,d,rank,dv",
    [
        (3, 2, 64, 16, 24, 16),  # SST-light's head sizes
        (2, 6, 256, 30, 34, 30),  # SST's: v rounded up to 32
        (1, 3, 100, 13, 5, 13),  # one window; keys not a multiple of 16; rows not a multiple of 6
        (40, 2, 16, 8, 4, 8),  # many small windows: windows grouped under one bias block
        (2, 1, 37, 9, 0, 6),  # no shared factors
        (1, 2, 600, 12, 6, 20),  # several query blocks and key blocks, the last ones partial
        (5, 1, 3, 4, 2, 3),  # fewer keys than one tile
    ],
)
def test_native_matches_float64_attention(batch: int, heads: int, tokens: int, d: int, rank: int, dv: int) -> None:
    q, k, v, bias = _inputs(batch, heads, tokens, d, rank, dv, seed=tokens + rank)
    out = cpu_attention(q, k, v, bias)
    width = -(-dv // kernel_vector()) * kernel_vector()  # 8 floats a vector (AVX2, NEON) or 16 (AVX-512)
    assert out.shape == (batch, heads, tokens, width) and out.dtype == torch.float32
    assert (out[..., dv:] == 0).all()
    assert (out[..., :dv].double() - _exact(q, k, v, bias)).abs().max().item() <= 5e-6
    through_room = attend(q, k, v, "native", bias=bias)  # the attention room slices and casts back
    assert torch.equal(through_room, out[..., :dv])


@needs_native
def test_large_logits_stay_finite_and_exact() -> None:
    """The online softmax subtracts running maxima: logits in the hundreds neither overflow nor lose the answer."""
    q, k, v, bias = _inputs(2, 2, 150, 8, 4, 8, seed=1, scale=40.0)
    out = cpu_attention(q, k, v, bias)[..., :8]
    assert torch.isfinite(out).all()
    expected = _exact(q, k, v, bias)
    # The bound float32 allows here: each logit is a sum of d + rank products (the RIB part may be summed apart
    # and added, one rounding more), so it is off by at most gamma * sum|q_c k_c| with gamma = (d + rank + 1) u;
    # a logit error of delta moves the softmax weights by a factor within exp(+-2 delta), hence the output by at
    # most (exp(2 delta) - 1) max|v|. With logits near 9000 that is a few 1e-2 while a lost maximum or a wrong
    # sum is off by O(1) or not finite. (A bound relative to SDPA's error does not hold: with one thread the
    # kernel shares the RIB product across windows, a different rounding from SDPA's single dot product.)
    q_all = torch.cat([q, bias[0].expand(q.shape[0], -1, -1, -1)], -1).double()
    k_all = torch.cat([k, bias[1].expand(k.shape[0], -1, -1, -1)], -1).double()
    gamma = (q_all.shape[-1] + 1) * 2.0**-24
    delta = gamma * (q_all.abs() @ k_all.abs().transpose(-1, -2)).max().item()
    assert (out.double() - expected).abs().max().item() <= math.expm1(2 * delta) * v.abs().max().item()


@needs_native
def test_the_result_does_not_depend_on_the_thread_count() -> None:
    q, k, v, bias = _inputs(7, 3, 200, 16, 8, 16, seed=2)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_attention(q, k, v, bias)
        torch.set_num_threads(3)
        three = cpu_attention(q, k, v, bias)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, three)  # each output row is computed by one thread, in one order


@needs_native
def test_auto_on_the_cpu_runs_it_in_fp32_only() -> None:
    plan = plan_attention("auto", "cpu", torch.float32, 64, 30, rank=34)
    assert (plan.kernel, plan.qk_width, plan.v_width, plan.rank, plan.notice) == ("native", 30, 32, 34, None)
    assert plan.sizes == "64/30 -> 64/32"
    assert plan.label.startswith("sst-cli CPU kernel (C, built by ") and plan.label.endswith(", fp32)")
    assert plan_attention("auto", "cpu", torch.float32, 40, 16).kernel == "native"  # no factors declared
    assert plan_attention("auto", "cpu", torch.bfloat16, 40, 16, rank=24).kernel == "sdpa"  # bf16: padded SDPA
    bf16 = plan_attention("native", "cpu", torch.bfloat16, 40, 16, rank=24)
    assert bf16.kernel == "sdpa" and bf16.notice is not None  # what auto runs in bf16 (padded SDPA measured faster)
    assert plan_attention("native", "cpu", torch.float32, 40, 16, rank=24).kernel == "native"
    assert bf16.notice.startswith("attention: native computes in fp32 only, not bf16; using PyTorch SDPA")
    assert "native is a CPU kernel" in (plan_attention("native", "meta", torch.float32, 40, 16).notice or "")


@needs_native
def test_training_runs_fused_sdpa_instead_of_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C kernel has no backward pass: under autograd, SDPA with the factors appended (never the masked
    kernel, whose mask needing gradients sent SDPA to its unfused math path)."""
    monkeypatch.setattr(attention, "_sdpa_bias", lambda *a: pytest.fail("the masked kernel ran under autograd"))
    monkeypatch.setattr(attention, "cpu_attention", lambda *a, **k: pytest.fail("the C kernel ran under autograd"))
    for d, rank in ((8, 12), (8, 4)):
        q, k, v, bias = _inputs(2, 2, 32, d, rank, 8, seed=3)
        q.requires_grad_(True)
        out = attend(q, k, v, "native", bias=bias)
        out.sum().backward()
        assert q.grad is not None and torch.isfinite(q.grad).all()
        assert (out.detach().double() - _exact(q.detach(), k, v, bias)).abs().max().item() <= 5e-6


def test_without_a_compiler_the_room_says_why_and_uses_sdpa(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(fresh_build / "no-such-compiler"))
    assert kernel_problem() == "no C compiler found (set CC, or install gcc or clang)"
    assert "native" not in attention.available_backends()
    assert plan_attention("auto", "cpu", torch.float32, 40, 16, rank=24).kernel == "sdpa-bias"  # silently
    plan = plan_attention("native", "cpu", torch.float32, 40, 16, rank=24)
    assert plan.notice == (
        "attention: native unavailable: no C compiler found (set CC, or install gcc or clang); using PyTorch SDPA"
        " (CPU flash kernel, fp32, positional factors as a bias per query block)"
    )
    with pytest.raises(RuntimeError, match="the CPU attention kernel is unavailable: no C compiler found"):
        cpu_attention(*_inputs(1, 1, 16, 4, 0, 4, seed=0)[:3])


def _script(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_failing_compiler_is_reported_with_its_first_error(
    fresh_build: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cc = _script(fresh_build.parent / "bin" / "cc", 'echo "fatal error: out of cheese" >&2; exit 1\n')
    monkeypatch.setenv("CC", cc)
    assert kernel_problem() == "compiling cpu_attention.c with cc failed: fatal error: out of cheese"
    assert not list(fresh_build.glob("*.so"))  # nothing half-written left in the cache


@needs_native
def test_a_build_is_compiled_once_and_then_loaded_from_the_cache(
    fresh_build: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiles = []
    real = cpu_kernel._compile
    monkeypatch.setattr(cpu_kernel, "_compile", lambda *a: compiles.append(1) or real(*a))
    assert kernel_problem() is None
    assert len(compiles) == 1 and len(list(fresh_build.glob("*.so"))) == 1
    cpu_kernel._library.cache_clear()  # a new process
    assert kernel_problem() is None and len(compiles) == 1


def _counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    compiles: list[int] = []
    real = cpu_kernel._compile
    monkeypatch.setattr(cpu_kernel, "_compile", lambda *a: compiles.append(1) or real(*a))
    return compiles


def _swap(library: Path, data: bytes) -> None:
    """Replace the file, as ``mv`` does: this process has the old one mapped, and changing it in place is SIGBUS."""
    library.with_suffix(".new").write_bytes(data)
    os.replace(library.with_suffix(".new"), library)


def _built(fresh_build: Path) -> Path:
    assert kernel_problem() is None
    (library,) = fresh_build.glob("*.so")
    cpu_kernel._library.cache_clear()  # a new process
    return library


@needs_native
def test_a_cut_short_kernel_is_rebuilt_never_loaded(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build cut short by a crash made every run die with SIGBUS in dlopen: its own process, for that."""
    library = _built(fresh_build)
    whole = library.read_bytes()
    _swap(library, whole[:1000])
    out, err = _child(fresh_build).communicate(timeout=300)
    assert out.strip() == "None", err[-2000:]
    assert library.stat().st_size == len(whole)


def _child(fresh_build: Path) -> subprocess.Popen:
    """A process of its own that asks for the kernel (and so builds it, if no good one is cached)."""
    return subprocess.Popen(
        [sys.executable, "-c", "from sst_cli.archs.cpu_kernel import kernel_problem; print(kernel_problem())"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SST_KERNEL_CACHE": str(fresh_build), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


@needs_native
def test_two_processes_building_at_once_both_get_a_good_kernel(fresh_build: Path) -> None:
    children = [_child(fresh_build) for _ in range(2)]
    results = [(child.wait(timeout=300), child.communicate()) for child in children]
    assert [(rc, out.strip()) for rc, (out, _) in results] == [(0, "None")] * 2, results
    assert kernel_problem() is None


@needs_native
def test_a_garbled_kernel_is_rebuilt_not_given_up(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    library = _built(fresh_build)
    compiles = _counting_compiles(monkeypatch)
    _swap(library, b"garbage\n")
    assert kernel_problem() is None and len(compiles) == 1
    cpu_kernel._library.cache_clear()
    assert kernel_problem() is None and len(compiles) == 1  # the rebuilt one is kept


@needs_native
def test_a_damaged_kernel_that_cannot_be_rebuilt_says_why(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Auto falls back to SDPA silently: the -v line is where the reason shows."""
    library = _built(fresh_build)
    size = library.stat().st_size
    _swap(library, b"garbage\n")
    monkeypatch.setattr(cpu_kernel, "_compile", lambda *a: "error: no room")
    problem = kernel_problem()
    assert problem is not None and problem.endswith(
        f"failed: error: no room (rebuilding: {library} is damaged (8 bytes, not the {size} built))"
    )
    report = attention.describe_attention("auto", "cpu", torch.float32, [(9, 6)])
    assert report.line.endswith(f" (sst-cli CPU kernel off: {problem})")


@needs_native
def test_leftovers_of_killed_builds_are_removed_after_an_hour(fresh_build: Path) -> None:
    fresh_build.mkdir()
    old, recent = fresh_build / "tmpab_cd123.so", fresh_build / "tmpzz_yy987.so"
    for path in (old, recent):
        path.write_bytes(b"half a build")
    os.utime(old, (1e9, 1e9))
    assert kernel_problem() is None
    assert not old.exists() and recent.exists()  # a build in progress elsewhere is left alone


@needs_native
def test_a_good_kernel_in_a_read_only_cache_is_used_not_rebuilt(
    fresh_build: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _built(fresh_build)
    compiles = _counting_compiles(monkeypatch)
    usable = cpu_kernel._usable
    monkeypatch.setattr(cpu_kernel, "_usable", lambda folder, private: private and usable(folder, private))
    assert kernel_problem() is None and compiles == []
    assert not list((fresh_build.parent / "tmp").glob("*/*.so"))


@needs_native
def test_a_build_that_computes_wrong_numbers_is_refused(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_kernel, "_reference", lambda q, k, v: torch.zeros(q.shape[:-1] + v.shape[-1:]).double())
    problem = kernel_problem()
    assert problem is not None and problem.startswith("the compiled CPU kernel failed its self-test (max error")
    assert plan_attention("auto", "cpu", torch.float32, 40, 16, rank=24).kernel == "sdpa-bias"


@needs_native
def test_the_reference_path_runs_pytorch_sdpa_not_the_native_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sst bench --reference`` stands for the authors' code, which has no such kernel."""
    from sst_cli import SST, SSTConfig
    from sst_cli.archs.sst.layers import reference_path

    cfg = SSTConfig(dim=12, window_sizes=(4, 8), num_heads=2, ranks=(4, 4), n_blocks=1, upscaling_factor=2)
    model = SST(**cfg.to_kwargs()).eval()
    x = torch.rand(1, 3, 16, 16)
    with torch.inference_mode():
        ours = model(x)
        monkeypatch.setattr(attention, "cpu_attention", lambda *a, **k: pytest.fail("the reference ran native"))
        with reference_path(model):
            reference = model(x)
    assert (ours - reference).abs().max().item() <= 1e-5


def _unwritable_cache(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache folder that cannot be created (as under a read-only home; chmod does not stop root)."""
    (fresh_build.parent / "file").write_text("not a folder")
    monkeypatch.setattr(cpu_kernel, "_cache_dir", lambda: fresh_build.parent / "file" / "kernels")


@needs_native
def test_an_unwritable_cache_builds_in_a_private_temp_folder(
    fresh_build: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _unwritable_cache(fresh_build, monkeypatch)
    assert kernel_problem() is None
    built = list((fresh_build.parent / "tmp").glob("sst-cli-kernels-*/*.so"))
    assert len(built) == 1 and stat.S_IMODE(built[0].parent.stat().st_mode) == 0o700


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="user ids are POSIX")
def test_the_temp_folder_is_named_by_user_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids without a name (containers) were all "user": the second one found the first one's folder."""
    import getpass

    monkeypatch.setattr(getpass, "getuser", lambda: "user")
    assert cpu_kernel._temp_folder().name == f"sst-cli-kernels-{os.getuid()}"


def test_a_temp_folder_others_can_write_is_not_used(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = cpu_kernel._temp_folder()
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # e.g. planted by another user: never load from or build into it
    _unwritable_cache(fresh_build, monkeypatch)
    problem = kernel_problem()
    assert problem is not None and problem.startswith("no writable folder to build the kernel in (")


# Builds of other vector widths than this machine's own: the portable baseline (8 floats), and on an AVX-512
# machine the AVX2 build that most x86 users run (8 floats), beside -march=native (16 floats there).
_WIDTHS = [[], ["-march=native"], ["-march=native", "-mno-avx512f"]]


@pytest.mark.parametrize("arch", _WIDTHS, ids=["baseline", "native", "native-no-avx512"])
def test_the_kernel_is_exact_and_clean_under_address_and_undefined_behaviour_sanitizers(
    tmp_path: Path, arch: list[str]
) -> None:
    compiler = cpu_kernel._compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    harness = Path(__file__).with_name("sanitize_cpu_kernel.c")
    binary = tmp_path / "sanitize"
    flags = ["-O1", "-g", "-std=gnu11", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-pthread"]
    build = subprocess.run(
        [*compiler, *flags, *arch, str(cpu_kernel.SOURCE), str(harness), "-o", str(binary), "-lm"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if build.returncode != 0:
        pytest.skip(f"this compiler cannot build with sanitizers: {build.stderr.strip()[:200]}")
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300, check=False)
    assert (run.returncode, run.stdout.strip()) == (0, "ok"), run.stderr[-2000:]


@needs_native
def test_cc_may_carry_a_wrapper_and_flags(fresh_build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``CC="ccache gcc"`` style: split like a shell would; the wrapper runs the real compiler."""
    real = cpu_kernel._compiler()
    assert real is not None
    wrapper = _script(fresh_build.parent / "bin" / "wrap", 'shift; exec "$@"\n')  # drops its marker argument
    monkeypatch.setenv("CC", f"{wrapper} --marker {real[0]}")
    assert kernel_problem() is None


@needs_native
def test_a_first_run_says_it_builds_the_kernel_and_times_it(fresh_build: Path) -> None:
    from conftest import tiny_sst

    from sst_cli import Upscaler

    said: list[str] = []
    up = Upscaler(tiny_sst(), device="cpu", attention="auto", on_message=said.append)
    assert [s for s in said if "building sst-cli's CPU attention kernel" in s] != []  # a silent pause of seconds
    assert "kernel" in up.phases.seconds and up.phases.seconds["kernel"] > 0
    said.clear()
    cpu_kernel._library.cache_clear()  # a new process: the cached build is loaded, without a word
    Upscaler(tiny_sst(), device="cpu", attention="auto", on_message=said.append)
    assert not [s for s in said if "building" in s]
