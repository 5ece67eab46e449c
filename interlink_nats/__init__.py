"""interlink-nats: run Kubernetes pods on remote batch sites through NATS, governed by Kueue.

Subpackages (each folder at the repository's top level is one of them):
- ``interlink_nats.gen``: generated protobuf contracts (never edited by hand).
- ``interlink_nats.services``: RPC over NATS, the gateway, pod → script building.
- ``interlink_nats.submitters``: the submitter runtime and one module per backend.
- ``interlink_nats.controller``: kueue-nats, MasterQueue → Kueue objects.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("interlink-nats")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"
