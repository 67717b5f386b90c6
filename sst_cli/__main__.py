"""``python -m sst_cli``: the same as the ``sst`` command."""

from sst_cli.cli import entry_point

entry_point()
