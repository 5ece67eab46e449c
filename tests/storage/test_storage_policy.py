"""The site storage policy, pure: the ``storage`` section's model (errors name the key), rule matching (namespace
exact over pattern, claim, storage class, NFS source), path templates that cannot escape, hostPath prefixes and
NFS exports, and the submitter's re-check saying the gateway's words. No I/O; the runs are in test_storage_runs.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hostile_strings import CORPUS
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.names import is_dns_subdomain
from interlink_nats.kernel.reload import merged, plan_reload, refusal
from interlink_nats.kernel.storage import StorageRefused, StorageRequest, mount_of, resolve
from interlink_nats.submitters.core.errors import InvalidRequest
from interlink_nats.submitters.core.storage_check import check_storage
from interlink_nats.submitters.core.storage_policy import StorageSettings
from interlink_nats.submitters.edge.reload import LIVE
from interlink_nats.submitters.settings import SubmitterSettings
from pydantic import ValidationError

SITE = StorageSettings.model_validate(
    {
        "claims": [
            {"namespace": "lab-a", "claim": "scratch", "path": "/scratch/a-only/{claim}"},
            {"namespace": "lab-*", "path": "/lustre/projects/{namespace}/{claim}", "create": True},
            {"namespace": "*", "storage_class": "archive", "path": "/archive/{namespace}/{claim}", "read_only": True},
            {"namespace": "*", "nfs_server": "nfs1", "nfs_path": "/export", "path": "/nfs1/{volume}"},
        ],
        "host_paths": [{"prefix": "/cvmfs"}, {"namespace": "lab-a", "prefix": "/data/lab-a", "read_only": False}],
        "nfs": [{"server": "nfs1.example.org", "path": "/export/home", "site_path": "/mnt/home"}],
    }
).to_proto()
FIELD = "spec.volumes[0].persistentVolumeClaim"


def claim(name: str, **kw: str) -> StorageRequest:
    return StorageRequest("claim", FIELD, name, **kw)


def test_a_claim_maps_by_namespace_pattern_and_name_to_its_template() -> None:
    got = resolve(SITE, "lab-b", claim("results"))
    assert (got.path, got.read_only, got.create, got.create_mode) == (
        "/lustre/projects/lab-b/results",
        False,
        True,
        0o770,
    )


def test_an_exact_namespace_rule_wins_over_a_pattern_written_before_it() -> None:
    policy = pb.StoragePolicy(
        claims=[
            pb.ClaimRule(namespace="lab-*", path="/p/{claim}"),
            pb.ClaimRule(namespace="lab-a", path="/exact/{claim}"),
        ]
    )
    assert resolve(policy, "lab-a", claim("x")).path == "/exact/x"
    assert resolve(policy, "lab-b", claim("x")).path == "/p/x"


def test_a_claim_rule_by_name_takes_only_that_claim() -> None:
    assert resolve(SITE, "lab-a", claim("scratch")).path == "/scratch/a-only/scratch"
    assert resolve(SITE, "lab-a", claim("other")).path == "/lustre/projects/lab-a/other"


def test_an_unmapped_claim_is_refused_naming_claim_name() -> None:
    with pytest.raises(StorageRefused) as refused:
        resolve(SITE, "team-x", claim("results"))
    assert refused.value.field == FIELD + ".claimName"
    assert "the site maps no such claim" in str(refused.value)


def test_another_namespaces_claim_is_not_reachable_by_naming_it() -> None:
    """A claim name is looked up in the pod's own namespace only: team-x naming lab-a's claim gets team-x's
    (none), and no name of a claim can carry a namespace ('/' and '..' are not in a DNS name)."""
    for name in ("results", "lab-a/results", "../lab-a/results", "lab-a.results"):
        with pytest.raises(StorageRefused):
            resolve(SITE, "team-x", claim(name))


def test_storage_class_and_nfs_rules_match_only_what_interlink_sent() -> None:
    got = resolve(SITE, "team-x", claim("old", storage_class="archive"))
    assert (got.path, got.read_only) == ("/archive/team-x/old", True)
    with pytest.raises(StorageRefused):
        resolve(SITE, "team-x", claim("old"))  # no PVC object sent: the class is unknown, the rule does not apply
    nfs = claim("home", nfs_server="nfs1", nfs_path="/export/u1", volume="pv-u1")
    assert resolve(SITE, "team-x", nfs).path == "/nfs1/pv-u1"
    with pytest.raises(StorageRefused):
        resolve(SITE, "team-x", claim("home", nfs_server="nfs1", nfs_path="/elsewhere", volume="pv-u1"))


@pytest.mark.parametrize(
    "name", [*(s for s in CORPUS if not is_dns_subdomain(s)), "..", ".", "a/..", "a/b", "", "A", "a" * 254]
)
def test_hostile_claim_names_are_refused_as_no_such_claim(name: str) -> None:
    with pytest.raises(StorageRefused) as refused:
        resolve(SITE, "lab-a", claim(name))
    assert refused.value.field == FIELD + ".claimName"


@pytest.mark.parametrize("namespace", [*CORPUS[:20], "lab-a/../lab-b", "lab-*", "LAB-A"])
def test_a_namespace_that_is_not_a_dns_label_matches_no_rule(namespace: str) -> None:
    with pytest.raises(StorageRefused):
        resolve(SITE, namespace, claim("results"))


def test_host_paths_only_below_an_allowed_prefix_for_the_namespace() -> None:
    def host(path: str, namespace: str = "lab-a") -> tuple[str, str, bool]:
        got = resolve(SITE, namespace, StorageRequest("hostPath", "spec.volumes[1].hostPath", host_path=path))
        return got.root, got.rel, got.read_only

    assert host("/cvmfs/sft.cern.ch") == ("/cvmfs", "sft.cern.ch", True)
    assert host("/data/lab-a/x/") == ("/data/lab-a", "x", False)
    for path, namespace in (
        ("/data/lab-a", "lab-b"),
        ("/", "lab-a"),
        ("/etc", "lab-a"),
        ("/cvmfsx", "lab-a"),
        ("/cvmfs/../etc", "lab-a"),
        ("/cvmfs//x", "lab-a"),
        ("/cvmfs/./x", "lab-a"),
    ):
        with pytest.raises(StorageRefused) as refused:
            host(path, namespace)
        assert refused.value.field == "spec.volumes[1].hostPath.path"
    with pytest.raises(StorageRefused) as none:
        resolve(pb.StoragePolicy(), "lab-a", StorageRequest("hostPath", "v", host_path="/cvmfs"))
    assert "allow: none" in str(none.value)


def test_nfs_volumes_map_through_the_sites_exports() -> None:
    req = StorageRequest("nfs", "spec.volumes[0].nfs", nfs_server="nfs1.example.org", nfs_path="/export/home/u1")
    got = resolve(SITE, "any", req)
    assert (got.root, got.path) == ("/mnt/home", "/mnt/home/u1")
    for server, path in (("nfs2", "/export/home"), ("nfs1.example.org", "/export/homes"), ("nfs1.example.org", "/")):
        with pytest.raises(StorageRefused) as refused:
            resolve(SITE, "any", StorageRequest("nfs", "spec.volumes[0].nfs", nfs_server=server, nfs_path=path))
        assert refused.value.field.startswith("spec.volumes[0].nfs.")


def test_no_policy_maps_nothing() -> None:
    for request in (claim("c"), StorageRequest("hostPath", "v", host_path="/tmp")):
        with pytest.raises(StorageRefused):
            resolve(None, "lab-a", request)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"claims": [{"namespace": "lab-*", "path": "/lustre/{namespace}/../{claim}"}]}, "storage.claims.0.path"),
        ({"claims": [{"namespace": "lab-*", "path": "relative/{claim}"}]}, "storage.claims.0.path"),
        ({"claims": [{"namespace": "lab-*", "path": "/l/{claim.__class__}"}]}, "storage.claims.0.path"),
        ({"claims": [{"namespace": "lab-*", "path": "/{namespace}"}]}, None),
        ({"claims": [{"namespace": "Lab/x", "path": "/l/{claim}"}]}, "storage.claims.0.namespace"),
        ({"claims": [{"namespace": "a", "path": "/l/{claim}", "create_mode": "4777"}]}, "storage.claims.0.create_mode"),
        ({"host_paths": [{"prefix": "/data/"}]}, "storage.host_paths.0.prefix"),
        ({"host_paths": [{"prefix": "/data", "writable": True}]}, "storage.host_paths.0.writable"),
        ({"nfs": [{"server": "s;x", "path": "/e", "site_path": "/m"}]}, "storage.nfs.0.server"),
        ({"claim": []}, "storage.claim"),
    ],
)
def test_a_bad_storage_section_is_one_line_naming_the_key(section: dict[str, object], key: str | None) -> None:
    if key is None:
        SubmitterSettings.load(pool="a", storage=section)  # a template whose only component is a placeholder
        return
    with pytest.raises(ValidationError) as exc:
        SubmitterSettings.load(pool="a", storage=section)
    line = refusal(exc.value)
    assert line.startswith(key + ":") and "\n" not in line, line


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f"pool: a\nstate_dir: {tmp_path}\nstorage:\n  host_paths:\n    - prefix: etc\n")
    ran = subprocess.run(
        [sys.executable, "-m", "interlink_nats.cli", "submitter", "check", "--config", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 2
    assert ran.stderr.strip().count("\n") == 0 and "storage.host_paths.0.prefix" in ran.stderr


def test_the_storage_section_is_announced_in_the_build_config_and_only_there(tmp_path: Path) -> None:
    settings = SubmitterSettings.load(pool="a", storage={"host_paths": [{"prefix": "/cvmfs"}]})
    assert settings.read_build_config().storage == pb.StoragePolicy(
        host_paths=[pb.HostPathRule(namespace="*", prefix="/cvmfs", read_only=True)]
    )
    assert SubmitterSettings.load(pool="a").read_build_config().storage == pb.StoragePolicy()
    site = tmp_path / "site.yaml"
    site.write_text("pool: a\nbuild_config:\n  storage: {hostPaths: [{prefix: /}]}\n")
    with pytest.raises(ValueError, match="top-level storage section"):
        SubmitterSettings.load(site).read_build_config()


def job(*mounts: pb.StorageMount, namespace: str = "lab-a") -> pb.JobScript:
    return pb.JobScript(pod=pb.PodRef(uid="u", namespace=namespace, name="p"), script="true", storage=list(mounts))


def test_the_submitter_refuses_with_the_gateways_words() -> None:
    """A job naming a claim the site maps nowhere: the same text the gateway's 422 carries."""
    request = claim("results")
    with pytest.raises(StorageRefused) as at_gateway:
        resolve(SITE, "team-x", request)
    forged = pb.StorageMount(kind=pb.StorageKind.CLAIM, field=FIELD, claim="results", site_path="/etc")
    with pytest.raises(InvalidRequest) as at_site:
        check_storage(job(forged, namespace="team-x"), SITE)
    assert str(at_site.value) == str(at_gateway.value)


def test_the_submitter_refuses_a_path_its_policy_does_not_give() -> None:
    request = claim("results")
    mount = mount_of(request, resolve(SITE, "lab-a", request))
    check_storage(job(mount), SITE)  # as the gateway rendered it
    mount.site_path = "/etc"
    with pytest.raises(InvalidRequest, match="maps it to '/lustre/projects/lab-a/results', not '/etc'"):
        check_storage(job(mount), SITE)
    archived = claim("old", storage_class="archive")
    writable = mount_of(archived, resolve(SITE, "team-x", archived))
    writable.read_only = False
    with pytest.raises(InvalidRequest, match="read-only"):
        check_storage(job(writable, namespace="team-x"), SITE)
    with pytest.raises(InvalidRequest, match="the site maps no such claim"):
        check_storage(job(mount_of(request, resolve(SITE, "lab-a", request))), None)


def test_a_reload_applies_a_new_storage_section_live_and_announces_it() -> None:
    old = SubmitterSettings.load(pool="a")
    new = SubmitterSettings.load(pool="a", storage={"host_paths": [{"prefix": "/cvmfs"}]})
    plan = plan_reload(old, new, live=LIVE)
    assert plan.live == ("storage",) and plan.restart == ()
    assert merged(old, new, plan.live).read_build_config().storage.host_paths[0].prefix == "/cvmfs"


def test_a_rule_the_site_file_could_not_hold_is_no_rule_when_announced() -> None:
    """An announcement is input (any client with the pool's credential may publish one): a template with an
    unknown placeholder or a '..', an empty or relative prefix, maps nothing, and crashes nothing."""
    announced = pb.StoragePolicy(
        claims=[
            pb.ClaimRule(namespace="*", path="/p/{nope}"),
            pb.ClaimRule(namespace="*", path="/p/../{claim}"),
            pb.ClaimRule(namespace="*", path=""),
        ],
        host_paths=[pb.HostPathRule(namespace="*", prefix=""), pb.HostPathRule(namespace="*", prefix="etc")],
        nfs_exports=[pb.NfsExportRule(namespace="*", server="s", path="", site_path="/m")],
    )
    for request in (
        claim("c"),
        StorageRequest("hostPath", "v", host_path="/etc"),
        StorageRequest("nfs", "v", nfs_server="s", nfs_path="/x"),
    ):
        with pytest.raises(StorageRefused):
            resolve(announced, "lab-a", request)
