"""The lists a backend author used to extend by hand, checked against the registry (``backends.BACKENDS``): the kit
runs every registered backend, and a backend that refuses pod groups says why in ``NOT_RUN_REASONS`` (and only
such a backend). The others are derived or checked where they live: ``pyproject.toml``'s ``packages``
(tests/contracts/test_contracts.py), the backends' independence contract
(tests/contracts/test_import_contracts.py) and the pure
``backends/*/parse.py`` modules (``BACKEND_PARSERS``, tests/contracts/test_import_contracts.py)."""

from __future__ import annotations

from interlink_nats.submitters.backends import BACKENDS
from interlink_nats.submitters.core.backend import RunsGangs
from interlink_nats.submitters.core.gangs import NOT_RUN_REASONS, refusal

from conformance.conftest import SITES


def test_the_kit_runs_every_registered_backend() -> None:
    kinds = {str(param.values[0]) for param in SITES}
    missing = set(BACKENDS) - kinds
    assert not missing, f"backends the conformance kit does not run (add a site in tests/conformance): {missing}"
    assert "fake" in kinds, "FakeBackend, the reference, passes the kit too"


def test_exactly_the_backends_that_refuse_pod_groups_say_why() -> None:
    refusing = {name for name, entry in BACKENDS.items() if not isinstance(entry.backend_class(), RunsGangs)}
    assert set(NOT_RUN_REASONS) == refusing, (
        f"NOT_RUN_REASONS must name each registered backend without RunsGangs ({sorted(refusing)}), "
        f"and nothing else (it names {sorted(NOT_RUN_REASONS)})"
    )
    for name in refusing:
        assert NOT_RUN_REASONS[name] in refusal(name) and name in refusal(name)
