"""A small in-process Kubernetes API server for controller tests (no kube-apiserver can run here).

Real HTTP on localhost (aiohttp), so the controller's real lightkube client, watch loop and
server-side apply run unchanged. What it does:

- discovery ``/apis/<group>`` with the versions a test chooses (v1beta1-only Kueue, no Kueue, …);
- cluster-scoped custom objects and namespaced core objects (Secrets, Events): create, get, list
  (equality ``labelSelector``), watch (ADDED for existing objects, then live events), merge patch,
  server-side apply (create when missing; the applier owns metadata.labels, ownerReferences and
  spec whole — enough for a single field manager), PUT, delete, and the ``/status`` subresource;
- uid, resourceVersion (bumped only on a real change, as the API server does), generation
  (bumped on spec changes) and creationTimestamp;
- Kueue ResourceFlavors and ClusterQueues validated with the real CRD schemas plus the webhook
  rules (``kueue_validation``): an invalid object gets 422 like from the API server;
- a log of every write, for "nothing changed → nothing written" assertions.

Not emulated: SSA field ownership and conflicts, ownerReference garbage collection, finalizers,
version conversion (objects are returned as written).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import itertools
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web
from kueue_validation import validation_errors

ObjKey = tuple[str, str, str, str]  # group, plural, namespace, name


@dataclass
class Write:
    method: str
    path: str
    kind: str
    name: str
    changed: bool


def _json(body: Any, status: int = 200) -> web.Response:
    """JSON with the exact content type lightkube checks before decoding a Status."""
    return web.Response(body=json.dumps(body).encode(), status=status, headers={"Content-Type": "application/json"})


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return _json(body, status=code)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _matches(labels: Mapping[str, str], selector: str | None) -> bool:
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class KubeEmulator:
    """Start with ``await emulator.start()``; ``url`` is the API server address."""

    KINDS = {
        ("kueue.x-k8s.io", "resourceflavors"): "ResourceFlavor",
        ("kueue.x-k8s.io", "clusterqueues"): "ClusterQueue",
        ("vk.io", "masterqueues"): "MasterQueue",
        ("", "secrets"): "Secret",
        ("", "events"): "Event",
    }

    def __init__(self, served: Mapping[str, list[str]] | None = None, validate: bool = True) -> None:
        self.served = dict(served or {"kueue.x-k8s.io": ["v1beta2", "v1beta1"], "vk.io": ["v1"]})
        self.validate = validate
        self.objects: dict[ObjKey, dict[str, Any]] = {}
        self.writes: list[Write] = []
        self.rejected: list[tuple[str, list[str]]] = []
        self._rv = itertools.count(1)
        self._watchers: list[tuple[str, str, asyncio.Queue[tuple[str, dict[str, Any]] | None]]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- helpers for tests ------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        for (group, plural, ns, n), obj in self.objects.items():
            if self.KINDS.get((group, plural)) == kind and n == name and ns == namespace:
                return obj
        return None

    def names(self, kind: str) -> list[str]:
        return sorted(n for (g, p, _, n) in self.objects if self.KINDS.get((g, p)) == kind)

    def writes_of(self, kinds: tuple[str, ...] = ("ResourceFlavor", "ClusterQueue", "MasterQueue")) -> int:
        """Write requests received for those kinds (no-op applies count: they are API calls too)."""
        return sum(1 for w in self.writes if w.kind in kinds)

    def put_object(self, group: str, plural: str, obj: dict[str, Any], namespace: str = "") -> dict[str, Any]:
        """Create or replace directly (a user's ``kubectl apply``), with watch notification."""
        key = (group, plural, namespace, obj["metadata"]["name"])
        existed = key in self.objects
        stored = self._stamp(copy.deepcopy(obj), self.objects.get(key))
        self.objects[key] = stored
        self._notify(group, plural, "MODIFIED" if existed else "ADDED", stored)
        return stored

    def delete_object(self, group: str, plural: str, name: str, namespace: str = "") -> None:
        obj = self.objects.pop((group, plural, namespace, name), None)
        if obj is not None:
            self._notify(group, plural, "DELETED", obj)

    # -- server -----------------------------------------------------------------------------------

    async def start(self) -> KubeEmulator:
        app = web.Application()
        app.router.add_route("GET", "/apis/{group}", self._discovery)
        app.router.add_route("*", "/apis/{group}/{version}/{plural}", self._collection)
        app.router.add_route("*", "/apis/{group}/{version}/{plural}/{name}", self._item)
        app.router.add_route("*", "/apis/{group}/{version}/{plural}/{name}/status", self._item)
        app.router.add_route("*", "/api/v1/namespaces/{ns}/{plural}", self._collection)
        app.router.add_route("*", "/api/v1/namespaces/{ns}/{plural}/{name}", self._item)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        for *_, queue in self._watchers:
            queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> KubeEmulator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _discovery(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        versions = self.served.get(group)
        if not versions:
            return _status(404, "NotFound", f"group {group} not found")
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return _json(
            {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}
        )

    def _route(self, request: web.Request) -> tuple[str, str, str, str] | web.Response:
        info = request.match_info
        group = info.get("group", "")
        version = info.get("version", "v1")
        plural = info["plural"]
        if (group, plural) not in self.KINDS:
            return _status(404, "NotFound", f"no resource {plural} in {group or 'core'}")
        if group and version not in self.served.get(group, []):
            return _status(404, "NotFound", f"{group}/{version} not served")
        return group, version, plural, info.get("ns", "")

    def _stamp(self, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if old is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["generation"] = 1
        else:
            for field in ("uid", "creationTimestamp", "generation"):
                meta[field] = old["metadata"][field]
            if obj.get("spec") != old.get("spec"):
                meta["generation"] = old["metadata"]["generation"] + 1
        meta["resourceVersion"] = str(next(self._rv))
        return obj

    def _notify(self, group: str, plural: str, event: str, obj: dict[str, Any]) -> None:
        for g, p, queue in self._watchers:
            if (g, p) == (group, plural):
                queue.put_nowait((event, copy.deepcopy(obj)))

    def _check(self, group: str, version: str, obj: dict[str, Any]) -> web.Response | None:
        if not (self.validate and group == "kueue.x-k8s.io"):
            return None
        candidate = dict(obj, apiVersion=f"{group}/{version}")
        errors = validation_errors(candidate)
        if errors:
            self.rejected.append((obj.get("metadata", {}).get("name", ""), errors))
            return _status(422, "Invalid", "; ".join(errors))
        return None

    async def _body(self, request: web.Request) -> Any:
        text = await request.text()
        if not text:
            return {}
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return yaml.safe_load(text)

    def _out(self, obj: dict[str, Any], group: str, version: str) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        if group:
            out["apiVersion"] = f"{group}/{version}"
        return out

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        route = self._route(request)
        if isinstance(route, web.Response):
            return route
        group, version, plural, ns = route
        if request.method == "GET":
            selector = request.query.get("labelSelector")
            items = [
                self._out(o, group, version)
                for (g, p, n, _), o in self.objects.items()
                if (g, p, n) == (group, plural, ns) and _matches(o["metadata"].get("labels") or {}, selector)
            ]
            if request.query.get("watch") in ("true", "1"):
                return await self._watch(request, group, version, plural, items)
            return _json(
                {
                    "kind": f"{self.KINDS[(group, plural)]}List",
                    "apiVersion": f"{group}/{version}" if group else "v1",
                    "metadata": {"resourceVersion": str(next(self._rv))},
                    "items": items,
                }
            )
        if request.method == "POST":
            obj = await self._body(request)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if ns:
                meta["namespace"] = ns
            key = (group, plural, ns, meta.get("name", ""))
            if key in self.objects:
                return _status(409, "AlreadyExists", f"{plural} {key[3]} already exists")
            if (bad := self._check(group, version, obj)) is not None:
                return bad
            self.objects[key] = self._stamp(obj, None)
            self.writes.append(Write("POST", request.path, self.KINDS[(group, plural)], key[3], True))
            self._notify(group, plural, "ADDED", self.objects[key])
            return _json(self._out(self.objects[key], group, version), status=201)
        return _status(405, "MethodNotAllowed", request.method)

    async def _watch(
        self, request: web.Request, group: str, version: str, plural: str, items: list[dict[str, Any]]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        entry = (group, plural, queue)
        self._watchers.append(entry)
        try:
            for obj in items:
                await response.write(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
            while (event := await queue.get()) is not None:
                kind, obj = event
                line = {"type": kind, "object": self._out(obj, group, version)}
                await response.write(json.dumps(line).encode() + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(entry)
        with contextlib.suppress(Exception):
            await response.write_eof()
        return response

    async def _item(self, request: web.Request) -> web.Response:
        route = self._route(request)
        if isinstance(route, web.Response):
            return route
        group, version, plural, ns = route
        name = request.match_info["name"]
        subresource = request.path.endswith("/status")
        key = (group, plural, ns, name)
        kind = self.KINDS[(group, plural)]
        current = self.objects.get(key)
        if request.method == "GET":
            if current is None:
                return _status(404, "NotFound", f"{plural} {name} not found")
            return _json(self._out(current, group, version))
        if request.method == "DELETE":
            if current is None:
                return _status(404, "NotFound", f"{plural} {name} not found")
            del self.objects[key]
            self.writes.append(Write("DELETE", request.path, kind, name, True))
            self._notify(group, plural, "DELETED", current)
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        body = await self._body(request)
        content_type = request.headers.get("Content-Type", "")
        if request.method == "PATCH" and "apply-patch" in content_type:
            if current is None:
                new = copy.deepcopy(body)
            else:
                new = copy.deepcopy(current)
                meta = body.get("metadata", {})
                for field in ("labels", "annotations", "ownerReferences"):
                    if field in meta:
                        new["metadata"][field] = copy.deepcopy(meta[field])
                for field in ("spec", "status") if subresource is False else ("status",):
                    if field in body and (field != "status" or subresource):
                        new[field] = copy.deepcopy(body[field])
        elif request.method == "PATCH":
            if current is None:
                return _status(404, "NotFound", f"{plural} {name} not found")
            if subresource:
                new = copy.deepcopy(current)
                new["status"] = _merge(current.get("status"), body.get("status"))
            else:
                new = _merge(current, {k: v for k, v in body.items() if k != "status"})
        elif request.method == "PUT":
            if current is None:
                return _status(404, "NotFound", f"{plural} {name} not found")
            sent_rv = body.get("metadata", {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                return _status(409, "Conflict", "the object has been modified")
            new = copy.deepcopy(body)
            if subresource:
                new = dict(copy.deepcopy(current), status=body.get("status"))
            else:
                new["status"] = copy.deepcopy(current.get("status"))
                if new["status"] is None:
                    new.pop("status")
        else:
            return _status(405, "MethodNotAllowed", request.method)
        new.setdefault("metadata", {})["name"] = name
        if ns:
            new["metadata"]["namespace"] = ns
        if (bad := self._check(group, version, new)) is not None:
            return bad
        comparable = ("metadata", "spec", "status")
        if (
            current is not None
            and all(new.get(f) == current.get(f) for f in comparable if f != "metadata")
            and (
                {k: v for k, v in new["metadata"].items() if k != "resourceVersion"}
                == {k: v for k, v in current["metadata"].items() if k != "resourceVersion"}
            )
        ):
            self.writes.append(Write(request.method, request.path, kind, name, False))
            return _json(self._out(current, group, version))
        stored = self._stamp(new, current)
        self.objects[key] = stored
        self.writes.append(Write(request.method, request.path, kind, name, True))
        self._notify(group, plural, "ADDED" if current is None else "MODIFIED", stored)
        return _json(self._out(stored, group, version), status=201 if current is None else 200)
