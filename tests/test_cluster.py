"""The batch on a local Ray (2 CPUs), against one process: same bytes, failures by file, resume by skipping.
Skipped where Ray is not installed (the optional extra ray)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import GOLDEN, needs_golden
from PIL import Image

from sst_cli.batch import WriteOptions, upscale_files
from sst_cli.errors import ConfigError
from sst_cli.loader import ModelSpec
from sst_cli.upscaler import UpscaleOptions

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

from sst_cli.cluster import RayOptions, upscale_files_ray  # noqa: E402

pytestmark = needs_golden
SPEC = ModelSpec(weights=str(GOLDEN / "mini_x3.pth"), config=str(GOLDEN / "mini_x3.json"))
OPTIONS = UpscaleOptions(device="cpu")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="1 or more"):
        RayOptions(actors=0)


def test_ray_batch_matches_one_process(tmp_path: Path, local_ray: None) -> None:
    rng = np.random.default_rng(3)
    (tmp_path / "in").mkdir()
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(tmp_path / "in" / f"q{i}.png")
    (tmp_path / "in" / "broken.png").write_bytes(b"not an image")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each actor (one CPU each): sums depend on the thread count
    try:
        single = upscale_files(
            [str(tmp_path / "in")], tmp_path / "one", model=SPEC, options=OPTIONS, writing=WriteOptions()
        )
    finally:
        torch.set_num_threads(threads)
    (tmp_path / "two").mkdir()
    kept = tmp_path / "two" / "q0_mini_x3_x3.png"
    kept.write_bytes(b"earlier run")
    writing = WriteOptions(skip_existing=True)
    result = upscale_files_ray(
        [str(tmp_path / "in")], tmp_path / "two", model=SPEC, options=OPTIONS, writing=writing, ray_options=RayOptions()
    )
    assert (single.done, single.failed) == (4, 1)
    assert (result.done, result.skipped, result.failed) == (3, 1, 1)
    assert [r.source.name for r in result.failures] == ["broken.png"]
    assert kept.read_bytes() == b"earlier run"
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
    for name in ("q1_mini_x3_x3.png", "q2_mini_x3_x3.png", "q3_mini_x3_x3.png"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    again = upscale_files_ray(
        [str(tmp_path / "in")], tmp_path / "two", model=SPEC, options=OPTIONS, writing=writing, ray_options=RayOptions()
    )
    assert (again.done, again.skipped, again.failed) == (0, 4, 1)  # resume: nothing left to compute
