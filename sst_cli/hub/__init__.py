"""Where the weights come from: the one place that knows.

* ``manifest``: ``weights/manifest.json``, what each zoo name and scale is (official file name, verified
  repository, sha256, bundled file, or a page for weights published off the Hub).
* ``discover``: finding an official file on the Hub by its name (the owner's collections and models).
* ``pins``: where a file was found (repository and commit, or release URL) and its sha256, kept under
  ``$HF_HOME/sst-cli`` so that later and offline runs need no API call.
* ``net``: a quick reachability probe, one-sentence errors, and the release download.
* ``progress``: the ``Display`` a front end sets to show downloads (``show_downloads``).
* ``advice``: how messages name the options that would help (``--weights PATH`` or ``source='PATH'``).
* ``resolve``: the decision path (``resolve``, ``resolve_pretrained``, ``locate``) and ``hf://`` downloads.

Downloads go through huggingface_hub (``hf_hub_download``, and its ``http_get`` for the release), so its cache
and variables (HF_HOME, HF_HUB_CACHE, HF_ENDPOINT, HF_HUB_OFFLINE, HF_TOKEN) behave as in every HF tool.
huggingface_hub is imported lazily: most commands never touch the network.
"""

from __future__ import annotations

from .manifest import (
    MANIFEST_FORMAT,
    Entry,
    bundled_models,
    hub_owner,
    load_manifest,
    manifest_entry,
    off_hub_message,
    release_base,
    weights_dir,
    weights_dir_remedy,
)
from .net import reachable
from .pins import Pin, pins_path, read_pins, release_dir
from .progress import Display, show_downloads
from .refs import (
    HF_REFERENCE_FORM,
    HF_SCHEME,
    HubFile,
    is_hf_reference,
    parse_hf_reference,
    sha256_of,
    verify_sha256,
)
from .resolve import Location, cached_path, download, forget, locate, pull, resolve, resolve_pretrained

__all__ = [
    "HF_REFERENCE_FORM",
    "HF_SCHEME",
    "MANIFEST_FORMAT",
    "Display",
    "Entry",
    "HubFile",
    "Location",
    "Pin",
    "bundled_models",
    "cached_path",
    "download",
    "forget",
    "hub_owner",
    "is_hf_reference",
    "load_manifest",
    "locate",
    "manifest_entry",
    "off_hub_message",
    "parse_hf_reference",
    "pins_path",
    "pull",
    "reachable",
    "read_pins",
    "release_base",
    "release_dir",
    "resolve",
    "resolve_pretrained",
    "sha256_of",
    "show_downloads",
    "verify_sha256",
    "weights_dir",
    "weights_dir_remedy",
]
