"""Pure parts of the RPC layer (no server): header encoding, error mapping, the strict wire check."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

import nats.errors
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from hypothesis import given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats.v1 import (
    ContainerStatus,
    GetLogsRequest,
    GetStatusResponse,
    JobScript,
    JobStatus,
    PodRef,
    ResourceRequest,
    SubmitRequest,
)
from interlink_nats.services.bus.rpc import protocol, strict


def test_status_headers_round_trip() -> None:
    headers = protocol.status_headers(Status.NOT_FOUND, "no pod")
    assert protocol.parse_status(headers) == (Status.NOT_FOUND, "no pod")
    with pytest.raises(GRPCError) as caught:
        protocol.raise_for_status(headers)
    assert (caught.value.status, caught.value.message) == (Status.NOT_FOUND, "no pod")


def test_end_marker_with_ok_raises_nothing() -> None:
    headers = protocol.end_headers()
    assert headers[protocol.END] == "1"
    protocol.raise_for_status(headers)


@pytest.mark.parametrize("raw", [None, "abc", "99", "-1"])
def test_missing_or_unknown_status_is_unknown_never_ok(raw: str | None) -> None:
    headers = {} if raw is None else {protocol.STATUS: raw}
    assert protocol.parse_status(headers)[0] is Status.UNKNOWN


@pytest.mark.parametrize(("seconds", "encoded"), [(1.5, "1.500"), (0.0, "0.001"), (-3, "0.001")])
def test_timeouts_are_encoded_positive(seconds: float, encoded: str) -> None:
    assert protocol.encode_timeout(seconds) == encoded
    assert protocol.decode_timeout(encoded) == float(encoded)


@pytest.mark.parametrize("bad", ["soon", "nan", "inf", "-1", ""])
def test_bad_timeouts_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - float() and our own check both raise plain ValueError
        protocol.decode_timeout(bad)


def test_metadata_round_trips_including_binary_values() -> None:
    headers: protocol.Headers = {}
    protocol.encode_metadata([("Trace-Id", "abc"), ("sig-bin", b"\x00\x01\xff")], headers)
    headers[protocol.TIMEOUT] = "1.000"
    assert protocol.decode_metadata(headers) == {"trace-id": "abc", "sig-bin": b"\x00\x01\xff"}


@pytest.mark.parametrize("key", ["rpc-status", "Rpc-Timeout", "status"])
def test_reserved_metadata_keys_are_refused(key: str) -> None:
    with pytest.raises(GRPCError) as caught:
        protocol.encode_metadata({key: "x"}, {})
    assert caught.value.status is Status.INVALID_ARGUMENT


def test_bytes_metadata_needs_the_bin_suffix() -> None:
    with pytest.raises(GRPCError):
        protocol.encode_metadata({"token": b"\x00"}, {})


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (nats.errors.NoRespondersError(), Status.UNAVAILABLE),
        (nats.errors.TimeoutError(), Status.DEADLINE_EXCEEDED),
        (nats.errors.MaxPayloadError(), Status.RESOURCE_EXHAUSTED),
        (nats.errors.ConnectionClosedError(), Status.UNAVAILABLE),
        (nats.errors.OutboundBufferLimitError(), Status.UNAVAILABLE),
    ],
)
def test_nats_errors_become_grpc_errors(exc: Exception, status: Status) -> None:
    assert protocol.translate_nats_error(exc, "a").status is status


# --- strict wire check ---------------------------------------------------------------------------

VALID = [
    SubmitRequest(),
    SubmitRequest(
        job=JobScript(
            pod=PodRef(uid="u"),
            script="é" * 100,
            containers=["a", "b"],
            resources=ResourceRequest(cpu_millis=-5, wall_time=timedelta(seconds=90)),
        )
    ),
    GetStatusResponse(statuses=[JobStatus(containers=[ContainerStatus(exit_code=-1, started_at=datetime.now(UTC))])]),
    GetLogsRequest(tail_lines=10, offset=2**63),
]


@pytest.mark.parametrize("message", VALID, ids=lambda m: type(m).__name__)
def test_strict_check_accepts_what_betterproto_writes(message: object) -> None:
    strict.check(bytes(message), type(message))  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xff\xff", "truncated varint"),
        (b"\x0a\x05ab", "truncated"),
        (b"\x08\x01", "wire type 0, expected 2"),
        (b"\x0a\x02\x08\x01", "wire type 0, expected 2"),  # nested: JobScript.pod as a varint
        (b"\x0b", "unsupported wire type 3"),
        (b"\x00\x01", "field number 0"),
        (b"\x0a" + b"\xff" * 11, "varint longer"),
    ],
)
def test_strict_check_rejects_malformed_bytes(data: bytes, reason: str) -> None:
    with pytest.raises(strict.WireFormatError, match=reason):
        strict.check(data, SubmitRequest)


def test_strict_check_keeps_unknown_fields_if_well_framed() -> None:
    strict.check(bytes(SubmitRequest()) + b"\xf8\x01\x05", SubmitRequest)  # field 31, varint


def test_strict_check_limits_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = bytes(GetStatusResponse(statuses=[JobStatus(containers=[ContainerStatus(started_at=datetime.now(UTC))])]))
    strict.check(deep, GetStatusResponse)  # depth 3
    monkeypatch.setattr(strict, "MAX_DEPTH", 2)
    with pytest.raises(strict.WireFormatError, match="nested too deeply"):
        strict.check(deep, GetStatusResponse)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_strict_check_only_ever_raises_wire_format_error(data: bytes) -> None:
    # No IndexError/struct.error/RecursionError escapes: the server maps this one type to INVALID_ARGUMENT.
    # (What passes may still fail to parse, e.g. bad UTF-8; the server catches that too.)
    with contextlib.suppress(strict.WireFormatError):
        strict.check(data, SubmitRequest)
    with contextlib.suppress(strict.WireFormatError):
        strict.check(data, GetStatusResponse)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=50), st.lists(st.text(max_size=10), max_size=5), st.integers(-(2**63), 2**63 - 1))
def test_strict_check_accepts_any_valid_submit_request(script: str, containers: list[str], cpu: int) -> None:
    message = SubmitRequest(
        job=JobScript(script=script, containers=containers, resources=ResourceRequest(cpu_millis=cpu))
    )
    strict.check(bytes(message), SubmitRequest)
