"""The model zoo: one typed table of names, one factory.

Each entry names an architecture (a room of ``archs``) and its constructor keywords; the weights'
whereabouts are data in ``weights/manifest.json`` (``hub/``). SST hyper-parameters and parameter counts
are those of the authors' option files (commit bcd6132). A ``+`` variant has exactly the shapes of its
base; only its window sizes differ, which is why window sizes come from the variant name and can never
be read from a checkpoint.

DAT (Chen et al., ICCV 2023) has its four official variants here too, with the keywords of the authors'
``options/Test/*.yml``; their weights are on the authors' Google Drive, not on the Hugging Face Hub.

Besides the official variants (the paper's weights), the zoo has entries whose weights sst-cli trained
itself, such as ``sst-light-291``: an official architecture (``base``) with other weights. They get their
own names so that an official name always means the paper's weights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .checks import check_scale_type, option_name
from .choices import DEFAULT_MODEL
from .errors import ConfigError

if TYPE_CHECKING:  # the networks (torch) load on first use: listing the zoo stays instant
    from .archs import ArchConfig, SRNetwork

SCALES = (2, 3, 4)

WINDOWS = (16, 32, 64, 16, 32, 64)
WINDOWS_LIGHT = (8, 16, 32, 16, 32, 64)
WINDOWS_PLUS = (16, 32, 48, 32, 48, 96)


@dataclass(frozen=True)
class Variant:
    """One zoo entry: ``arch`` (a key of ``archs.ARCHITECTURES``) with ``kwargs``, its constructor keywords
    except the scale; ``params`` maps scale to the published parameter count.

    ``base`` is None for the official variants; for entries whose weights sst-cli trained, it names the
    official variant whose architecture they use, and ``note`` says where the weights come from.
    """

    name: str
    title: str
    arch: str
    kwargs: Mapping[str, Any]
    params: dict[int, int]
    base: str | None = None
    note: str = "the paper's weights (authors' checkpoints)"
    scales: tuple[int, ...] = field(default=SCALES)

    @property
    def official(self) -> bool:
        """True for the paper's variants; False for entries with weights trained by sst-cli."""
        return self.base is None

    def config(self, scale: int) -> ArchConfig:
        """Validated constructor config at ``scale``."""
        from .archs import get_architecture

        check_scale_type(scale)
        if scale not in self.scales:
            raise ConfigError(f"{self.name} exists at x{' / x'.join(map(str, self.scales))}, not x{scale}")
        arch = get_architecture(self.arch)
        return arch.make_config({**self.kwargs, arch.scale_key: scale})


def _sst(
    name: str,
    title: str,
    dim: int,
    n_blocks: int,
    windows: tuple[int, ...],
    heads: int,
    ranks: tuple[int, ...],
    exp_ratio: float,
    upsampler: str,
    intermediate: int,
    params: dict[int, int],
) -> Variant:
    kwargs = {
        "dim": dim,
        "window_sizes": windows,
        "num_heads": (heads,) * len(windows),
        "n_blocks": n_blocks,
        "exp_ratio": exp_ratio,
        "upsampler_type": upsampler,
        "ranks": ranks,
        "intermediate_dim": intermediate,
    }
    return Variant(name, title, "sst", kwargs, params)


def _light(name: str, title: str, windows: tuple[int, ...]) -> Variant:
    counts = {2: 893_340, 3: 899_835, 4: 908_928}
    return _sst(name, title, 48, 5, windows, 3, (16, 16, 16, 24, 24, 24), 1.5, "pixelshuffle_direct", 64, counts)


def _base(name: str, title: str, windows: tuple[int, ...]) -> Variant:
    counts = {2: 11_676_707, 3: 11_861_347, 4: 12_119_843}
    return _sst(name, title, 180, 6, windows, 6, (18, 18, 18, 34, 34, 34), 1.25, "pixelshuffle", 64, counts)


def _large(name: str, title: str, windows: tuple[int, ...]) -> Variant:
    counts = {2: 20_314_947, 3: 20_730_147, 4: 21_311_427}
    return _sst(name, title, 192, 8, windows, 6, (16, 16, 16, 32, 32, 32), 2.0, "pixelshuffle", 96, counts)


def _ours(base: Variant, name: str, title: str, note: str) -> Variant:
    """An official architecture under its own name, for weights trained by sst-cli (never the paper's)."""
    return replace(base, name=name, title=title, base=base.name, note=note)


_XL_PLUS = _sst(
    "sst-xl+", "SST-XL+", 224, 10, WINDOWS_PLUS, 7, (16, 16, 16, 32, 32, 32), 2.0, "pixelshuffle", 96,
    {2: 33_892_195, 3: 34_307_395, 4: 34_888_675},
)  # fmt: skip


def _dat(name: str, title: str, params: tuple[int, int, int], **kwargs: Any) -> Variant:
    """A DAT variant with the keywords of the authors' ``options/Test/test_DAT*_x{2,3,4}.yml``."""
    common = {"img_size": 64, "in_chans": 3, "img_range": 1.0, "upsampler": "pixelshuffle"}
    return Variant(name, title, "dat", common | kwargs, dict(zip(SCALES, params, strict=True)))


# Parameter counts as built; the paper's (x4): DAT 14.80M, DAT-S 11.21M, DAT-2 11.21M, DAT-light 573K.
_DAT_BASE = {"embed_dim": 180, "depth": (6,) * 6, "num_heads": (6,) * 6, "resi_connection": "1conv"}
DAT_VARIANTS = (
    _dat("dat-light", "DAT-light", (553_290, 561_405, 572_766), embed_dim=60, depth=(18,), num_heads=(6,),
         split_size=(8, 32), expansion_factor=2.0, resi_connection="3conv", upsampler="pixelshuffledirect"),
    _dat("dat-s", "DAT-S", (11_064_419, 11_249_059, 11_212_131), **_DAT_BASE, split_size=(8, 16),
         expansion_factor=2.0),
    _dat("dat-2", "DAT-2", (11_064_419, 11_249_059, 11_212_131), **_DAT_BASE, split_size=(8, 32),
         expansion_factor=2.0),
    _dat("dat", "DAT", (14_654_339, 14_838_979, 14_802_051), **_DAT_BASE, split_size=(8, 32),
         expansion_factor=4.0),
)  # fmt: skip


# SSTReal-X4: the authors' real-world model (``EDMUNet``, option file SSTReal_X4.yaml), x4 only.
_REAL = Variant(
    "sst-real",
    "SSTReal-X4",
    "sstreal",
    {
        "img_resolution": 192, "img_channels": 3, "sigma_data": 0.5, "sigma_min": 0, "use_skip": True,
        "sampling_ig_lambda": 2.0, "dim": 192, "intermediate_dim": 96, "emb_channels": 768,
        "noise_channels": 192, "num_blocks": 14, "fuse_lr_till": 6, "ig_idx": 6, "attn_type": "RIB",
        "window_sizes": WINDOWS, "num_heads": (6,) * 6, "ranks": (16, 16, 16, 32, 32, 32),
        "rib_hidden_dim": 32, "rib_n_freqs": 10, "exp_ratio": 3, "gate_type": "DWC", "drop_p": 0.05,
    },
    {4: 54_986_502},
    note="the authors' real-world weights (noisy, blurred, JPEG photos; generative)",
    scales=(4,),
)  # fmt: skip

_LIGHT = _light("sst-light", "SST-light", WINDOWS_LIGHT)
TRAINED_291 = "trained by sst-cli on 291 images (T91 + BSD200), not the paper's weights"

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        _LIGHT,
        _light("sst-light+", "SST-light+", WINDOWS_PLUS),
        _base("sst", "SST", WINDOWS),
        _base("sst+", "SST+", WINDOWS_PLUS),
        _large("sst-l", "SST-L", WINDOWS),
        _large("sst-l+", "SST-L+", WINDOWS_PLUS),
        _XL_PLUS,
        *DAT_VARIANTS,
        _REAL,
        _ours(_LIGHT, "sst-light-291", "SST-light (sst-cli, 291 images)", TRAINED_291),
    )
}


def list_models(*, official_only: bool = False) -> list[str]:
    """Zoo names: the official variants smallest first, then the entries with weights trained by sst-cli."""
    return [name for name, v in VARIANTS.items() if v.official or not official_only]


def check_scale(scale: int) -> int:
    if scale not in SCALES:
        raise ConfigError(f"scale must be one of {', '.join(map(str, SCALES))}, got {scale}")
    return scale


def get_variant(name: str, *, arch: str | None = None) -> Variant:
    """Look a variant up by name, case-insensitively; an unknown name's message lists the variants of ``arch``
    only, when given (``sst train`` offers the SST ones)."""
    variant = VARIANTS.get(name.strip().lower())
    if variant is None:
        import difflib

        names = [key for key, known in VARIANTS.items() if arch is None or known.arch == arch]
        close = difflib.get_close_matches(name.strip().lower().replace("_", "-"), names, n=1, cutoff=0.6)
        guess = f"did you mean {close[0]}? " if close else ""
        raise ConfigError(f"unknown model {name!r}; {guess}choose one of {', '.join(names)}")
    return variant


def create_model(name: str, scale: int) -> SRNetwork:
    """An untrained network of a zoo variant (works under ``torch.device('meta')``). ``name`` is a zoo name: a
    ``Path`` met "'PosixPath' object has no attribute 'strip'"; weights in a file are ``load_model``'s."""
    from .archs import get_architecture

    if not isinstance(name, str):
        raise ConfigError(
            f"create_model takes a zoo name such as {DEFAULT_MODEL!r}, got {name!r}; to load weights from a file, "
            "use load_model(path)"
        )
    variant = get_variant(name)
    return get_architecture(variant.arch).build(variant.config(scale))


#: A Hub repository id: OWNER/NAME, each of letters, digits, '-', '_' and '.' (the Hub's own rule, less its length
#: limits), so that a mistyped one is refused before anything is looked up.
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+", re.ASCII)


def check_hub_repo(hub_repo: str | None, *, cli: bool = False, given: str | None = None) -> None:
    """Refuse a ``hub_repo`` that is no repository id, before anything is looked up (huggingface_hub's own words
    named an ``hf://`` address the user never typed). ``cli``: name it ``--hub-repo``, not the keyword; ``given``:
    how it was given otherwise (``SST_HUB_REPO='bad'``)."""
    if hub_repo is not None and not _REPO_ID.fullmatch(hub_repo):
        given = given or (f"--hub-repo {hub_repo!r}" if cli else f"hub_repo={hub_repo!r}")
        raise ConfigError(f"{given} is not a Hugging Face repository: give it as OWNER/NAME")


def check_model_choice(
    model: str | None,
    scale: int | None,
    weights: object | None,
    config: object | None,
    hub_repo: str | None,
    *,
    cli: bool = False,
) -> None:
    """What ``--model``, ``--scale``, ``--weights``, ``--config`` and ``--hub-repo`` say together, before any file
    is read: contradictions, an unknown zoo name (with a suggestion), a scale the model does not have (the
    default model's too: x20000 was planned, then refused as too big for memory). ``cli``: name the options as
    the command line spells them, not as the keywords of ``ModelSpec`` and ``Upscaler``."""
    config_name, model_name = option_name("config", cli), option_name("model", cli)
    weights_name, hub_name = option_name("weights", cli), option_name("hub_repo", cli)
    if config is not None and weights is None:
        into = f"with {weights_name}" if cli else f"as {weights_name}="
        raise ConfigError(f"{config_name} describes an architecture; give the weights to load into it {into}")
    if config is not None and model is not None:
        raise ConfigError(f"{config_name} and {model_name} both say which architecture to build: give one of them")
    if hub_repo is not None and weights is not None:
        raise ConfigError(
            f"{hub_name} says where zoo weights come from; {weights_name} names the file itself: drop one"
        )
    check_hub_repo(hub_repo, cli=cli)
    if scale is not None:
        check_scale_type(scale)
        if scale < 1:
            raise ConfigError(f"scale must be a positive integer, got {scale!r}")
    if model is None and weights is None:
        model = DEFAULT_MODEL
    if model is not None and config is None:
        variant = get_variant(model)  # unknown names fail here, naming the zoo
        if scale is not None:
            variant.config(check_scale(scale))
