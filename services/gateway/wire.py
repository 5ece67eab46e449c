"""interLink plugin wire format: request parsing and reply building, with no I/O.

The shapes follow what the interLink Go API server really sends (0.3 → 0.6.2), not the
upstream OpenAPI file: ``/create`` takes an object or a one-element array, ``/status`` and
``/getLogs`` are GETs with JSON bodies, logs options use ``Bytes`` (not ``LimitBytes``).
Every parse error names the offending field so interLink can relay it to the user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, TypeVar

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire
from interlink_nats.kernel import quantities, reported
from interlink_nats.kernel.names import is_pod_uid

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

GO_ZERO_TIME_PREFIX = "0001-01-01"


class BadRequest(ValueError):
    """A request body interLink (or anyone) sent that we cannot accept; becomes an HTTP 4xx."""

    def __init__(self, field: str, message: str, status_code: int = 400) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
        self.status_code = status_code


_V = TypeVar("_V")


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(data, separators=(",", ":"))`` builds an encoder on every call; this one is built once."""


def dumps(data: Any) -> bytes:
    """JSON as the gateway answers it: compact, UTF-8."""
    return _COMPACT.encode(data).encode()


def parse_json(body: bytes) -> Any:
    if not body.strip():
        raise BadRequest("body", "empty request body; expected JSON")
    try:
        return json.loads(body)
    except RecursionError:
        raise BadRequest("body", "invalid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, integers past Python's digit limit
        raise BadRequest("body", f"invalid JSON: {exc}") from None


_SURROGATE_SOURCES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""In a UTF-8 body, the only ways json.loads yields a UTF-16 surrogate: a ``\\uD800``-``\\uDFFF`` escape,
or the code unit encoded as bytes (json decodes with ``surrogatepass``: ED A0..BF xx)."""


def may_hold_surrogates(body: bytes) -> bool:
    """False only when the decoded body certainly holds no surrogate, so the exact (costly) check can be skipped.

    A paired surrogate escape also answers True: the exact check then tells pairs from lone ones.
    """
    if json.detect_encoding(body) != "utf-8":  # UTF-16/32 (or a BOM): no cheap answer
        return True
    if b"\\ud" not in body and b"\\uD" not in body and b"\xed" not in body:
        return False  # three substring scans: ~6 µs for an interLink-shaped pod, the regex alone ~40 µs
    return _SURROGATE_SOURCES.search(body) is not None


def _expect(value: object, kind: type[_V], field: str, what: str) -> _V:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(field, f"expected {what}, got {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True)
class PodIdentity:
    uid: str
    namespace: str
    name: str


def pod_identity(pod: Any, field: str = "pod") -> PodIdentity:
    """uid/namespace/name of a v1.Pod dict, each required and a string."""
    _expect(pod, dict, field, "a Pod object")
    meta = _expect(pod.get("metadata"), dict, f"{field}.metadata", "an object")
    values = []
    for key in ("uid", "namespace", "name"):
        value = meta.get(key)
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{field}.metadata.{key}", "required, must be a non-empty string")
        values.append(value)
    return PodIdentity(*values)


def parse_create(body: bytes) -> dict[str, Any]:
    """A RetrievedPodData dict, from the ≥0.5 object or the ≤0.4 one-element array."""
    return read_create(body)[0]


def read_create(body: bytes) -> tuple[dict[str, Any], PodIdentity]:
    """:func:`parse_create` and the pod's identity it checked on the way (the use case needs both)."""
    data = parse_json(body)
    if isinstance(data, list):
        if len(data) != 1:
            raise BadRequest("body", f"expected one RetrievedPodData (or a one-element array), got {len(data)}")
        data = data[0]
    data = _expect(data, dict, "body", "a RetrievedPodData object")
    identity = pod_identity(data.get("pod"), "pod")
    uid = identity.uid
    if not is_pod_uid(uid):  # what a submitter accepts: the UID names the job directory
        raise BadRequest("pod.metadata.uid", f"{uid!r} is not a pod UID: letters, digits, '.', '_' and '-' only")
    if may_hold_surrogates(body):  # Go never sends them; past here they would break proto encoding
        try:
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise BadRequest("pod", "contains a lone UTF-16 surrogate (\\udXXX): not valid Unicode") from None
    spec = _expect(data["pod"].get("spec"), dict, "pod.spec", "an object")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise BadRequest("pod.spec.containers", "required, must be a non-empty list")
    if data.get("container") is not None:
        _expect(data["container"], list, "container", "a list")
    return data, identity


def parse_status(body: bytes) -> list[PodIdentity]:
    """The pods of a ``/status`` call; ``[]`` is interLink's ping."""
    data = parse_json(body)
    _expect(data, list, "body", "a JSON array of pods")
    return [pod_identity(pod, f"[{i}]") for i, pod in enumerate(data)]


def parse_delete(body: bytes) -> PodIdentity:
    data = parse_json(body)
    return pod_identity(data, "body")


@dataclass(frozen=True, slots=True)
class LogRequest:
    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    tail: int | None
    limit_bytes: int | None
    follow: bool
    timestamps: bool
    previous: bool
    since: datetime | None


def _parse_go_time(value: Any, field: str) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise BadRequest(field, "expected an RFC 3339 time string")
    if value.startswith(GO_ZERO_TIME_PREFIX):
        return None  # Go's zero time means "unset"
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(field, f"not an RFC 3339 time: {value!r}") from None
    try:  # in UTC, a time at the edge of years 1..9999 can fall outside them (and outside a proto Timestamp)
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except OverflowError:
        raise BadRequest(field, f"out of range: {value!r}") from None


LOG_OPTS = frozenset({"Tail", "Bytes", "SinceSeconds", "SinceTime", "Timestamps", "Previous", "Follow"})
"""The JSON keys of interLink's ``ContainerLogOpts``; any other key in ``Opts`` is a 400 naming it."""


def parse_logs(body: bytes, now: datetime | None = None) -> LogRequest:
    """A ``LogStruct``; ``SinceSeconds`` is turned into an absolute time against ``now``."""
    data = _expect(parse_json(body), dict, "body", "a LogStruct object")
    fields = {}
    for key in ("PodUID", "Namespace", "PodName", "ContainerName"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise BadRequest(key, "required, must be a non-empty string")
        fields[key] = value
    opts = data.get("Opts") or {}
    _expect(opts, dict, "Opts", "an object")
    unknown = sorted(set(opts) - LOG_OPTS)
    if unknown:  # as for pod fields: a misspelt option must not silently mean "unset"
        name = unknown[0] if unknown[0].isidentifier() else json.dumps(unknown[0])  # one line, whatever was sent
        raise BadRequest(f"Opts.{name}", f"unknown option (known: {', '.join(sorted(LOG_OPTS))})")

    def int_opt(key: str) -> int:
        value = opts.get(key, 0)
        if value is None:
            return 0
        _expect(value, int, f"Opts.{key}", "an integer")
        if value < 0:
            raise BadRequest(f"Opts.{key}", "must not be negative")
        return min(int(value), 2**63 - 1)  # the RPC field is an int64; more than that means no limit anyway

    def bool_opt(key: str) -> bool:
        value = opts.get(key, False)
        return bool(_expect(value, bool, f"Opts.{key}", "a boolean")) if value is not None else False

    tail, limit, since_seconds = int_opt("Tail"), int_opt("Bytes"), int_opt("SinceSeconds")
    since = _parse_go_time(opts.get("SinceTime"), "Opts.SinceTime")
    if since_seconds:
        if since is not None:
            raise BadRequest("Opts", "SinceSeconds and SinceTime are mutually exclusive")
        try:
            since = (now or datetime.now(UTC)) - timedelta(seconds=since_seconds)
        except OverflowError:
            since = None  # further back than year 1: every line, as if unset
    return LogRequest(
        pod_uid=fields["PodUID"],
        namespace=fields["Namespace"],
        pod_name=fields["PodName"],
        container=fields["ContainerName"],
        tail=tail or None,
        limit_bytes=limit or None,
        follow=bool_opt("Follow"),
        timestamps=bool_opt("Timestamps"),
        previous=bool_opt("Previous"),
        since=since,
    )


def _rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


ContainerView = fastwire.ContainerStatusView
"""The fields of a ``ContainerStatus`` as :func:`container_views` reads them (the phase as an int)."""


def container_views(encoded: bytes) -> list[ContainerView]:
    """The containers of an encoded ``JobStatus``, read straight from the protobuf wire format.

    Why not betterproto: parsing a whole JobStatus (pod ref, timestamps, enums as objects) costs
    ~10 times more, and the gateway does it for each pod's first ``/status`` after a restart and
    after every change, at up to 100,000 pods. The reader is generated from proto/ and takes the plain
    shape only: raises ValueError on any other bytes; the caller then falls back to betterproto.
    """
    status = fastwire.read_job_status(encoded)
    if status is None:
        raise ValueError("not a JobStatus of the plain shape")
    return status.containers


def container_status_json(status: pb.ContainerStatus | ContainerView, image: str) -> dict[str, Any]:
    """One ``v1.ContainerStatus`` as the VK expects it (state drives the pod phase)."""
    state: dict[str, Any]
    if status.phase == pb.ContainerPhase.TERMINATED:
        terminated: dict[str, Any] = {"exitCode": status.exit_code if status.exit_code is not None else 0}
        if status.reason:
            terminated["reason"] = status.reason
        if status.message:
            terminated["message"] = status.message
        if status.started_at is not None:
            terminated["startedAt"] = _rfc3339(status.started_at)
        if status.finished_at is not None:
            terminated["finishedAt"] = _rfc3339(status.finished_at)
        state = {"terminated": terminated}
    elif status.phase == pb.ContainerPhase.RUNNING:
        state = {"running": {"startedAt": _rfc3339(status.started_at)} if status.started_at else {}}
    else:
        waiting: dict[str, Any] = {}
        if status.reason:
            waiting["reason"] = status.reason
        if status.message:
            waiting["message"] = status.message
        state = {"waiting": waiting}
    return {
        "name": status.name,
        "state": state,
        "ready": status.phase == pb.ContainerPhase.RUNNING and status.ready is not False,  # unset: no probe
        "restartCount": 0,
        "image": image,
        "imageID": "",
    }


def pod_status_json(identity: PodIdentity, job_id: str, status: pb.JobStatus, images: dict[str, str]) -> dict[str, Any]:
    """interLink's ``PodStatus``: every init container and container, each time."""
    return containers_status_json(identity, job_id, status.containers, images)


def containers_status_json(
    identity: PodIdentity,
    job_id: str,
    containers: Sequence[pb.ContainerStatus | ContainerView],
    images: dict[str, str],
) -> dict[str, Any]:
    """:func:`pod_status_json` from the containers alone (decoded by betterproto or by :func:`container_views`)."""
    init = [container_status_json(c, images.get(c.name, "")) for c in containers if c.init]
    main = [container_status_json(c, images.get(c.name, "")) for c in containers if not c.init]
    return {
        "name": identity.name,
        "UID": identity.uid,
        "namespace": identity.namespace,
        "JID": job_id,
        "initContainers": init,
        "containers": main,
    }


def _node_share(report: pb.ResourceReport, resource: str, total: str) -> Fraction:
    """A pool's part of the virtual node's capacity: what its jobs hold plus what is free at its site now
    (capped by its total), the figures kueue-nats gives Kueue under ``capacity: Free``; its total when the
    site cannot tell what is free."""
    cap = quantities.parse(total)
    free = report.free.get(resource)
    if free is None or not quantities.is_valid(free):
        return cap
    held = report.held.get(resource, "0")
    held_value = quantities.parse(held) if quantities.is_valid(held) else Fraction(0)
    return max(Fraction(0), min(cap, quantities.parse(free) + held_value))


def ping_response(reports: list[pb.ResourceReport], *, free: bool = False) -> dict[str, Any]:
    """A ``PingResponse`` aggregating live pools' capacity and taints: their totals, or with ``free``
    (``ping_free_capacity``, to go with kueue-nats ``capacity: Free``) held + free where a pool says what is free.

    Resources that no pool reports are left out rather than sent as "0", which would drain the
    virtual node (interLink #558). The reports come checked (``pools.checked_report``); a figure that is still
    malformed or negative here is that pool's alone to lose, and a sum stays within Kubernetes' int64.
    """
    totals: dict[str, Fraction] = {}
    taints: dict[tuple[str, str, str], dict[str, str]] = {}
    for report in reports:
        for resource, quantity in report.capacity.items():
            try:
                share = _node_share(report, resource, quantity) if free else quantities.parse(quantity)
                if share >= 0:
                    totals[resource] = totals.get(resource, Fraction(0)) + share
            except quantities.InvalidQuantityError:
                continue  # a pool's malformed figure must not break the ping
        for taint in report.taints:
            taints[(taint.key, taint.value, taint.effect)] = {
                "key": taint.key,
                "value": taint.value,
                "effect": taint.effect or "NoSchedule",
            }
    resources: dict[str, Any] = {}
    accelerators = []
    for resource, total in sorted(totals.items()):
        if total <= 0:
            continue
        total = reported.within_int64(resource, total)
        if resource in ("cpu", "memory", "pods"):
            resources[resource] = quantities.format_quantity(total, resource)
        elif "/" in resource:
            accelerators.append({"resourceType": resource, "available": quantities.format_quantity(total, resource)})
    if accelerators:
        resources["accelerators"] = accelerators
    return {"status": "ok", "resources": resources, "taints": list(taints.values())}
