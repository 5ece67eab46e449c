"""Fuzzing ``POST /create`` with hypothesis pods: 200 or a 4xx naming a field, never a 5xx.

Valid-ish RetrievedPodData with random names, env, volumes of every kind, resources, junk
fields and values of the wrong type dropped anywhere; defanged before they are sent.
"""

from __future__ import annotations

import base64
import collections
import json
from typing import Any

from gateway_fuzz import (
    FIELD_MESSAGE,
    FUZZ,
    POD_EXAMPLES,
    Live,
    _spots,
    _uid_of,
    assert_not_5xx_and_explained,
    defang,
    dns,
    junk,
    mostly,
    name_like,
    text,
)
from gateway_fuzz import live as live
from hypothesis import given, settings
from hypothesis import strategies as st
from interlink_nats.services.scripts.pod_group import (
    COMPLETION_INDEX,
    FAILURE_POLICY_ANNOTATION,
    GROUP_NAME_LABEL,
    GROUP_TOTAL_ANNOTATION,
)

quantity = mostly(
    st.sampled_from(["100m", "1", "1Gi", "2.5", "500Mi", "1e3", "0", "1.5Ki", "2"]),
    st.sampled_from(["-1", "abc", "1Zi", " 2 ", "9" * 40, "", "1e400", "Infinity"]),
    st.integers(-5, 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    junk,
    odds=12,
)
resource_names = mostly(
    st.sampled_from(["cpu", "memory"]),
    st.sampled_from(["nvidia.com/gpu", "ephemeral-storage", "hugepages-2Mi", "bogus"]),
)
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(resource_names, quantity, max_size=3),
        "limits": st.dictionaries(resource_names, quantity, max_size=3),
    },
)
field_paths = mostly(
    st.sampled_from(
        [
            "metadata.name",
            "metadata.namespace",
            "metadata.uid",
            "metadata.labels",
            "metadata.annotations",
            "metadata.labels['app']",
            "status.podIP",
        ]
    ),
    st.sampled_from(["spec.nodeName", "spec.bogus", "metadata.labels['", ""]),
)
mode = mostly(st.sampled_from([None, 0o644, 0o400, 0o755, 0o600]), st.integers(-1, 0o1000), junk)
rel_path = mostly(
    st.one_of(dns, st.sampled_from(["a/b", "dir/file.txt"])),
    st.sampled_from(["../up", "/abs", "a//b", ".", "", "x\x00y"]),
)
abs_path = mostly(
    dns.map(lambda s: f"/{s}"),
    st.sampled_from(["/data", "/a/b/c", "/", "rel", "/a,b", "/a:b", "/x/../y", "/x\x00y", ""]),
)
volume_kinds = mostly(
    st.sampled_from(["emptyDir", "configMap", "secret", "downwardAPI", "projected", "hostPath"]),
    st.sampled_from(["persistentVolumeClaim", "nfs"]),
    odds=8,
)
label_value = st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?)?", fullmatch=True)
base64_or_not = mostly(st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()), text)


@st.composite
def volume(draw: st.DrawFn, vname: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(volume, configMaps, secrets) — the data interLink would attach, sometimes missing or broken."""
    kind = draw(volume_kinds)
    cms: list[dict[str, Any]] = []
    secrets: list[dict[str, Any]] = []
    keys = draw(st.lists(rel_path, min_size=1, max_size=3, unique=True))
    items = draw(
        st.one_of(
            st.none(),
            st.none(),
            st.lists(
                st.fixed_dictionaries(
                    {"key": mostly(st.sampled_from(keys), junk), "path": rel_path}, optional={"mode": mode}
                ),
                max_size=2,
            ),
        )
    )
    optional = draw(st.one_of(st.none(), st.booleans()))
    source: dict[str, Any]
    if kind == "emptyDir":
        source = draw(st.sampled_from([{}, {"medium": "Memory"}, {"sizeLimit": "1Gi"}]))
    elif kind in ("configMap", "secret"):
        obj_name = draw(dns)
        name_key = "name" if kind == "configMap" else "secretName"
        source = {name_key: draw(mostly(st.just(obj_name), name_like)), "optional": optional, "defaultMode": draw(mode)}
        if items is not None:
            source["items"] = items
        if draw(mostly(st.just(True), st.just(False), odds=4)):  # interLink sent the object
            data = draw(st.dictionaries(st.sampled_from(keys), base64_or_not if kind == "secret" else text, max_size=3))
            obj: dict[str, Any] = {"metadata": {"name": obj_name}, "data": data}
            if kind == "configMap" and draw(st.booleans()):
                obj["binaryData"] = draw(st.dictionaries(st.sampled_from(keys), base64_or_not, max_size=2))
            (cms if kind == "configMap" else secrets).append(obj)
    elif kind == "downwardAPI":
        source = {
            "items": draw(
                st.lists(
                    st.fixed_dictionaries(
                        {"path": rel_path, "fieldRef": st.fixed_dictionaries({"fieldPath": field_paths})},
                        optional={"mode": mode},
                    ),
                    max_size=3,
                )
            )
        }
    elif kind == "projected":
        sources = draw(
            st.lists(
                mostly(
                    st.sampled_from(
                        [
                            {"serviceAccountToken": {"path": "token"}},
                            {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"configMap": {"name": "absent", "optional": True}},
                        ]
                    ),
                    st.sampled_from([{"secret": {"name": "absent"}}, {"clusterTrustBundle": {"path": "x"}}, {}]),
                ),
                max_size=3,
            )
        )
        source = {"sources": sources, "defaultMode": draw(mode)}
    elif kind == "hostPath":  # the path is moved below the sandbox by defang()
        source = {
            "path": draw(abs_path),
            "type": draw(
                mostly(
                    st.sampled_from(["", "DirectoryOrCreate", "FileOrCreate"]),
                    st.sampled_from(["Directory", "File", "Socket", "Bogus"]),
                )
            ),
        }
    else:
        source = {"claimName": "c"} if kind == "persistentVolumeClaim" else {"server": "s", "path": "/"}
    return {"name": vname, kind: source}, cms, secrets


env_var = mostly(
    st.fixed_dictionaries(
        {
            "name": mostly(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), text),
            "value": st.one_of(text, st.just("$(A)-$$(B)")),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("FROM_FIELD"),
            "valueFrom": st.fixed_dictionaries({"fieldRef": st.fixed_dictionaries({"fieldPath": field_paths})}),
        }
    ),
    st.fixed_dictionaries(
        {
            "name": st.just("FROM_REF"),
            "valueFrom": st.one_of(
                st.fixed_dictionaries(
                    {
                        "configMapKeyRef": st.fixed_dictionaries(
                            {"name": dns, "key": dns}, optional={"optional": st.booleans()}
                        )
                    }
                ),
                st.fixed_dictionaries(
                    {
                        "secretKeyRef": st.fixed_dictionaries(
                            {"name": dns, "key": dns}, optional={"optional": st.booleans()}
                        )
                    }
                ),
                st.just({"resourceFieldRef": {"resource": "limits.cpu"}}),
            ),
        }
    ),
    odds=4,
)


@st.composite
def container(draw: st.DrawFn, cname: Any, volume_names: list[str]) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": cname,
        "image": draw(
            mostly(st.sampled_from(["busybox", "docker://busybox:1.36", "/images/x.sif", "oras://r/x:1"]), text)
        ),
    }
    # Only harmless programs: these pods run on this host.
    c["command"] = draw(st.one_of(st.just(["true"]), st.lists(text, max_size=3).map(lambda a: ["echo", *a])))
    if draw(st.booleans()):
        c["args"] = draw(st.lists(text, max_size=3))
    if draw(st.booleans()):
        c["env"] = draw(st.lists(env_var, max_size=4))
    if draw(st.integers(0, 4)) == 0:
        c["envFrom"] = draw(
            st.lists(
                mostly(
                    st.fixed_dictionaries(
                        {"configMapRef": st.fixed_dictionaries({"name": dns}, optional={"optional": st.just(True)})},
                        optional={"prefix": text},
                    ),
                    st.fixed_dictionaries({"secretRef": st.fixed_dictionaries({"name": dns})}),
                    st.just({"bogusRef": {}}),
                    odds=3,
                ),
                max_size=2,
            )
        )
    if volume_names and draw(st.booleans()):
        mount_paths = draw(st.lists(abs_path, min_size=1, max_size=3, unique=True))
        c["volumeMounts"] = [
            draw(
                st.fixed_dictionaries(
                    {
                        "name": mostly(st.sampled_from(volume_names), st.just("missing"), junk),
                        "mountPath": st.just(path),
                    },
                    optional={
                        "readOnly": st.booleans(),
                        "subPath": rel_path,
                        "subPathExpr": st.just("$(FROM_FIELD)"),
                        "mountPropagation": mostly(
                            st.sampled_from(["None", "HostToContainer"]), st.just("Bidirectional")
                        ),
                    },
                )
            )
            for path in mount_paths
        ]
    if draw(st.booleans()):
        c["workingDir"] = draw(abs_path)
    if draw(st.booleans()):
        c["resources"] = draw(resources)
    if draw(st.integers(0, 7)) == 0:  # junk fields: ignored ones, unsupported ones, made-up ones
        c.update(
            draw(
                st.dictionaries(
                    mostly(
                        st.sampled_from(["ports", "imagePullPolicy", "stdin", "terminationMessagePath", "tty"]),
                        st.sampled_from(["lifecycle", "restartPolicy", "bogus"]),
                        st.text(max_size=6),
                        odds=4,
                    ),
                    junk,
                    max_size=2,
                )
            )
        )
    return c


@st.composite
def pod_bodies(draw: st.DrawFn, pool: str) -> Any:
    """A RetrievedPodData: valid-ish, then junk fields, then values of the wrong type at random spots."""
    uid = draw(
        mostly(
            st.uuids().map(str),
            st.sampled_from(["", "..", "a/b", "x" * 300, "\ud800", "ok-uid_1.2", "a b", "abc\n"]),
            junk,
        )
    )
    meta: dict[str, Any] = {
        "name": draw(name_like),
        "namespace": draw(mostly(st.just("default"), name_like)),
        "uid": uid,
    }
    if draw(st.booleans()):
        meta["labels"] = draw(
            st.dictionaries(
                mostly(dns, st.sampled_from([GROUP_NAME_LABEL, COMPLETION_INDEX]), odds=3),
                mostly(label_value, text, odds=4),  # the door refuses a value Kubernetes would
                max_size=3,
            )
        )
    if draw(st.booleans()):
        meta["annotations"] = draw(
            st.dictionaries(
                mostly(
                    dns,
                    st.sampled_from(
                        [
                            "slurm-job.vk.io/flags",
                            "slurm-job.vk.io/pre-exec",
                            "slurm-job.vk.io/mpi-flags",
                            "slurm-job.vk.io/image-root",
                            "interlink.eu/pod-ip",
                            GROUP_TOTAL_ANNOTATION,
                            FAILURE_POLICY_ANNOTATION,
                            COMPLETION_INDEX,
                        ]
                    ),
                    odds=3,
                ),
                text,
                max_size=3,
            )
        )
    vnames = draw(st.lists(mostly(dns, name_like.filter(lambda v: isinstance(v, str))), max_size=4, unique=True))
    volumes, cms, secrets = [], [], []
    for vname in vnames:
        v, c, s = draw(volume(vname))
        volumes.append(v)
        cms += c
        secrets += s
    n_init, n_main = draw(st.integers(0, 2)), draw(st.integers(1, 3))
    names: list[Any] = [
        f"c{i}-{n}" if isinstance(n, str) else n
        for i, n in enumerate(draw(st.lists(name_like, min_size=n_init + n_main, max_size=n_init + n_main)))
    ]
    if len(names) > 1 and draw(st.integers(0, 9)) == 0:
        names[-1] = names[0]  # a duplicate container name
    init = [draw(container(n, vnames)) for n in names[:n_init]]
    main = [draw(container(n, vnames)) for n in names[n_init:]]
    spec: dict[str, Any] = {"containers": main}
    if init:
        spec["initContainers"] = init
    if volumes:
        spec["volumes"] = volumes
    placement = draw(
        mostly(
            st.sampled_from(["default", "toleration", "selector", "both-agree"]),
            st.sampled_from(["conflict", "invalid"]),
        )
    )
    toleration = {"key": "pool.vk.io", "operator": "Equal", "value": pool, "effect": "NoSchedule"}
    if placement in ("toleration", "both-agree", "conflict"):
        spec["tolerations"] = [toleration]
    if placement in ("selector", "both-agree"):
        spec["nodeSelector"] = {"pool.vk.io": pool}
    if placement == "conflict":
        spec["nodeSelector"] = {"pool.vk.io": pool + "-other"}
    if placement == "invalid":
        spec["tolerations"] = [{**toleration, "value": "Not A Pool!"}]
    spec.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "restartPolicy": st.sampled_from(["Never", "Always"]),
                    "activeDeadlineSeconds": mostly(st.integers(1, 10**6), st.integers(-1, 0), junk),
                    "terminationGracePeriodSeconds": mostly(st.integers(0, 100), junk),
                    "hostNetwork": mostly(st.just(False), st.just(True)),
                    "ephemeralContainers": st.just([]),
                    "resources": resources,
                },
            )
        )
    )
    if draw(st.integers(0, 5)) == 0:
        spec.update(
            draw(st.dictionaries(st.sampled_from(["affinity", "overhead", "bogus", "hostPID"]), junk, max_size=2))
        )
    the_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
    body: Any = {
        "pod": the_pod,
        "container": [
            {"name": n, "configMaps": None, "secrets": None, "projectedvolumemaps": None, "emptyDirs": None}
            for n in names
        ],
        "jobConfig": {"SingularityHubProxy": {"server": "", "master_token": "", "cache_validity_seconds": 0}},
    }
    # Real interLink puts every object in every container's entry; spread them at random instead.
    for entry in body["container"]:
        entry["configMaps"] = [cm for cm in cms if draw(mostly(st.just(True), st.just(False), odds=3))] or None
        entry["secrets"] = [s for s in secrets if draw(mostly(st.just(True), st.just(False), odds=3))] or None
    if draw(st.integers(0, 9)) == 0:
        body = [body]  # interLink <= 0.4
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
        where, key = draw(st.sampled_from(list(_spots(body))), label="mutated spot")
        where[key] = draw(junk, label="wrong value")
    return body


def test_hypothesis_pods_get_200_or_a_4xx_naming_a_field(live: Live) -> None:
    answers: collections.Counter[int] = collections.Counter()

    @settings(FUZZ, max_examples=POD_EXAMPLES)
    @given(body=pod_bodies(live.pool))
    def check(body: Any) -> None:
        defang(body, live.sandbox)
        response = live.send("POST", "/create", body)
        answers[response.status_code] += 1
        what = f"create {json.dumps(body)[:600]}"
        assert_not_5xx_and_explained(response, what)
        if response.status_code == 200:
            created = response.json()
            assert created["PodUID"] == _uid_of(body), created
            assert created["PodJID"], created
            the_pod = (body[0] if isinstance(body, list) else body)["pod"]
            status = live.send("GET", "/status", [the_pod])
            assert status.status_code == 200, status.text
            [one] = status.json()
            assert one["UID"] == created["PodUID"]
            deleted = live.send("POST", "/delete", the_pod)
            assert deleted.status_code == 200, deleted.text
        else:
            assert response.status_code in (400, 413, 422), f"{what}\n-> {response.status_code} {response.text}"
            if response.status_code != 413:
                assert FIELD_MESSAGE.match(response.text), (
                    f"{what}\n-> {response.status_code} names no field: {response.text[:300]}"
                )
        live.assert_alive()

    check()
    # The property proves little unless the generator's pods often get all the way through.
    assert answers[200] >= POD_EXAMPLES // 20, answers
