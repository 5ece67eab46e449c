"""No pod string becomes code in the job script: the hostile corpus in every string field of the pod model.

The fields are enumerated from the model (``hostile_strings.model_string_fields``), so a field added later is
covered or fails here by name; each is put into a valid pod by its placements (``pod_placements``), the pod is
rendered, and the script runs for real with bash (runtime ``none``; hooks, probes and HTTP requests included).
Per string: refused naming its field, or the job runs, nothing of it runs as code (the canary) and the value
arrives exactly (an environment value, argv, a file's bytes, the request on the wire).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from pathlib import Path

import pytest
from hostile_strings import CANARY_DIR, CORPUS, _walk, model_string_fields
from pod_placements import Placement, Site, placements_of
from pod_string_runs import check_run, http_server, merge, render_alone, run_pods

FIELDS = model_string_fields()
TABLE, DERIVED, MISSING = placements_of(FIELDS)
PLACEMENTS = list({p.label: p for ps in TABLE.values() for p in ps}.values())


def test_every_string_field_of_the_pod_model_has_a_placement() -> None:
    assert len(FIELDS) > 100, "the enumeration found too few fields"
    assert not MISSING, (
        f"string fields of the pod model without a placement in tests/harness/pod_placements.py: {MISSING}"
    )
    assert set(TABLE) | set(DERIVED) == set(FIELDS)


def test_a_field_added_to_the_model_is_enumerated_and_needs_a_placement() -> None:
    @dataclasses.dataclass
    class Extra:
        notes: dict[str, tuple[str, ...]]
        count: int

    found: list[str] = []
    _walk(Extra, "Pod.spec.extra", found)
    assert found == ["Pod.spec.extra.notes{key}", "Pod.spec.extra.notes{}[]"]
    _, _, missing = placements_of([*FIELDS, *found])
    assert missing == found


@pytest.fixture(autouse=True)
def canary_dir() -> None:
    """An empty canary directory for each test (a test that fails may leave it fired)."""
    shutil.rmtree(CANARY_DIR, ignore_errors=True)
    CANARY_DIR.mkdir()


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.label)
def test_no_pod_string_becomes_code_in_the_job_script(placement: Placement, tmp_path: Path) -> None:
    with http_server(tmp_path) if placement.slot else contextlib.nullcontext(9) as port:  # for hooks and probes
        site = Site(placement.containers, placement.slot, str(tmp_path), port)
        if placement.benign is None:  # nothing may be here
            assert all(o.rejected is not None for o in render_alone(placement, CORPUS, site))
            return
        outcomes = render_alone(placement, (*CORPUS, placement.benign), site)
        assert outcomes[-1].rejected is None, f"the benign {placement.benign!r} was refused: {outcomes[-1].rejected}"
        accepted = [o.part for o in outcomes if o.rejected is None]
        if placement.pack is not None:  # one part for all: every string in the one list
            strings = [s for s, o in zip((*CORPUS, placement.benign), outcomes, strict=True) if o.rejected is None]
            accepted = [placement.pack(strings, site)]
            pods = [(merge(accepted, site)[0], tmp_path / "job")]
            batches = [accepted]
        elif placement.alone:
            pods = [(merge([part], site)[0], tmp_path / f"job{k}") for k, part in enumerate(accepted)]
            batches = [[part] for part in accepted]
        else:
            pods = [(merge(accepted, site)[0], tmp_path / "job")]
            batches = [accepted]
        stop = placement.slot == "preStop"
        for ran, parts in zip(run_pods(pods), batches, strict=True):
            # A delete's TERM can reach the job script while it registers a container; that container then gets no
            # preStop hook (the script's race, not this test's subject): a hook's trace is checked where it ran.
            checks = [dataclasses.replace(c, optional=stop) for part in parts for c in part.checks]
            check_run(ran, checks, allow_cancel=stop)
