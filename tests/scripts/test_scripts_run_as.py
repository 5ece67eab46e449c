"""``securityContext.runAsUser``/``runAsGroup`` as the gateway passes them on: a request the submitter decides.

The gateway only reads and checks them (one account per job); the site's policy is the submitter's
(tests/backends/shell/test_accounts_shell.py, tests/backends/slurm/test_accounts_slurm.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.services.scripts import render_job
from render_cases import ctr, data, rejected


def ids(d: dict[str, Any]) -> tuple[int | None, int | None]:
    job = render_job(d, pb.BuildConfig(runtime=pb.ContainerRuntime.NONE))
    again = pb.JobScript.parse(bytes(job))
    return again.run_as_user, again.run_as_group


def test_a_containers_ids_override_the_pods_and_travel_in_the_job_script() -> None:
    assert ids(data([ctr()])) == (None, None)
    assert ids(data([ctr()], securityContext={"runAsUser": 1000, "runAsGroup": 100})) == (1000, 100)
    both = data(
        [ctr(securityContext={"runAsGroup": 7}), ctr("b", securityContext={"runAsGroup": 7, "runAsNonRoot": True})],
        init=[ctr("i", securityContext={"runAsGroup": 7})],
        securityContext={"runAsUser": 0, "runAsGroup": 100},
    )
    assert ids(both) == (0, 7)


@pytest.mark.parametrize(
    ("d", "field", "words"),
    [
        (
            data([ctr(securityContext={"runAsUser": 1}), ctr("b")]),
            "spec.containers[1].securityContext.runAsUser",
            "differs from spec.containers[0]'s: a pod's job runs as one account",
        ),
        (
            data([ctr()], init=[ctr("i", securityContext={"runAsGroup": 3})], securityContext={"runAsGroup": 4}),
            "spec.containers[0].securityContext.runAsGroup",
            "differs from spec.initContainers[0]'s",
        ),
        (data([ctr()], securityContext={"runAsUser": -1}), "spec.securityContext.runAsUser", "non-negative"),
        (data([ctr()], securityContext={"runAsUser": "0"}), "spec.securityContext.runAsUser", "an integer"),
        (data([ctr()], securityContext={"runAsGroup": 1.5}), "spec.securityContext.runAsGroup", "an integer"),
        (data([ctr(securityContext=[])]), "spec.containers[0].securityContext", "object"),
    ],
)
def test_ids_that_cannot_be_one_account_are_rejected_by_name(d: dict[str, Any], field: str, words: str) -> None:
    err = rejected(d)
    assert err.field == field
    assert words in err.message
