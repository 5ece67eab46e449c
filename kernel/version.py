"""The installed interlink-nats version, for the processes that announce it (RPC discovery, BuildConfig)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("interlink-nats")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"
