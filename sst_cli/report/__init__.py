"""Visual comparison reports: a self-contained HTML page (and a side-by-side PNG) of crops and sliders.

``open_report`` stages a report and swaps it in whole; ``ReportBuilder`` takes each image's input, bicubic,
model outputs and ground truth; ``eval_recorder`` feeds it from ``evaluate.run_evaluation``; ``write_sheet``
draws the crops into one PNG. ``sst eval --report`` and ``sst compare`` are thin front ends to these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .builder import ReportBuilder, Score, check_target, is_report, open_report
from .crops import CROP_BY, CropBox, choose_crop
from .sheet import render_sheet, write_sheet

if TYPE_CHECKING:
    from ..evaluate import EvalOutput

__all__ = [
    "CROP_BY",
    "CropBox",
    "ReportBuilder",
    "Score",
    "check_target",
    "choose_crop",
    "eval_recorder",
    "is_report",
    "open_report",
    "render_sheet",
    "write_sheet",
]


def eval_recorder(report: ReportBuilder) -> Callable[[EvalOutput], None]:
    """An ``on_output`` for ``run_evaluation`` that adds every image and model output to ``report``.

    Bicubic is always a column: computed and scored here unless it is one of the evaluated models.
    """
    from dataclasses import asdict

    from ..evaluate import BICUBIC, BICUBIC_RAN_ON, bicubic, score

    def record(out: EvalOutput) -> None:
        key = f"{out.dataset}/x{out.scale}/{out.score.name}"
        this = Score(out.score.psnr_y, out.score.ssim_y)
        if not report.has_image(key):
            if out.model == BICUBIC:
                baseline, baseline_score = out.sr, this
            else:
                baseline = bicubic(out.lr, out.scale)
                baseline_score = Score(*score(baseline, out.hr, out.scale)[:2])
            report.add_image(
                key, out.score.name, scale=out.scale, lr=out.lr, bicubic=baseline, hr=out.hr,
                dataset=out.dataset, bicubic_score=baseline_score, bicubic_ran_on=asdict(BICUBIC_RAN_ON),
            )  # fmt: skip
        if out.model != BICUBIC:
            report.add_output(key, out.model, out.sr, this, asdict(out.ran_on) if out.ran_on else None)

    return record
