"""The controller's only door to Kubernetes: a small ``KubeApi`` protocol and its lightkube implementation.

Objects cross this seam as plain dicts (what the pure reconcile produces); lightkube errors are
translated into ``KubeError`` here so nothing above needs to know the client library.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, Self

import httpx2
from interlink_nats.controller import model
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.config.client_adapter import AsyncClient as http_client_for
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.models import Cluster, User
from lightkube.generic_resource import create_global_resource
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Secret
from lightkube.types import OnErrorAction, OnErrorResult, PatchType

log = logging.getLogger(__name__)

PLURALS = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", model.KIND: model.PLURAL}


class KubeError(Exception):
    """A Kubernetes API call failed; ``status`` is the HTTP code (0 when the server was not reached)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class KubeApi(Protocol):
    """What the controller needs from the cluster; tests may pass any object with these methods."""

    async def served_versions(self, group: str) -> list[str]: ...

    def watch_masterqueues(self) -> AsyncIterator[tuple[str, dict[str, Any]]]: ...

    async def list_objects(self, kind: str, version: str, labels: Mapping[str, str]) -> list[dict[str, Any]]: ...

    async def get_object(self, kind: str, version: str, name: str) -> dict[str, Any] | None: ...

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    async def delete(self, kind: str, version: str, name: str) -> None: ...

    async def patch_masterqueue_status(self, name: str, status: Mapping[str, Any]) -> None: ...

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]: ...

    async def emit_event(self, mq: model.MasterQueue, kind: str, reason: str, message: str) -> None: ...


def _resource(group: str, version: str, kind: str) -> Any:
    return create_global_resource(group, version, kind, PLURALS[kind])


def _plain(obj: Any) -> dict[str, Any]:
    """A lightkube generic object (a dict subclass holding model objects) as plain JSON-like data."""
    if hasattr(obj, "to_dict") and not isinstance(obj, dict):
        return dict(obj.to_dict())
    out: dict[str, Any] = {}
    for key, value in dict(obj).items():
        out[key] = value.to_dict() if hasattr(value, "to_dict") else value
    return out


def _translate(exc: Exception) -> KubeError:
    if isinstance(exc, ApiError):
        return KubeError(f"{exc.status.code} {exc.status.reason}: {exc.status.message}", exc.status.code or 0)
    return KubeError(f"Kubernetes API unreachable: {exc}")


def _retry_watch(exc: Exception, count: int) -> OnErrorResult:
    """Watch errors: retry with growing back-off (410 Gone restarts the watch from scratch in lightkube)."""
    log.warning("MasterQueue watch failed (%s), retry %d", exc, count)
    return OnErrorResult(OnErrorAction.RETRY, sleep=min(30.0, 0.5 * 2 ** min(count, 6)))


class LightkubeApi:
    """``KubeApi`` over lightkube's ``AsyncClient`` with generic resources and server-side apply.

    API discovery (``/apis/<group>``) has no lightkube call, so a plain httpx2 client built by lightkube's
    own adapter from the same config (server, TLS, credentials) asks for it.
    """

    def __init__(self, client: AsyncClient, discovery: httpx2.AsyncClient, field_manager: str = "kueue-nats") -> None:
        self.client = client
        self.discovery = discovery
        self.field_manager = field_manager
        self.masterqueues = create_global_resource(model.GROUP, model.VERSION, model.KIND, model.PLURAL)

    @classmethod
    def from_config(
        cls, config: KubeConfig, *, timeout_s: float, trust_env: bool = True, field_manager: str = "kueue-nats"
    ) -> Self:
        connection = ConnectionParams(timeout=httpx2.Timeout(timeout_s), trust_env=trust_env)
        client = AsyncClient(config, timeout=connection.timeout, trust_env=trust_env)
        return cls(client, http_client_for(client.config, connection), field_manager)

    @classmethod
    def from_environment(cls, field_manager: str = "kueue-nats") -> Self:
        """KUBECONFIG / ~/.kube/config, else the in-cluster service account."""
        return cls.from_config(KubeConfig.from_env(), timeout_s=30.0, field_manager=field_manager)

    @classmethod
    def from_server(cls, url: str, field_manager: str = "kueue-nats") -> Self:
        """An unauthenticated API server URL (tests' emulator)."""
        config = KubeConfig.from_one(cluster=Cluster(server=url), user=User(token="emulator"))
        return cls.from_config(config, timeout_s=10.0, trust_env=False, field_manager=field_manager)

    async def close(self) -> None:
        await self.discovery.aclose()
        await self.client.close()

    async def served_versions(self, group: str) -> list[str]:
        """API discovery ``/apis/<group>``: the versions served (empty when the group is not installed)."""
        try:
            response = await self.discovery.get(f"/apis/{group}")
        except httpx2.HTTPError as exc:
            raise KubeError(f"discovery of {group} failed: {exc}") from exc
        if response.status_code == 404:
            return []
        if response.status_code >= 400:
            raise KubeError(f"discovery of {group} failed: HTTP {response.status_code}", response.status_code)
        return [v["version"] for v in response.json().get("versions", [])]

    async def watch_masterqueues(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        async for event, obj in self.client.watch(self.masterqueues, on_error=_retry_watch):
            yield event, _plain(obj)

    async def list_objects(self, kind: str, version: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        res = _resource("kueue.x-k8s.io", version, kind)
        try:
            return [_plain(o) async for o in self.client.list(res, labels=dict(labels))]
        except (ApiError, httpx2.HTTPError) as exc:
            raise _translate(exc) from exc

    async def get_object(self, kind: str, version: str, name: str) -> dict[str, Any] | None:
        res = _resource("kueue.x-k8s.io", version, kind)
        try:
            return _plain(await self.client.get(res, name))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise _translate(exc) from exc
        except httpx2.HTTPError as exc:
            raise _translate(exc) from exc

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply under our field manager; ``force`` because these objects are ours to define."""
        group, _, version = obj["apiVersion"].partition("/")
        res = _resource(group, version, obj["kind"])
        try:
            result = await self.client.patch(
                res,
                obj["metadata"]["name"],
                dict(obj),
                patch_type=PatchType.APPLY,
                field_manager=self.field_manager,
                force=True,
            )
        except (ApiError, httpx2.HTTPError) as exc:
            raise _translate(exc) from exc
        return _plain(result)

    async def delete(self, kind: str, version: str, name: str) -> None:
        res = _resource("kueue.x-k8s.io", version, kind)
        try:
            await self.client.delete(res, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise _translate(exc) from exc
        except httpx2.HTTPError as exc:
            raise _translate(exc) from exc

    async def patch_masterqueue_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            await self.client.patch(
                self.masterqueues.Status, name, {"status": dict(status)}, patch_type=PatchType.MERGE
            )
        except (ApiError, httpx2.HTTPError) as exc:
            raise _translate(exc) from exc

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        try:
            secret = await self.client.get(Secret, name, namespace=namespace)
        except (ApiError, httpx2.HTTPError) as exc:
            raise _translate(exc) from exc
        data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        data.update(secret.stringData or {})
        return data

    async def emit_event(self, mq: model.MasterQueue, kind: str, reason: str, message: str) -> None:
        """A core/v1 Event about the MasterQueue (cluster-scoped objects' events live in ``default``)."""
        now = dt.datetime.now(dt.UTC)
        event = Event(
            metadata=ObjectMeta(generateName=f"{mq.name}.", namespace="default"),
            involvedObject=ObjectReference(
                apiVersion=f"{model.GROUP}/{model.VERSION}", kind=model.KIND, name=mq.name, uid=mq.uid or None
            ),
            reason=reason,
            message=message[:1024],
            type=kind,
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
            source=EventSource(component=self.field_manager),
            reportingComponent=self.field_manager,
        )
        try:
            await self.client.create(event)  # the namespace is the one in its metadata
        except (ApiError, httpx2.HTTPError) as exc:
            log.warning("could not record event %s for %s: %s", reason, mq.name, exc)
