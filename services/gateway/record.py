"""One pod as the gateway knows it: compact, because a gateway tracks up to ~100,000 of them.

Kept apart from :mod:`store` (the table and its redis mirror): what a record holds and how it is encoded
changes for memory's sake (P6), the table's rules for consistency's sake.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterable
from itertools import chain
from typing import Any

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire
from interlink_nats.services.gateway.usage import Allowance, shared_allowance
from interlink_nats.services.gateway.wire import PodIdentity, container_views, containers_status_json, pod_status_json
from interlink_nats.services.gateway.wire import dumps as wire_dumps


class PodRecord:
    """What the gateway knows about one pod; enough to answer interLink with no NATS round trip.

    A gateway tracks up to ~100,000 of these, so the record is compact (P6): slots, shared
    strings for values many pods repeat (namespace, pool), one shared shape per distinct list of
    containers and images (pods of one template repeat it), the last status kept as its protobuf
    encoding with only its state decoded, less what the record holds already (the pod, the pool, the
    job id: 70 to 150 bytes a pod), and when it was last heard of as a time shared by the pods heard
    of in the same second.
    The encoding is what redis stores too, so a restart restores pods without parsing a status.
    """

    __slots__ = (
        "_shape",
        "_state",
        "_status",
        "_status_json",
        "allowance",
        "heard_at",
        "job_id",
        "name",
        "namespace",
        "pool",
        "revision",
        "uid",
    )

    def __init__(
        self,
        uid: str,
        namespace: str,
        name: str,
        pool: str,
        job_id: str = "",
        init_containers: Iterable[str] = (),
        containers: Iterable[str] = (),
        images: dict[str, str] | None = None,
        status: pb.JobStatus | None = None,
        revision: int = 0,
        allowance: Allowance | None = None,
    ) -> None:
        self.uid = uid
        self.namespace = _intern(namespace)
        self.name = name
        self.pool = _intern(pool)
        self.job_id = job_id
        self._shape = _shape(init_containers, containers, images or {})
        if status is None:
            self._status: bytes | None = None
            self._state: int | None = None
        else:
            self.status = status
        self.revision = revision
        self.allowance = allowance
        """The pod's request and creation minute, which bound the usage its pool reports (``gateway.usage``);
        None: not known here (a record rebuilt from a pool's job list)."""
        self.heard_at = heard_now()
        """When the pool last told us about this pod (event, pull or create), to the second; not persisted."""
        self._status_json: bytes | None = None

    @property
    def init_containers(self) -> tuple[str, ...]:
        return self._shape[0]

    @property
    def containers(self) -> tuple[str, ...]:
        return self._shape[1]

    @property
    def images(self) -> dict[str, str]:
        """Container name -> image, as the pod spec gave them (interLink echoes them in statuses)."""
        flat = self._shape[2]
        return dict(zip(flat[::2], flat[1::2], strict=True))

    @images.setter
    def images(self, images: dict[str, str]) -> None:
        self._shape = _shape(self._shape[0], self._shape[1], images)

    @property
    def status(self) -> pb.JobStatus | None:
        """The last status a pool reported (decoded on each read: keep the result, not the record)."""
        if self._status is None:
            return None
        status = pb.JobStatus.parse(self._status)
        status.pod = pb.PodRef(uid=self.uid, namespace=self.namespace, name=self.name)
        status.pool = self.pool
        status.job_id = self.job_id
        return status

    @status.setter
    def status(self, status: pb.JobStatus | None) -> None:
        self._set_status(None if status is None else bytes(status), None if status is None else status.state)

    def _set_status(self, encoded: bytes | None, state: int | None) -> None:
        """Keep a status encoded, less the fields the record holds itself (:meth:`status` puts them back)."""
        self._status = None if encoded is None else _status_body(encoded)
        self._state = state
        self._status_json = None

    @property
    def state(self) -> pb.JobState | None:
        """The last status's job state, without decoding the status."""
        return None if self._state is None else pb.JobState(self._state)

    @property
    def identity(self) -> PodIdentity:
        return PodIdentity(self.uid, self.namespace, self.name)

    def status_json(self) -> dict[str, Any]:
        """The interLink PodStatus."""
        return pod_status_json(self.identity, self.job_id, self.effective_status(), self.images)

    def status_json_bytes(self) -> bytes:
        """The interLink PodStatus as compact JSON, cached until the status changes.

        Cached encoded (~500 bytes a pod), not as a dict (~3 KB): the VK asks for every pod's status,
        so at 100,000 pods the cache is the table's largest part.
        """
        if self._status_json is None:
            self._status_json = wire_dumps(self._fast_status_json())
        return self._status_json

    def _fast_status_json(self) -> dict[str, Any]:
        """:meth:`status_json`, reading the containers straight from the encoded status (no betterproto
        parse: the cost of a pod's first answer after a restart or a change); the same answer."""
        if self._status is not None:
            try:
                containers = container_views(self._status)
            except (ValueError, IndexError, OverflowError):  # UnicodeDecodeError is a ValueError
                containers = []
            if containers:
                return containers_status_json(self.identity, self.job_id, containers, self.images)
        return self.status_json()

    def effective_status(self) -> pb.JobStatus:
        """The last pushed status, or every container waiting when none arrived yet."""
        status = self.status
        if status is not None and status.containers:
            return status
        waiting = [
            pb.ContainerStatus(name=name, init=True, phase=pb.ContainerPhase.WAITING, reason="Submitted")
            for name in self.init_containers
        ] + [
            pb.ContainerStatus(name=name, init=False, phase=pb.ContainerPhase.WAITING, reason="Submitted")
            for name in self.containers
        ]
        return pb.JobStatus(state=pb.JobState.PENDING, containers=waiting, job_id=self.job_id)

    def is_final(self) -> bool:
        return self._state in FINAL_STATES

    def to_json(self) -> str:
        return json.dumps(
            {
                "uid": self.uid,
                "namespace": self.namespace,
                "name": self.name,
                "pool": self.pool,
                "job_id": self.job_id,
                "init": self.init_containers,
                "containers": self.containers,
                "images": self.images,
                "revision": self.revision,
                "status_body": base64.b64encode(self._status).decode() if self._status is not None else None,
                "state": self._state,
                "allowance": list(self.allowance) if self.allowance is not None else None,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> PodRecord:
        data = _decode_json(text.decode() if isinstance(text, bytes) else text)
        record = cls(
            uid=data["uid"],
            namespace=data["namespace"],
            name=data["name"],
            pool=data["pool"],
            job_id=data.get("job_id", ""),
            init_containers=data.get("init", ()),
            containers=data.get("containers", ()),
            images=data.get("images"),
            revision=int(data.get("revision", 0)),
            allowance=_allowance(data.get("allowance")),
        )
        # "status_body": the status less what the record holds (may be empty: a status of only those and
        # defaults); "status": the whole status, as gateways wrote it before
        written = data.get("status_body")
        if written is None:
            written = data.get("status")
        if written is not None:
            encoded = base64.b64decode(written)
            state = data.get("state")
            if not isinstance(state, int):  # written before the state was stored beside it
                state = pb.JobStatus.parse(encoded).state
            record._set_status(encoded, state)
        return record


def _allowance(value: object) -> Allowance | None:
    """A stored allowance (four integers); None when absent (written before usage was billed) or not one."""
    if not isinstance(value, list) or len(value) != 4 or not all(type(v) is int for v in value):
        return None
    return shared_allowance(Allowance(*value))


_without_identity = fastwire.job_status_without("pod", "pool", "job_id")


def _status_body(encoded: bytes) -> bytes:
    """A status less what its record holds: the pod, the pool, the job id (the one the record keeps, see
    ``_apply``). Bytes not well-formed are kept as they came: betterproto2 judges them when read."""
    try:
        return _without_identity(encoded)
    except (ValueError, IndexError):
        return encoded


_heard_tick = 0.0


def heard_now() -> float:
    """``time.monotonic()`` to the second, the same float object within it: the pods heard of together (an
    events batch, a restart's restore) share one instead of 24 bytes each (P6). A pod may so look
    up to a second older than it is to :meth:`PodStore.stale`, whose periods are minutes."""
    global _heard_tick
    now = time.monotonic()
    if now - _heard_tick >= 1.0:
        _heard_tick = now
    return _heard_tick


_intern = sys.intern
Shape = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
"""A pod's init containers, containers, and images flattened (name, image, name, image...)."""

_SHARED: dict[Shape, Shape] = {}
SHARED_MAX = 4096
"""Distinct shapes kept for sharing; past it the table starts over (records keep theirs)."""


def _shape(init_containers: Iterable[str], containers: Iterable[str], images: dict[str, str]) -> Shape:
    """One object per distinct shape: pods of one template repeat it, ~200 B a pod (P6)."""
    shape = (
        tuple(map(_intern, init_containers)),
        tuple(map(_intern, containers)),
        tuple(map(_intern, chain.from_iterable(images.items()))),
    )
    shared = _SHARED.get(shape)
    if shared is not None:
        return shared
    if len(_SHARED) >= SHARED_MAX:
        _SHARED.clear()
    _SHARED[shape] = shape
    return shape


_decode_json = json.JSONDecoder().decode

FINAL_STATES = frozenset(
    int(s) for s in (pb.JobState.SUCCEEDED, pb.JobState.FAILED, pb.JobState.CANCELLED, pb.JobState.LOST)
)
STATE_NAMES = {int(s): s.name for s in pb.JobState}
