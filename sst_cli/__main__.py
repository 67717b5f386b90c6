"""``python -m sst_cli``: the same as the ``sst`` command."""

from sst_cli.cli import main

main()
