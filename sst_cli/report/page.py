"""The report's ``index.html``: ``template.html`` (package data) filled with ``string.Template``.

Everything the page needs is in the folder: the CSS and the small script (sorting, the before/after slider,
marking images that fail to load) are written into the page; images are files beside it, thumbnails and
crops shown at once, full-size images loaded only when a slider is opened.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from html import escape
from importlib import resources
from string import Template

from .._version import __version__
from .entries import BICUBIC, CROP_DISPLAY, HR, LR, ImageEntry, Method, ReportView

SMALL_SLIDER = 320  # a slider of a smaller picture shows it enlarged by a whole factor, nearest neighbour


def template() -> Template:
    return Template(resources.files("sst_cli.report").joinpath("template.html").read_text(encoding="utf-8"))


def _num(value: float | None, digits: int = 2, *, sign: bool = False) -> str:
    if value is None:
        return "—"
    if math.isinf(value):
        return ("+∞" if sign else "∞") if value > 0 else "−∞"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _attr(value: float | None) -> str:
    """A sort key for a data- attribute: a number (``Infinity`` for an exact match: the best, not missing), or
    empty (sorted last)."""
    if value is None or math.isnan(value):
        return ""
    return ("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else f"{value:.6f}"


def _summary(report: ReportView) -> str:
    if not report.ground_truth:
        models = ", ".join(escape(m.label) for m in report.models) or "none"
        scales = sorted({e.scale for e in report.entries.values()})
        return (
            f'<p class="facts">{len(report.entries)} image(s) at '
            f"{', '.join(f'x{s}' for s in scales)}; models: {models}. No ground truth: the numbers say how much "
            "each model changes the picture from bicubic (mean |ΔY| in 8-bit levels), not which is right.</p>"
        )
    head = ("dataset", "scale", "method", "images", "PSNR-Y (dB)", "SSIM-Y", "published", "Δ published")
    rows = []
    for row in report.summary():
        paper = row.get("published")
        published = "—" if paper is None else f"{paper['psnr_y']:.2f} / {_num(paper['ssim_y'], 4)}"
        delta = "—" if paper is None else _num(row["psnr_y"] - paper["psnr_y"], sign=True)
        title = "" if paper is None else f' title="{escape(paper["source"])}"'
        cells = [
            escape(str(row["dataset"] or "")),
            f"x{row['scale']}",
            escape(row["method"]),
            str(row["images"]),
            _num(row["psnr_y"]),
            _num(row["ssim_y"], 4),
        ]
        body = "".join(f"<td>{c}</td>" for c in cells)
        rows.append(f"<tr>{body}<td{title}>{published}</td><td>{delta}</td></tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    table = f'<table class="summary"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<div class="wide">{table}</div>'


def _sort_button(key: str, label: str, first: str = "descending", title: str = "") -> str:
    tip = f' title="{escape(title)}"' if title else ""
    return f'<th><button type="button" data-key="{key}" data-first="{first}"{tip}>{label}</button></th>'


def _table_head(report: ReportView) -> str:
    cells = [_sort_button("order", "image", "ascending", "original order")]
    if report.ground_truth:
        cells.append(_sort_button("psnr-bicubic", "bicubic<br>PSNR", title="whole image, PSNR-Y in dB"))
        for m in report.models:
            cells.append(_sort_button(f"psnr-{m.id}", f"{escape(m.label)}<br>PSNR", title="whole image, PSNR-Y"))
            cells.append(_sort_button(f"gain-{m.id}", f"{escape(m.label)}<br>gain", title="PSNR gain over bicubic"))
    else:
        for m in report.models:
            cells.append(_sort_button(f"change-{m.id}", f"{escape(m.label)}<br>change", title="mean |ΔY| from bicubic"))
    return "<tr>" + "".join(cells) + "</tr>"


def _columns(report: ReportView) -> int:
    return 1 + (1 + 2 * len(report.models) if report.ground_truth else len(report.models))


def _image_url(entry: ImageEntry, method: str, prefix: str = "") -> str:
    return f"images/{entry.slug}/{prefix}{method}.png"


def _name_cell(entry: ImageEntry) -> str:
    assert entry.crop is not None
    width, height = entry.lr_size
    box = entry.crop
    style = (
        f"left:{100 * box.x / width:.3f}%;top:{100 * box.y / height:.3f}%;"
        f"width:{100 * box.width / width:.3f}%;height:{100 * box.height / height:.3f}%"
    )
    full = _image_url(entry, HR if entry.has_hr else LR)
    facts = [escape(entry.dataset)] if entry.dataset else []
    facts += [f"x{entry.scale}", f"{width}×{height} → {entry.out_size[0]}×{entry.out_size[1]}"]
    if entry.bit_depth == 16:
        facts.append('<span class="tag" title="shown here through 8-bit previews">16-bit</span>')
    if entry.alpha:
        facts.append('<span class="tag" title="transparent parts are shown on a checkerboard">alpha</span>')
    return (
        f'<td class="name"><a class="thumb checker" href="{full}" title="open the full image">'
        f'<img src="images/{entry.slug}/{entry.thumb}" alt="{escape(entry.name)}">'
        f'<span class="box" style="{style}"></span></a>'
        f"<div><b>{escape(entry.name)}</b><br><small>{' · '.join(facts)}</small></div></td>"
    )


def _crop_zoom(entry: ImageEntry) -> int:
    assert entry.crop is not None
    side = max(entry.crop.width, entry.crop.height) * entry.scale
    return max(1, min(8, round(CROP_DISPLAY / side)))


def _crops(report: ReportView, entry: ImageEntry) -> str:
    assert entry.crop is not None
    box = entry.crop.scaled(entry.scale)
    zoom = _crop_zoom(entry)
    figures = []
    for method in report.methods:
        if method.kind == "model" and method.id not in entry.outputs:
            continue
        if method.id == LR:
            caption = f"<b>LR</b> <span>nearest ×{entry.scale}</span>"
        else:
            caption = f"<b>{escape(method.label)}</b>"
            if method.id in entry.crop_psnr:
                caption += f' <span class="psnr">{_num(entry.crop_psnr[method.id])} dB</span>'
            elif method.id == HR:
                caption += " <span>ground truth</span>"
        figures.append(
            f'<figure class="crop" data-method="{method.id}"><div class="tile checker">'
            f'<img src="{_image_url(entry, method.id, "crop-")}" width="{box.width}" height="{box.height}" '
            f'style="width:{box.width * zoom}px" loading="lazy" alt="{escape(method.label)} crop"></div>'
            f"<figcaption>{caption}</figcaption></figure>"
        )
    where = f"crop x {box.x}–{box.x + box.width}, y {box.y}–{box.y + box.height} (output pixels), shown ×{zoom}"
    where += f" ({entry.crop_option(report.ground_truth)} shows it again)"
    if report.ground_truth:
        where += "; dB: PSNR-Y of the crop"
    return f'<div class="crops">{"".join(figures)}</div><p class="where">{where}</p>'


def _slider(report: ReportView, entry: ImageEntry) -> str:
    shown = [m for m in report.methods if m.kind != "model" or m.id in entry.outputs]
    models = [m for m in shown if m.kind == "model"]
    left = next(m for m in shown if m.id == BICUBIC)
    right = models[0] if models else next((m for m in shown if m.id == HR), left)

    def options(selected: Method) -> str:
        return "".join(
            f'<option value="{_image_url(entry, m.id)}" data-lr="{int(m.id == LR)}"'
            f"{' selected' if m is selected else ''}>{escape(m.label)}</option>"
            for m in shown
        )

    links = " · ".join(f'<a href="{_image_url(entry, m.id)}">{escape(m.label)}</a>' for m in shown)
    width, height = entry.out_size
    enlarge = max(1, -(-SMALL_SLIDER // max(width, height)))  # small pictures: whole pixels, enlarged
    width, height = width * enlarge, height * enlarge
    pixelated = " pixelated" if enlarge > 1 else ""
    return (
        '<details class="slider"><summary>before / after: the whole image</summary>'
        f'<div class="controls">left <select class="left" aria-label="left image">{options(left)}</select> '
        f'right <select class="right" aria-label="right image">{options(right)}</select> '
        f'<span class="links">full size: {links}</span></div>'
        f'<div class="frame" style="width:{width}px"><div class="stage checker" data-enlarged="{int(enlarge > 1)}" '
        f'style="aspect-ratio:{width}/{height}">'
        f'<img class="under{pixelated}" data-src="{_image_url(entry, left.id)}" alt="{escape(entry.name)}: left">'
        f'<img class="over{pixelated}" data-src="{_image_url(entry, right.id)}" alt="{escape(entry.name)}: right" '
        'style="clip-path:inset(0 0 0 50%)">'
        '<span class="divider" style="left:50%"></span>'
        f'<span class="label l">{escape(left.label)}</span><span class="label r">{escape(right.label)}</span></div>'
        '<input class="position" type="range" min="0" max="100" step="0.1" value="50" '
        'aria-label="slider position"></div></details>'
    )


def _row(report: ReportView, entry: ImageEntry) -> str:
    data = {"order": str(entry.order)}
    cells = [_name_cell(entry)]
    if report.ground_truth:
        bicubic = entry.scores.get(BICUBIC)
        data["psnr-bicubic"] = _attr(bicubic.psnr if bicubic else None)
        cells.append(_score_cell(bicubic))
        for m in report.models:
            score = entry.scores.get(m.id)
            gain = report.gain(entry, m.id)
            data[f"psnr-{m.id}"] = _attr(score.psnr if score else None)
            data[f"gain-{m.id}"] = _attr(gain)
            cells.append(_score_cell(score))
            sign = "" if gain is None or round(gain, 2) == 0 else (" up" if gain > 0 else " down")
            cells.append(f'<td class="gain{sign}">{"—" if gain is None else f"{gain:+.2f}"}</td>')
    else:
        for m in report.models:
            change = entry.change.get(m.id)
            data[f"change-{m.id}"] = _attr(change)
            cells.append(f'<td class="change">{_num(change)}</td>')
    attrs = " ".join(f'data-{k}="{v}"' for k, v in data.items())
    view = _crops(report, entry) + _slider(report, entry)
    return (
        f'<tbody class="item" id="img-{entry.slug}" {attrs}><tr class="nums">{"".join(cells)}</tr>'
        f'<tr class="view"><td colspan="{_columns(report)}">{view}</td></tr></tbody>'
    )


def _score_cell(score: object) -> str:
    if score is None:
        return '<td class="score">—</td>'
    psnr, ssim = score.psnr, score.ssim  # type: ignore[attr-defined]
    small = "" if ssim is None else f"<small>{ssim:.4f}</small>"
    return f'<td class="score"><span class="db">{_num(psnr)}</span>{small}</td>'


def render_page(report: ReportView) -> str:
    """The whole HTML page of a finished report."""
    notes = list(report.notes)
    if report.ground_truth:
        notes.append(
            "PSNR-Y / SSIM-Y as the SR papers measure them: BT.601 luma, the scale's width of border shaved, "
            "HR modcropped; gain = model PSNR − bicubic PSNR on the same image."
        )
    if any(e.bit_depth == 16 for e in report.entries.values()):
        notes.append("16-bit images are shown through 8-bit previews; the numbers come from the full data.")
    if any(e.alpha for e in report.entries.values()):
        notes.append("Transparent parts are shown on a checkerboard.")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return template().substitute(
        title=escape(report.title),
        generated=f"sst-cli {escape(__version__)}, {stamp}",
        summary=_summary(report),
        notes="".join(f"<li>{escape(n)}</li>" for n in notes),
        count=str(len(report.entries)),
        table_head=_table_head(report),
        rows="\n".join(_row(report, e) for e in report.entries.values()),
    )
