"""The installed version, in a module of its own: any module may import it without importing the package's API."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sst-cli")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
