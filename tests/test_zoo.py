"""Every zoo entry against the official key lists and the published parameter counts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import GOLDEN, needs_golden

from sst_cli import create_model, list_models
from sst_cli.errors import ConfigError
from sst_cli.zoo import SCALES, get_variant

OFFICIAL_NAMES = {
    "sst-light": "SSTlight",
    "sst-light+": "SSTlight_Plus",
    "sst": "SST",
    "sst+": "SST_Plus",
    "sst-l": "SSTLarge",
    "sst-l+": "SSTLarge_Plus",
    "sst-xl+": "SSTXL_Plus",
}
DAT_NAMES = ["dat-light", "dat-s", "dat-2", "dat"]  # the second architecture (tests/test_dat.py)
OURS = ["sst-light-291"]  # official architectures with weights trained by sst-cli
REAL = ["sst-real"]  # the authors' real-world model, another architecture (tests/test_sstreal.py)
ENTRIES = [(name, scale) for name in list_models() if get_variant(name).arch == "sst" for scale in SCALES]


def test_zoo_has_the_official_variants_then_ours() -> None:
    assert list_models(official_only=True) == [*OFFICIAL_NAMES, *DAT_NAMES, *REAL]
    assert list_models() == [*OFFICIAL_NAMES, *DAT_NAMES, *REAL, *OURS]
    assert get_variant("sst-real").scales == (4,) and get_variant("sst-real").arch == "sstreal"
    assert len(ENTRIES) == 24


def test_sst_light_291_is_sst_light_with_other_weights() -> None:
    ours, official = get_variant("sst-light-291"), get_variant("sst-light")
    assert official.official and not ours.official and ours.base == "sst-light"
    assert all(ours.config(s) == official.config(s) and ours.params == official.params for s in SCALES)
    assert "sst-cli" in ours.note and "291" in ours.note and "not the paper's" in ours.note


@needs_golden
@pytest.mark.parametrize("name,scale", ENTRIES)
def test_keys_shapes_and_parameter_counts(name: str, scale: int) -> None:
    with torch.device("meta"):
        model = create_model(name, scale)
    official_name = OFFICIAL_NAMES[get_variant(name).base or name]
    lines = (GOLDEN / "keys" / f"{official_name}_x{scale}.txt").read_text().splitlines()
    official_count = int(lines[0].split(":")[1])
    official = [tuple(line.split("\t")) for line in lines[1:]]
    ours = [(key, str(list(value.shape))) for key, value in model.state_dict().items()]
    assert ours == official
    count = sum(p.numel() for p in model.parameters())
    assert count == official_count == get_variant(name).params[scale]


def test_published_counts_spot_check() -> None:
    assert get_variant("sst-l").params[4] == 21_311_427
    assert get_variant("sst-light").params[2] == 893_340


def test_plus_variants_share_shapes_and_differ_in_windows() -> None:
    for base in ("sst-light", "sst", "sst-l"):
        with torch.device("meta"):
            a, b = create_model(base, 4), create_model(base + "+", 4)
        assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}
        assert a.config.window_sizes != b.config.window_sizes
        assert max(b.config.window_sizes) == 96


def test_names_are_case_insensitive_and_unknown_ones_list_choices() -> None:
    assert get_variant(" SST-L+ ").name == "sst-l+"
    with pytest.raises(ConfigError, match="sst-light, sst-light\\+"):
        get_variant("sst-huge")
    with pytest.raises(ConfigError, match="sst exists at x2 / x3 / x4, not x8"):
        create_model("sst", 8)


def test_create_model_is_untrained_and_runs() -> None:
    model = create_model("sst-light", 2).eval()
    assert model.scale == 2
    with torch.no_grad():
        assert model(torch.rand(1, 3, 8, 8)).shape == (1, 3, 16, 16)


def test_create_model_refuses_what_is_no_zoo_name_as_a_config_error() -> None:
    """``create_model(Path("sst"), 2)`` met "'PosixPath' object has no attribute 'strip'": a ConfigError now, that
    says what to pass and where weights files go."""
    with pytest.raises(ConfigError, match=r"^create_model takes a zoo name such as '[\w-]+', got PosixPath\('sst'\); "):
        create_model(Path("sst"), 2)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="use load_model"):
        create_model(Path("w.pth"), 2)  # type: ignore[arg-type]
