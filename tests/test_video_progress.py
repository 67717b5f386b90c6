"""The terminal bars of ``sst upscale`` on clips: frames/s and time left as sst-cli computes them, on a fake clock."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from sst_cli.cli.upscale import Reporter
from sst_cli.cli.upscale_video import FrameCounter
from sst_cli.filerun import BatchEvents
from sst_cli.inputs import Job


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rows(reporter: Reporter) -> dict[str, str]:
    """Each bar's line as the terminal would show it, by its first word."""
    assert reporter.progress is not None
    console = Console(file=io.StringIO(), width=150, color_system=None)
    console.print(reporter.progress.make_tasks_table(reporter.progress.tasks))
    lines = [" ".join(line.split()) for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]
    return {line.split()[0]: line for line in lines if line}


def test_frames_per_second_and_eta_count_from_the_clip_start_and_each_clip_starts_afresh() -> None:
    """Frames come a pass at a time, reported in a tight loop: rich's own speed saw microseconds between them
    ('8/40 61680.53 frames/s'), the second clip's row kept the first's total and speed ('0/40 1.26 frames/s'),
    and the clips row had a frames/s column."""
    clock = Clock()
    reporter = Reporter(quiet=False, json_log=False)
    reporter.progress = Progress(console=Console(file=io.StringIO(), width=150))  # as Reporter.ready on a terminal
    counter = FrameCounter(reporter, clock=clock)
    events = counter.hook(BatchEvents(file_start=reporter.file_start, file_done=reporter.file_done))
    counter.expect(50)
    assert events.ready is not None and events.file_start is not None and events.tile is not None
    clock.now += 5  # the model loads: not counted against the speed
    events.ready(None, 2)  # type: ignore[arg-type]
    try:
        events.file_start(Job(Path("long.mp4"), Path(".")), 0, 2)
        clock.now += 6
        for done in range(1, 9):  # one pass of 8 frames, 6 s after the clip started
            events.tile(done, 40)
        shown = rows(reporter)
        assert "8/40 1.33 frames/s 0:00:24" in shown["long.mp4"]  # 32 left at 8 / 6 s
        assert "8/50 1.33 frames/s 0:00:31" in shown["all"]  # 42 left
        clock.now += 24
        for done in range(9, 41):
            events.tile(done, 40)
        events.file_start(Job(Path("b.mp4"), Path(".")), 1, 2)
        assert rows(reporter)["b.mp4"].endswith("0/?")  # neither 40 frames nor the first clip's speed
        clock.now += 4
        for done in range(1, 3):
            events.tile(done, 10)
        shown = rows(reporter)
        assert "2/10 0.50 frames/s 0:00:16" in shown["b.mp4"]
        assert "42/50 1.24 frames/s 0:00:06" in shown["all"]  # 42 frames in 34 s
        assert "frames/s" not in shown["clips"] and ":" not in shown["clips"]
    finally:
        reporter.stop()
