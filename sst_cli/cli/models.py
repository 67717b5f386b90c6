"""``sst models``: list, inspect and download pretrained weights."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import hub
from ..errors import WeightsNotFound
from ..zoo import SCALES, VARIANTS, get_variant
from ._options import HubRepoOption
from .output import console, handle_errors

app = typer.Typer(help="List, inspect and download pretrained SST weights.", no_args_is_help=False)


def weights_status(name: str, scale: int) -> str:
    """Where the weights of one zoo entry would come from, without touching the network."""
    try:
        entry = hub.manifest_entry(name, scale)
    except WeightsNotFound:  # sst-cli's own entries before their weights are trained; sst-real (file unlisted)
        return "hub (unlisted)" if get_variant(name).official else "not trained"
    if isinstance(entry, Path):
        return "bundled" if entry.is_file() else "missing"
    return "cached" if hub.cached_path(entry) else "hub"


@app.callback(invoke_without_command=True)
@handle_errors
def list_models(ctx: typer.Context) -> None:
    """Table of zoo models: scales, parameters, window sizes, and where their weights are."""
    if ctx.invoked_subcommand is not None:
        return
    table = Table(title="SST model zoo")
    columns = ("model", "architecture", "params x2 / x3 / x4", "weights x2 / x3 / x4", "weights by")
    for column in columns:
        table.add_column(column, no_wrap=column == "model")
    for name, v in VARIANTS.items():
        params = " / ".join(f"{v.params[s] / 1e6:.2f}M" if s in v.params else "-" for s in SCALES)
        status = " / ".join(weights_status(name, s) if s in v.scales else "-" for s in SCALES)
        origin = "the paper's authors" if v.official else v.note
        table.add_row(name, v.arch.upper(), params, status, origin)
    console.print(table)
    console.print(
        "bundled: shipped with sst-cli; cached: in the Hugging Face cache; hub: downloaded on first use; "
        "hub (unlisted): on the Hub under a file name not known yet (download it, pass --weights); "
        "not trained: no weights yet (make them with `sst train`)"
    )


@app.command("info")
@handle_errors
def info(name: Annotated[str, typer.Argument(help="Zoo name, e.g. sst-l+.")]) -> None:
    """Hyper-parameters, parameter counts and weight files of one zoo model."""
    v = get_variant(name)
    console.print(f"[bold]{v.title}[/] ({v.name})")
    rows: dict[str, object] = {"weights": v.note}
    if v.base is not None:
        rows["architecture"] = f"{v.base} (identical)"
    rows["architecture"] = v.arch.upper() if v.base is None else rows["architecture"]
    rows |= {key: list(value) if isinstance(value, tuple) else value for key, value in v.kwargs.items()}
    for key, value in rows.items():
        console.print(f"  {key:<16} {value}", markup=False)
    for scale in v.scales:
        try:
            entry = hub.manifest_entry(v.name, scale)
        except WeightsNotFound as exc:
            if v.official:  # sst-real: on the Hub under a name to be listed
                console.print(f"  x{scale}: {v.params[scale]:,} parameters; {exc}", markup=False)
                continue
            arch = v.base or v.name
            hint = f"sst train --model {arch} --scale {scale} --data DIR --iters N --out FILE"
            console.print(f"  x{scale}: {v.params[scale]:,} parameters; weights not trained yet ({hint})", markup=False)
            continue
        where = entry if isinstance(entry, Path) else entry.uri
        status = weights_status(v.name, scale)
        console.print(f"  x{scale}: {v.params[scale]:,} parameters; weights {where} ({status})", markup=False)


@app.command("pull")
@handle_errors
def pull(
    name: Annotated[str, typer.Argument(help="Zoo name, e.g. sst-l+.")],
    scale: Annotated[int, typer.Option("--scale", "-s", help="Upscaling factor: 2, 3 or 4.")] = 4,
    hub_repo: HubRepoOption = None,
) -> None:
    """Download one model's weights into the Hugging Face cache (for later offline use)."""
    path = hub.resolve_pretrained(get_variant(name).name, scale, repo_id=hub_repo)
    console.print(f"{name} x{scale}: {path}")
