"""The shared kernel's rules, tested directly (they are pure)."""

from __future__ import annotations

import pytest
from interlink_nats.kernel import layout, quantities
from interlink_nats.kernel.names import (
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    is_pod_uid,
    is_qualified_name,
)
from interlink_nats.kernel.subjects import InvalidPoolNameError, Role, inbox_prefix, validate_pool


@pytest.mark.parametrize("name", ["a", "a-b", "0", "x" * 63, "abc-123"])
def test_dns_labels_accepted(name: str) -> None:
    assert is_dns_label(name)


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a.b", "a_b", "x" * 64, "abc\n", None, 5])
def test_dns_labels_rejected(name: object) -> None:
    assert not is_dns_label(name)


@pytest.mark.parametrize("name", ["a", "a.b", "a-b.c-d", "0.0", ("a" * 63 + ".") * 3 + "a" * 61, "x" * 100])
def test_dns_subdomains_accepted(name: str) -> None:
    assert is_dns_subdomain(name)


@pytest.mark.parametrize(
    "name", ["", "A", "a..b", ".a", "a.", "a-.b", "a_b", "x" * 254, "lab-x/../team-b", "a\n", "lab-*", None, 5]
)
def test_dns_subdomains_rejected(name: object) -> None:
    assert not is_dns_subdomain(name)


@pytest.mark.parametrize(
    "key", ["app", "A", "My_Name.x-1", "example.com/MyName", "a.b/c", "x" * 63, "k8s.io/" + "n" * 63]
)
def test_qualified_names_accepted(key: str) -> None:
    assert is_qualified_name(key)


@pytest.mark.parametrize(
    "key",
    ["", "/a", "a/", "a/b/c", "Ex.com/a", "-a", "a-", "_a", "x" * 64, "a b", "a\n", "é", ("a" * 254) + "/b", None],
)
def test_qualified_names_rejected(key: object) -> None:
    assert not is_qualified_name(key)


@pytest.mark.parametrize("value", ["", "a", "A.b-c_D", "0", "x" * 63])
def test_label_values_accepted(value: str) -> None:
    assert is_label_value(value)


@pytest.mark.parametrize("value", ["x" * 64, "-a", "a.", "a/b", "g\nid > /tmp/x #", "a\n", " ", "é", None, 1])
def test_label_values_rejected(value: object) -> None:
    assert not is_label_value(value)


@pytest.mark.parametrize("uid", ["6f1c2e9a-1111-2222-3333-444455556666", "a", "A.b_c-d", "x" * 128])
def test_pod_uids_accepted(uid: str) -> None:
    assert is_pod_uid(uid)


@pytest.mark.parametrize("uid", ["", ".", "..", "-a", "a/b", "x" * 129, "a\n", None])
def test_pod_uids_rejected(uid: object) -> None:
    assert not is_pod_uid(uid)


def test_pool_names_follow_the_dns_label_rule() -> None:
    assert validate_pool("hpc-a") == "hpc-a"
    with pytest.raises(InvalidPoolNameError, match="DNS label"):
        validate_pool("hpc.a")


def test_inbox_prefixes_per_role() -> None:
    assert inbox_prefix(Role.GATEWAY) == "_INBOX.gateway"
    assert inbox_prefix(Role.CONTROLLER) == "_INBOX.controller"
    assert inbox_prefix(Role.POOL, "site-a") == "_INBOX.pool.site-a"
    with pytest.raises(ValueError, match="needs a pool"):
        inbox_prefix(Role.POOL)


def test_minimum_and_maximum_keep_the_first_of_equal_values_as_spelled() -> None:
    assert quantities.minimum("1Gi", "1024Mi", "2Gi") == "1Gi"
    assert quantities.minimum("2Gi", "1024Mi", "1Gi") == "1024Mi"
    assert quantities.maximum("1", "1000m", "500m") == "1"
    assert quantities.maximum("500m", "1000m", "1") == "1000m"
    for pick in (quantities.minimum, quantities.maximum):
        with pytest.raises(ValueError, match="at least one quantity"):
            pick()


def test_layout_line_round_trips_and_stays_one_line() -> None:
    entries: list[layout.LayoutEntry] = [
        layout.LayoutDir("volumes/cfg", 0o755),
        layout.LayoutDir("rootfs/main/new\nline"),
        layout.LayoutLink("rootfs/main/etc/app", "volumes/cfg"),
    ]
    line = layout.layout_line(entries)
    assert "\n" not in line
    script = f"#!/bin/bash\n# comment\n{line}\necho hi\n"
    assert layout.parse_layout(script) == entries
    assert layout.parse_layout("#!/bin/bash\necho hi\n") is None, "not a rendered script"


@pytest.mark.parametrize(
    "items",
    [
        '[["d","/etc",null]]',
        '[["d","volumes/../../x",null]]',
        '[["l","rootfs/a","/etc"]]',
        '[["d","",null]]',
        '[["d","volumes/x","755"]]',
        '[["d","volumes/x",493]]',
        '[["x","volumes/x",null]]',
        '{"d":1}',
        "[",
    ],
)
def test_layout_line_rejects_paths_outside_the_job_dir_and_bad_entries(items: str) -> None:
    with pytest.raises(ValueError, match=r"^layout: "):
        layout.parse_layout(f"#!/bin/bash\n{layout.LAYOUT_PREFIX}{items}\n")


def test_nats_warnings_drop_aiohttps_ssl_context_repr() -> None:
    """wss:// connection errors ended with ``ssl:<ssl.SSLContext object at 0x…>`` in every warning line."""
    from interlink_nats.kernel.nats_connection import _SSL_REPR

    raw = "Cannot connect to host nats.example:443 ssl:<ssl.SSLContext object at 0x7f3a> [Connection refused]"
    assert _SSL_REPR.sub("", raw) == "Cannot connect to host nats.example:443 [Connection refused]"


def test_a_reconnect_tries_the_servers_not_just_lost_first() -> None:
    """The lost server (named by its INFO's host and port) is tried last among those tried least: a host gone
    from the network would hold that attempt for the connect timeout. Once the others failed too, it is next."""
    from urllib.parse import urlparse

    from interlink_nats.kernel.nats_connection import NatsConnectionSettings, connect_options
    from nats.aio.client import Server

    for urls, info in (
        (["nats://10.0.0.1:4222", "nats://10.0.0.2:4222", "nats://10.0.0.3:4222"], {"host": "10.0.0.2", "port": 4222}),
        (
            ["nats://127.0.0.1:4001", "nats://127.0.0.1:4002", "nats://127.0.0.1:4003"],
            {"host": "0.0.0.0", "port": 4002},
        ),
    ):
        pick = connect_options(NatsConnectionSettings(url=",".join(urls)), name="t")["reconnect_to_server_handler"]
        servers = [Server(urlparse(u)) for u in urls]
        lost = servers[1]
        for order in (servers, servers[::-1], [lost, servers[0]]):
            chosen, delay = pick(order, info)
            assert chosen is not lost and 0 < delay <= 0.5
        for other in (servers[0], servers[2]):
            other.reconnects = 1
        assert pick(servers, info)[0] is lost
