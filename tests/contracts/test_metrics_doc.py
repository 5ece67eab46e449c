"""docs/metrics.md lists every series of the three processes, and only those: each process's registry is built as the
process builds it (no network: nothing is connected or started) and compared with the page's table for it.

Before: no page listed any process's metric names; gateway.md named some of the gateway's, and nothing kept it true.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from interlink_nats.controller import kube, runner
from interlink_nats.controller.observability import controller_probes
from interlink_nats.services.gateway.app import Gateway
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from interlink_nats.services.gateway.store import PodStore
from interlink_nats.submitters.edge.observability import submitter_probes
from interlink_nats.submitters.runtime import Submitter
from interlink_nats.submitters.testing import settings_for
from nats.aio.client import Client as NatsClient
from prometheus_client import CollectorRegistry, Counter

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
UNREACHABLE = "nats://127.0.0.1:1"
"""Never dialled: the registries are built, not served."""


def exported(registry: CollectorRegistry) -> dict[str, str]:
    """Name → type of every family, as a scrape names it (a counter with ``_total``; a histogram by its base)."""
    return {
        f"{family.name}_total" if family.type == "counter" else family.name: family.type
        for family in registry.collect()
    }


def documented() -> dict[str, dict[str, str]]:
    """Section (``Gateway``…) → name → type, from the rows of its table."""
    tables: dict[str, dict[str, str]] = {}
    section = ""
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        row = re.match(r"\| `([a-z_:]+)` \| (\w+) \|", line)
        if row:
            assert row.group(1) not in tables.get(section, {}), f"{row.group(1)} is listed twice"
            tables.setdefault(section, {})[row.group(1)] = row.group(2)
    return tables


def differences(process: str, registry: CollectorRegistry) -> Iterator[str]:
    registered, listed = exported(registry), documented().get(process, {})
    for name in sorted(set(registered) - set(listed)):
        yield f"{process} registers {name} ({registered[name]}): docs/metrics.md does not list it"
    for name in sorted(set(listed) - set(registered)):
        yield f"docs/metrics.md lists {name} under {process}: the {process.lower()} registers no such series"
    for name in sorted(set(listed) & set(registered)):
        if listed[name] != registered[name]:
            yield f"{name}: docs/metrics.md says {listed[name]}, the {process.lower()} registers a {registered[name]}"


def test_the_gateway_table_is_its_registry() -> None:
    settings = GatewaySettings(nats=GatewayNatsSettings(url=UNREACHABLE), default_pool="p")
    gateway = Gateway(settings, NatsClient(), PodStore())
    assert list(differences("Gateway", gateway.metrics.registry)) == []


def test_the_submitter_table_is_its_registry(tmp_path: Path) -> None:
    submitter = Submitter(settings_for(tmp_path, UNREACHABLE, pool="p"))
    assert list(differences("Submitter", submitter_probes(submitter).registry)) == []


async def test_the_controller_table_is_its_registry() -> None:
    api = kube.LightkubeApi.from_server("http://127.0.0.1:1")
    try:
        assert list(differences("Controller", controller_probes(runner.Controller(api)).registry)) == []
    finally:
        await api.close()


def test_a_series_missing_from_the_page_or_listed_without_one_is_named() -> None:
    """The check itself: a series the page lacks and a row with no series are both reported."""
    registry = CollectorRegistry()
    Counter("interlink_gateway_new_thing", "a series nobody listed", registry=registry)
    found = list(differences("Gateway", registry))
    assert "Gateway registers interlink_gateway_new_thing_total (counter): docs/metrics.md does not list it" in found
    assert any(
        line.startswith("docs/metrics.md lists interlink_gateway_requests_total under Gateway") for line in found
    )
