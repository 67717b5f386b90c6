"""Bundled pretrained weights and their manifest: data, read by sst_cli.hub (see README.md here)."""
