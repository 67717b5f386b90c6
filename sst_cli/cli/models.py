"""``sst models``: list, inspect and download pretrained weights, saying where each file comes from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import hub
from ..about import header_record
from ..errors import ConfigError
from ..hub.discover import CHECKPOINT_SUFFIXES as SUFFIXES
from ..hub.pins import known_sha256, remember_sha256
from ..zoo import VARIANTS, check_hub_repo, get_variant
from ._options import HubRepoOption
from .output import console, handle_errors

app = typer.Typer(
    help="List (`sst models` alone, or `sst models list`), inspect and download pretrained weights (SST, DAT).",
    no_args_is_help=False,
)

LEGEND = (
    "weights: cached = downloaded (under $HF_HOME), not cached = downloaded on first use or with "
    "`sst models pull NAME --scale S` (changed = modified since it was verified: checked again on use; "
    "damaged = a copy no pin records, e.g. from `hf download`, that fails its sha256: pull it again), "
    "bundled = shipped with sst-cli (damaged: changed since, reinstall; missing: not in the weights folder, "
    "e.g. an SST_WEIGHTS_DIR without it), "
    "- = not trained yet, manual = download it yourself "
    "(`sst models info NAME` says where) and pass --weights. from: hub OWNER/REPO@COMMIT (pinned), release URL "
    "(the authors' GitHub release), not found yet = looked for on first use (the authors' Hub collection and "
    "models by file name, then their release)."
)


def status(location: hub.Location) -> str:
    """Whether the weights are here, without touching the network."""
    if location.source == "untrained":
        return "-"
    if location.source == "off-hub":
        return "manual"
    if location.source == "bundled":
        if not location.cached:
            return "missing"
        return "bundled" if _intact(location) else "damaged"
    if location.cached and location.changed:
        return "changed"
    if location.cached and not location.pinned and not _intact(location, remembered=True):
        return "damaged"  # no pin, so no size and mtime to judge it by: hashed (once) against its LFS sha256
    return "cached" if location.cached else "not cached"


@app.callback(invoke_without_command=True)
@handle_errors
def list_models(ctx: typer.Context) -> None:
    """Table of zoo models: per scale, parameters, whether the weights are here and where they come from."""
    if ctx.invoked_subcommand is None:
        _print_table()


@app.command("list")
@handle_errors
def list_command() -> None:
    """The table of zoo models, as `sst models` alone prints it."""
    _print_table()


def _print_table() -> None:
    table = Table(title="sst-cli model zoo")
    for column in ("model", "arch", "scale", "params", "weights", "from"):
        table.add_column(column, no_wrap=column != "from", overflow="fold")  # URLs fold, never cut
    manifest = hub.load_manifest()["models"]
    for name, v in VARIANTS.items():
        for i, scale in enumerate(v.scales):
            if str(scale) in manifest.get(name, {}):
                location = hub.locate(name, scale)
                here, origin = status(location), location.origin
            else:
                here, origin = "-", "not in the manifest"
            if not v.official and here == "bundled":
                origin = f"bundled: {v.note}"
            first = i == 0
            params = f"{v.params[scale] / 1e6:.2f}M" if scale in v.params else "-"
            table.add_row(name if first else "", v.arch.upper() if first else "", f"x{scale}", params, here, origin)
    console.print(table)
    console.print(LEGEND, markup=False)


def _intact(location: hub.Location, *, remembered: bool = False) -> bool:
    """Whether a file still has the sha256 recorded for it (bundled: the manifest's; downloaded: on download; a
    cached copy no pin records: the manifest's, else its LFS sha256). ``remembered``: a hash remembered for the
    file's current size, mtime and inode is taken as is, so a listing does not read the same files every time."""
    assert location.path is not None
    if location.sha256 is None or (remembered and known_sha256(location.path) == location.sha256):
        return True
    actual = hub.sha256_of(location.path)
    if actual == location.sha256:
        remember_sha256(location.path, actual)
    return actual == location.sha256


def _check_scale(name: str, scale: int) -> int:
    """The scale, if the model exists at it (checked without importing the networks)."""
    scales = get_variant(name).scales
    if scale not in scales:
        raise ConfigError(f"{name} exists at x{' / x'.join(map(str, scales))}, not x{scale}")
    return scale


def _describe(v_name: str, scale: int, hub_repo: str | None) -> list[str]:
    """Lines about one scale's weights: file, source, local path and sha256 (no network)."""
    entry = hub.manifest_entry(v_name, scale)
    location = hub.locate(v_name, scale, repo_id=hub_repo)
    if location.source == "untrained":
        arch = get_variant(v_name).base or v_name
        return [f"weights not trained yet (sst train --model {arch} --scale {scale} --data DIR --iters N --out FILE)"]
    if location.source == "off-hub":
        return [hub.off_hub_message(entry)]
    lines = [f"weights {location.filename or entry.what} ({location.origin})"]
    if location.source == "hub" and location.commit:
        lines.append(f"repo    {location.repo_id} @ {location.commit}")
    elif location.source == "release":
        lines.append(f"url     {location.url}")
    again = f" --hub-repo {hub_repo}" if hub_repo else ""
    if location.cached:
        assert location.path is not None
        lines.append(f"path    {location.path}")
        lines.append(f"sha256  {location.sha256 or hub.sha256_of(location.path)}")
        # Hashed for real, not judged by size and mtime: damage in place keeps both, and this sha256 is pasted
        # into manifests.
        if location.source == "bundled" and not _intact(location):
            lines.append(f"        the file no longer has this sha256 (changed or damaged): {hub.weights_dir_remedy()}")
        elif not _intact(location):
            lines.append("        the file no longer has this sha256 (changed or damaged): run "
                         f"`sst models pull {v_name} --scale {scale}{again}` to download it again")  # fmt: skip
        lines += [f"{key:<7} {value}" for key, value in header_record(location.path).items()]  # sst train's record
    else:
        lines.append(f"path    not downloaded: `sst models pull {v_name} --scale {scale}{again}`")
        lines.append(f"sha256  {location.sha256 or 'recorded on download'}")
    return lines


@app.command("info")
@handle_errors
def info(
    name: Annotated[str, typer.Argument(help="Zoo name, e.g. sst-l+, or a weights file (what was detected in it).")],
    scale: Annotated[int | None, typer.Option("--scale", "-s", metavar="N", help="Only this scale.")] = None,
    hub_repo: HubRepoOption = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="NAME",
            help="With a weights file: the architecture to load it into (SST files "
            "need it: their window sizes are in no tensor).",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            metavar="JSON",
            help="With a weights file: JSON file of the architecture's constructor keywords (an SST of your own).",
        ),
    ] = None,
) -> None:
    """Hyper-parameters, parameter counts and, per scale, the weight file: where it comes from, where it is
    cached and its sha256 (no network: `sst models pull` resolves and downloads). A weights file: what was
    detected in it (an hf:// file is downloaded first if it is not cached)."""
    check_hub_repo(hub_repo, cli=True)
    if _names_a_file(name):  # a weights file: what was detected in it
        from ..about import about_file
        from .downloads import download_display

        if scale is not None:
            raise ConfigError(f"--scale applies to zoo names; '{name}' says its own scale")
        with hub.show_downloads(download_display()):
            facts = about_file(name, variant=model, config=config, cli=True)
        for key, value in facts.items():
            console.print(f"  {key:<18} {value}", markup=False, soft_wrap=True)
        return
    if model is not None or config is not None:
        option = "--model" if model is not None else "--config"
        raise ConfigError(f"{option} applies to a weights file; for a zoo model, name it: sst models info NAME")
    v = get_variant(name)
    scales = v.scales if scale is None else (_check_scale(v.name, scale),)
    console.print(f"[bold]{v.title}[/] ({v.name})")
    rows: dict[str, object] = {"weights": v.note}
    rows["architecture"] = v.arch.upper() if v.base is None else f"{v.base} (identical)"
    rows |= {key: list(value) if isinstance(value, tuple) else value for key, value in v.kwargs.items()}
    width = max(map(len, rows))
    for key, value in rows.items():
        console.print(f"  {key:<{width}} {value}", markup=False)
    for s in scales:
        first, *rest = _describe(v.name, s, hub_repo)
        console.print(f"  x{s}: {v.params[s]:,} parameters; {first}", markup=False, soft_wrap=True)
        for line in rest:
            console.print(f"      {line}", markup=False, soft_wrap=True)


def _names_a_file(name: str) -> bool:
    """NAME is a weights file unless it is a zoo name (a file of that name is ``./NAME``): an ``hf://`` reference,
    something that exists, a path, or a checkpoint's extension."""
    if name.strip().lower() in VARIANTS:
        return False
    suffix = Path(name).suffix.lower()
    return hub.is_hf_reference(name) or os.path.lexists(name) or "/" in name or os.sep in name or suffix in SUFFIXES


@app.command("pull")
@handle_errors
def pull(
    name: Annotated[str, typer.Argument(help="Zoo name, e.g. sst-l+.")],
    scale: Annotated[int, typer.Option("--scale", "-s", metavar="N", help="Upscaling factor: 2, 3 or 4.")] = 4,
    hub_repo: HubRepoOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress; print only the file's path.")] = False,
) -> None:
    """Find and download one model's weights (for later offline use) and say where they came from."""
    from .downloads import download_display

    check_hub_repo(hub_repo, cli=True)
    v = get_variant(name)
    _check_scale(v.name, scale)
    with hub.show_downloads(download_display(quiet=quiet)):
        location = hub.pull(v.name, scale, repo_id=hub_repo)
    assert location.path is not None
    from ..loader import load_model

    load_model(v.name, scale, hub_repo=hub_repo, cli=True)  # the file must hold the model (a web page is no checkpoint)
    if quiet:
        console.print(str(location.path), markup=False, soft_wrap=True)
        return
    console.print(f"{v.name} x{scale}: {location.path}", markup=False, soft_wrap=True)
    console.print(f"  from    {location.origin}", markup=False, soft_wrap=True)
    console.print(f"  sha256  {location.sha256 or hub.sha256_of(location.path)}", markup=False)
