"""interlink-nats: run Kubernetes pods on remote batch sites through NATS, governed by Kueue.

Subpackages (each folder at the repository's top level is one of them):
- ``interlink_nats.gen``: generated protobuf contracts (never edited by hand).
- ``interlink_nats.kernel``: what every process shares (layout, subjects, names, quantities, NATS options).
- ``interlink_nats.services``: RPC over NATS, the gateway, pod → script building.
- ``interlink_nats.submitters``: the submitter runtime and one module per backend.
- ``interlink_nats.controller``: kueue-nats, MasterQueue → Kueue objects.

This folder itself is the CLI (``interlink-nats``, ``up``, logging and signal set-up): only entry points
import it (tests/contracts/test_import_contracts.py).
"""

from interlink_nats.kernel.version import __version__

__all__ = ["__version__"]
