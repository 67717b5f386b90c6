"""Option checks that need no model: the spelling of choices."""

from __future__ import annotations

import pytest
import torch

from sst_cli.checks import check_choice
from sst_cli.choices import PRECISIONS
from sst_cli.errors import ConfigError
from sst_cli.options import UpscaleOptions
from sst_cli.runtime import resolve_precision


def test_choices_ignore_letter_case_and_come_back_canonical() -> None:
    """``--precision FP32`` was refused while ``--device CPU`` was taken; the canonical spelling is what runs."""
    assert check_choice("FP32", PRECISIONS, "precision") == "fp32"
    assert check_choice(" Auto ", PRECISIONS, "precision") == "auto"
    with pytest.raises(ConfigError, match="unknown precision 'fp16'; choose one of auto, fp32, bf16"):
        check_choice("fp16", PRECISIONS, "precision")
    options = UpscaleOptions(device="cpu", precision="FP32", attention="NATIVE", alpha="MODEL", compile="OFF")
    assert (options.precision, options.attention, options.alpha, options.compile) == ("fp32", "native", "model", "off")
    assert resolve_precision("BF16", torch.device("cpu")) == torch.bfloat16
