#!/usr/bin/env python3
"""CPU benchmark of tiled inference: wall time, peak memory and fidelity versus whole-image inference.

One photo-like input of about ``--megapixels`` (built from real photos: ``--image`` files, else
the Set14 HR images in ``../shared/datasets`` beside the repository, else ``examples/*.png``) is
upscaled once as a whole (tile 0) and once per tile size in ``--tiles`` (LR pixels, default overlap),
once per overlap in ``--overlaps`` (at ``--overlap-tile``), once per memory budget in ``--budgets`` (``--tile
auto --max-memory``: the plan sst-cli chooses), plus one ``exact`` run with ``--with-exact``.  Every
configuration runs in a fresh subprocess (this
script re-invoked with the hidden ``--one`` option, which prints one JSON line) so that its peak
resident memory (``ru_maxrss``) belongs to that configuration alone.  The child also reports its RSS
right after the model is loaded (the baseline), so ``peak - baseline`` is the memory the run itself
needed (activations, tile buffers, the output canvas, and whatever the tiny warm-up forward pass
left allocated: negligible for real sizes, dominant for smoke runs of a few hundred pixels).

The outputs are saved as ``.npy`` in a work directory and compared in this (parent) process: PSNR of
each tiled output against the whole-image output, on the raw float outputs with a peak of 1.0.

Quick check with the random-weight golden network (x3)::

    PYTHONPATH=. python3 benchmarks/bench_tiling.py --megapixels 0.01 \\
        --weights ../shared/golden/mini_x3.pth --config ../shared/golden/mini_x3.json --tiles 0 64 32

Real run (SST-light x4, ~2 MP; on 2 free cores roughly 10 min whole-image and 1.5 h in all)::

    PYTHONPATH=. python3 benchmarks/bench_tiling.py --markdown --json /tmp/bench_tiling_2mp.json

``--with-exact`` is expensive at 2 MP: SST-light's exact overlap is 704 LR px, so every exact tile's
context covers most of the image; check exactness on a smaller input (e.g. ``--megapixels 0.3``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SET14 = REPO.parent / "shared" / "datasets" / "Set14" / "HR"
CELL = (512, 384)  # mosaic cell size (about the native size of the Set14 photos)
WARMUP_SIDE = 64  # LR side of the tiny warm-up forward pass
MIB = 1024.0


# --------------------------------------------------------------------------- data passed around
@dataclass(frozen=True)
class RunSpec:
    """One configuration, as handed to a child process (JSON on the command line)."""

    name: str
    tile: int | str  # a side, or "auto"
    exact: bool
    overlap: int | None
    max_memory: int | None
    model: str
    scale: int | None
    weights: str | None
    config: str | None
    threads: int
    input_path: str
    output_path: str


@dataclass
class RunResult:
    """What a child reports (one JSON line), plus the comparison the parent adds."""

    name: str
    ok: bool
    error: str | None = None
    stage: str | None = None
    tile_requested: int | str = 0
    tile_used: int | list[int] | None = None
    cost: float | None = None  # pixels computed per image pixel
    overlap: int | None = None
    align: int | None = None
    exact: bool = False
    n_tiles: int | None = None
    time_s: float | None = None
    cpu_s: float | None = None
    rss_input_kib: int | None = None
    rss_loaded_kib: int | None = None
    rss_warm_kib: int | None = None
    peak_kib: int | None = None
    scale: int | None = None
    params: int | None = None
    threads: int | None = None
    torch: str | None = None
    out_shape: list[int] = field(default_factory=list)
    psnr_db: float | None = None
    max_abs_diff: float | None = None

    @property
    def activation_kib(self) -> int | None:
        if self.peak_kib is None or self.rss_loaded_kib is None:
            return None
        return self.peak_kib - self.rss_loaded_kib


# --------------------------------------------------------------------------- child side
def _current_rss_kib() -> int | None:
    """Resident set size now (VmRSS), in KiB; None where /proc is not available."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _peak_rss_kib() -> int:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def run_one(spec: RunSpec) -> RunResult:
    """Load the model, warm up on a tiny input, time one run, save the output; never raises."""
    result = RunResult(name=spec.name, ok=False, tile_requested=spec.tile, exact=spec.exact)
    stage = "import"
    try:
        from sst_cli.allocator import keep_large_blocks_off_the_heap

        keep_large_blocks_off_the_heap()  # as the sst program does, before torch: the peaks are what sst's are
        import torch

        from sst_cli.tiling import plan_tiles, tiling_cost
        from sst_cli.upscaler import Upscaler

        torch.set_num_threads(spec.threads)
        result.threads = torch.get_num_threads()
        result.torch = torch.__version__

        stage = "input"
        image = torch.from_numpy(np.load(spec.input_path))
        result.rss_input_kib = _current_rss_kib()

        stage = "load"
        upscaler = Upscaler(
            spec.model,
            spec.scale,
            weights=spec.weights,
            config=spec.config,
            device="cpu",
            precision="fp32",
            tile=spec.tile,
            tile_overlap=spec.overlap,
            exact=spec.exact,
            max_memory=spec.max_memory,
        )
        result.rss_loaded_kib = _current_rss_kib()
        result.scale = upscaler.scale
        result.params = sum(p.numel() for p in upscaler.model.parameters())

        stage = "warm-up"
        upscaler.run(torch.rand(image.shape[0], WARMUP_SIDE, WARMUP_SIDE, generator=torch.Generator().manual_seed(0)))
        result.rss_warm_kib = _current_rss_kib()

        stage = "run"
        _, height, width = image.shape
        plan = upscaler.plan(height, width)
        cpu0, t0 = time.process_time(), time.perf_counter()
        out, used = upscaler.run(image)
        result.time_s = time.perf_counter() - t0
        result.cpu_s = time.process_time() - cpu0
        result.tile_used = list(used) if isinstance(used, tuple) else used
        result.overlap = plan.overlap
        result.align = plan.align
        result.n_tiles = len(plan_tiles(height, width, used, plan.overlap, plan.align))
        result.cost = tiling_cost(height, width, used, plan.overlap)
        result.out_shape = list(out.shape)

        stage = "save"
        np.save(spec.output_path, out.numpy())
        del out
        result.peak_kib = _peak_rss_kib()
        result.ok = True
    except Exception as exc:  # reported to the parent as data, not as a traceback
        result.stage = stage
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def child_main(spec_json: str) -> int:
    spec = RunSpec(**json.loads(spec_json))
    result = run_one(spec)
    print(json.dumps(asdict(result)), flush=True)
    return 0 if result.ok else 1


# --------------------------------------------------------------------------- input image
def find_sources(images: list[Path]) -> list[Path]:
    """Source photos: the given files, else Set14 HR beside the repository, else examples/*.png.

    Set14 comes first because its photos (250-768 px) fill a mosaic cell at about their native
    size, while the bundled examples are thumbnails (100-214 px) that would be enlarged 3-5x into
    an unrealistically smooth input.
    """
    if images:
        missing = [str(p) for p in images if not p.is_file()]
        if missing:
            raise SystemExit(f"image not found: {', '.join(missing)}")
        return images
    for folder in (SET14, REPO / "examples"):
        found = sorted(folder.glob("*.png"))
        if found:
            return found
    raise SystemExit(f"no source photo: put PNGs in {REPO / 'examples'} or pass --image PATH")


def target_size(megapixels: float) -> tuple[int, int]:
    """(width, height) of a 4:3 image of about ``megapixels``, both multiples of 8 (2.0 -> 1632x1224)."""
    width = max(64, round(math.sqrt(megapixels * 1e6 * 4 / 3) / 8) * 8)
    height = max(48, round(width * 3 / 4 / 8) * 8)
    return width, height


def _cover(image: Image.Image, width: int, height: int) -> Image.Image:
    """Resize to cover width x height (aspect kept), then centre-crop to it."""
    factor = max(width / image.width, height / image.height)
    size = (max(width, round(image.width * factor)), max(height, round(image.height * factor)))
    resized = image.resize(size, Image.Resampling.LANCZOS)
    left, top = (size[0] - width) // 2, (size[1] - height) // 2
    return resized.crop((left, top, left + width, top + height))


def build_input(sources: list[Path], width: int, height: int) -> Image.Image:
    """A mosaic of real photos, each cell about the photos' native size, filled in row-major order."""
    cols = max(1, round(width / CELL[0]))
    rows = max(1, round(height / CELL[1]))
    xs = [round(i * width / cols) for i in range(cols + 1)]
    ys = [round(j * height / rows) for j in range(rows + 1)]
    canvas = Image.new("RGB", (width, height))
    for j in range(rows):
        for i in range(cols):
            with Image.open(sources[(j * cols + i) % len(sources)]) as photo:
                cell = _cover(photo.convert("RGB"), xs[i + 1] - xs[i], ys[j + 1] - ys[j])
            canvas.paste(cell, (xs[i], ys[j]))
    return canvas


# --------------------------------------------------------------------------- comparison
def compare(reference: Path, candidate: Path, rows: int = 256) -> tuple[float, float]:
    """(PSNR in dB with peak 1.0, max |difference|) of two (C, H, W) float outputs, read in chunks."""
    ref = np.load(reference, mmap_mode="r")
    out = np.load(candidate, mmap_mode="r")
    if ref.shape != out.shape:
        raise ValueError(f"output shapes differ: {ref.shape} vs {out.shape}")
    sse, worst = 0.0, 0.0
    for c in range(ref.shape[0]):
        for r0 in range(0, ref.shape[1], rows):
            diff = np.asarray(ref[c, r0 : r0 + rows], dtype=np.float64) - np.asarray(out[c, r0 : r0 + rows])
            sse += float(np.square(diff).sum())
            worst = max(worst, float(np.abs(diff).max()))
    mse = sse / ref.size
    return (math.inf if mse == 0 else 10 * math.log10(1.0 / mse)), worst


# --------------------------------------------------------------------------- parent side
def run_child(spec: RunSpec, timeout: float | None) -> RunResult:
    """Run one configuration in a fresh interpreter and parse its JSON line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", json.dumps(asdict(spec))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return RunResult(name=spec.name, ok=False, stage="run", error=f"timed out after {timeout} s")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if lines:
        data = json.loads(lines[-1])
        return RunResult(**data)
    if proc.returncode < 0:
        why = f"killed by signal {-proc.returncode}" + (" (out of memory?)" if proc.returncode == -9 else "")
    else:
        why = f"exit status {proc.returncode}"
    tail = proc.stderr.strip().splitlines()[-3:]
    return RunResult(name=spec.name, ok=False, stage="run", error="; ".join([why, *tail]))


def make_specs(args: argparse.Namespace, input_path: Path, workdir: Path) -> list[RunSpec]:
    tiles = [0] + [t for t in dict.fromkeys(args.tiles) if t != 0]  # whole image first, computed once
    # (name, tile, exact, overlap, memory budget)
    runs: list[tuple[str, int | str, bool, int | None, int | None]] = [
        ("whole" if t == 0 else f"tile {t}", t, False, args.overlap, None) for t in tiles
    ]
    nonzero = [t for t in tiles if t > 0]
    if args.overlaps:
        at = args.overlap_tile if args.overlap_tile is not None else max(nonzero, default=0)
        if at <= 0:
            raise SystemExit("--overlaps needs a positive tile size (--overlap-tile or a non-zero --tiles entry)")
        runs += [(f"tile {at} overlap {o}", at, False, o, None) for o in args.overlaps]
    for budget in args.budgets:
        runs.append((f"auto, {budget}", "auto", False, args.overlap, _parse_bytes(budget)))
    if args.with_exact:
        exact_tile = args.exact_tile if args.exact_tile is not None else max(nonzero, default=0)
        if exact_tile <= 0:
            raise SystemExit("--with-exact needs a positive tile size (--exact-tile or a non-zero --tiles entry)")
        runs.append((f"tile {exact_tile} exact", exact_tile, True, args.overlap, None))
    scale = args.scale if args.scale is not None else (None if args.config else 4)
    return [
        RunSpec(
            name=name,
            tile=tile,
            exact=exact,
            overlap=overlap,
            max_memory=budget,
            model=args.model,
            scale=scale,
            weights=args.weights,
            config=args.config,
            threads=args.threads,
            input_path=str(input_path),
            output_path=str(workdir / f"out_{i}.npy"),
        )
        for i, (name, tile, exact, overlap, budget) in enumerate(runs)
    ]


def _parse_bytes(text: str) -> int:
    """``300M`` / ``2G`` / ``123456`` -> bytes (powers of 1024), as ``--max-memory`` reads them."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def header_facts(
    args: argparse.Namespace, results: list[RunResult], size: tuple[int, int], sources: list[Path]
) -> list[tuple[str, str]]:
    first = next((r for r in results if r.ok), None)
    try:
        torch_version = first.torch if first and first.torch else importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "unknown"
    scale = first.scale if first and first.scale else (args.scale or 4)
    width, height = size
    model = args.model if not args.weights else f"{args.weights}" + (f" (config {args.config})" if args.config else "")
    names = ", ".join(p.name for p in sources[:4]) + (f", … ({len(sources)} files)" if len(sources) > 4 else "")
    facts = [
        ("CPU", f"{cpu_model()} ({available_cores()} cores available)"),
        ("threads used", str(first.threads if first and first.threads else args.threads)),
        ("torch", torch_version),
        ("date", datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        ("model", model + (f", {first.params:,} parameters" if first and first.params else "")),
        ("scale", f"x{scale}"),
        (
            "image",
            f"{width}x{height} LR ({width * height / 1e6:.2f} MP) -> {width * scale}x{height * scale}, "
            f"mosaic of {names}",
        ),
        ("precision", "fp32, CPU; each configuration in a fresh process; tiny warm-up forward before timing"),
    ]
    return facts


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def table_rows(results: list[RunResult]) -> list[list[str]]:
    """One row of cells per result; a failed run is a two-cell row (name, reason)."""
    whole = next((r for r in results if r.name == "whole" and r.ok), None)
    rows: list[list[str]] = []
    for r in results:
        if not r.ok:
            rows.append([r.name, f"FAILED ({r.stage}): {r.error}"])
            continue
        act = r.activation_kib

        def rel(value: float | None, reference: float | None, r: RunResult = r) -> str:
            if r is whole:
                return "1.00"
            if value is None or not reference:
                return "n/a"
            return _fmt(value / reference, 2)

        if r is whole:
            psnr, maxdiff = "ref", "ref"
        else:
            psnr = _fmt(r.psnr_db, 2)
            maxdiff = f"{r.max_abs_diff:.2e}" if r.max_abs_diff is not None else "n/a"
        used = r.tile_used
        tile = "whole" if used == 0 else (f"{used[0]}x{used[1]}" if isinstance(used, list) else str(used))
        if used != r.tile_requested:
            tile += f" (asked {r.tile_requested})"
        rows.append(
            [
                r.name,
                tile,
                "-" if r.tile_used == 0 else str(r.overlap),
                str(r.n_tiles),
                _fmt(r.cost, 2),
                _fmt(r.time_s, 2),
                _fmt(r.peak_kib / MIB if r.peak_kib is not None else None),
                _fmt(r.rss_loaded_kib / MIB if r.rss_loaded_kib is not None else None),
                _fmt(act / MIB if act is not None else None),
                rel(r.time_s, whole.time_s if whole else None),
                rel(r.peak_kib, whole.peak_kib if whole else None),
                rel(act, whole.activation_kib if whole else None),
                psnr,
                maxdiff,
            ]
        )
    return rows


COLUMNS = [
    "config",
    "tile",
    "overlap",
    "tiles",
    "cost",
    "time s",
    "peak MiB",
    "base MiB",
    "act MiB",
    "time ×",
    "peak ×",
    "act ×",
    "PSNR dB",
    "max abs diff",
]
LEGEND = (
    "tile/overlap in LR pixels (rows x cols for strips); cost = pixels computed per image pixel; "
    "peak = the run's ru_maxrss; base = RSS right after the model load "
    "(input already loaded); act = peak - base; × = ratio to whole; PSNR and max abs diff compare the raw "
    "float output with the whole-image output (peak 1.0)."
)


def render(facts: list[tuple[str, str]], rows: list[list[str]], markdown: bool) -> str:
    """The header facts and the table, as aligned text or as Markdown."""
    lines: list[str] = []
    if markdown:
        lines += [f"- **{k}**: {v}" for k, v in facts]
        lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
        for row in rows:
            cells = row + [""] * (len(COLUMNS) - len(row))
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    else:
        key_width = max(len(k) for k, _ in facts)
        lines += [f"{k:<{key_width}}  {v}" for k, v in facts]
        full = [row for row in rows if len(row) == len(COLUMNS)]
        widths = [max([len(c)] + [len(row[i]) for row in full]) for i, c in enumerate(COLUMNS)]
        lines.append("")
        for row in [COLUMNS, *rows]:
            if len(row) != len(COLUMNS):
                lines.append(f"{row[0].ljust(widths[0])}  {row[1]}")
                continue
            cells = [c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
            lines.append("  ".join(cells))
    lines += ["", LEGEND]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="sst-light", help="zoo name (architecture for --weights without --config)")
    p.add_argument("--scale", type=int, default=None, help="upscaling factor (default 4; from --config when given)")
    p.add_argument("--weights", default=None, help="local weights file or hf:// reference")
    p.add_argument("--config", default=None, help="JSON file of SST constructor keywords (with --weights)")
    p.add_argument("--megapixels", type=float, default=2.0, help="LR input size in MP, 4:3 (default 2.0)")
    p.add_argument("--image", type=Path, action="append", default=[], help="source photo(s) for the mosaic")
    p.add_argument("--tiles", type=int, nargs="+", default=[0, 512, 256, 128], help="tile sizes, LR px; 0 = whole")
    p.add_argument("--overlap", type=int, default=None, help="tile overlap in LR px (default: the Upscaler's)")
    p.add_argument("--overlaps", type=int, nargs="+", default=[], help="overlaps to try, LR px (at --overlap-tile)")
    p.add_argument("--overlap-tile", type=int, default=None, help="tile of the --overlaps runs (default: largest)")
    p.add_argument("--budgets", nargs="+", default=[], help="--max-memory values for --tile auto runs, e.g. 300M")
    p.add_argument("--with-exact", action="store_true", help="add one exact-tiling run")
    p.add_argument("--exact-tile", type=int, default=None, help="tile of the exact run (default: largest tile)")
    p.add_argument("--threads", type=int, default=available_cores(), help="torch threads in each run (default: all)")
    p.add_argument("--timeout", type=float, default=None, help="seconds allowed per configuration")
    p.add_argument("--workdir", type=Path, default=None, help="keep input and outputs here (default: temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write the raw results as JSON")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown (for RESULTS.md)")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.megapixels <= 0 or args.threads < 1 or any(t < 0 for t in args.tiles):
        p.error("--megapixels and --threads must be positive, --tiles non-negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one is not None:
        return child_main(args.one)

    sources = find_sources(args.image)
    width, height = target_size(args.megapixels)
    temp = None if args.workdir else tempfile.mkdtemp(prefix="bench_tiling_")
    workdir = args.workdir or Path(temp or ".")
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        picture = build_input(sources, width, height)
        picture.save(workdir / "input.png")
        input_path = workdir / "input.npy"
        np.save(input_path, np.ascontiguousarray(np.asarray(picture, dtype=np.float32).transpose(2, 0, 1) / 255.0))

        specs = make_specs(args, input_path, workdir)
        results: list[RunResult] = []
        reference: Path | None = None
        for i, spec in enumerate(specs, 1):
            print(f"[{i}/{len(specs)}] {spec.name} ...", end=" ", file=sys.stderr, flush=True)
            result = run_child(spec, args.timeout)
            if result.ok:
                print(f"{result.time_s:.2f} s, peak {(result.peak_kib or 0) / MIB:.0f} MiB", file=sys.stderr)
                if spec.tile == 0 and not spec.exact and spec.overlap == args.overlap:
                    reference = Path(spec.output_path)
                elif reference is not None:
                    result.psnr_db, result.max_abs_diff = compare(reference, Path(spec.output_path))
                    if temp:
                        Path(spec.output_path).unlink()
            else:
                print(f"failed ({result.stage}): {result.error}", file=sys.stderr)
                if result.stage in ("import", "input", "load"):
                    print("the model cannot be loaded; stopping", file=sys.stderr)
                    results.append(result)
                    break
            results.append(result)

        print(render(header_facts(args, results, (width, height), sources), table_rows(results), args.markdown))
        if args.json:
            payload = {"results": [asdict(r) | {"activation_kib": r.activation_kib} for r in results]}
            payload["facts"] = dict(header_facts(args, results, (width, height), sources))
            args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        return 0 if results and all(r.ok for r in results) else 1
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
