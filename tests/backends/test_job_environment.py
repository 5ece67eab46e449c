"""The job environment allowlist (``backends.job_environment``), pure: names, ``PREFIX*`` patterns, what
interlink-nats sets winning, and the site's list checked with one line naming the setting."""

from __future__ import annotations

import pytest
from interlink_nats.submitters.backends.job_environment import (
    DEFAULT_JOB_ENVIRONMENT,
    allows,
    check_names,
    job_environment,
)

SUBMITTER = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C",
    "LC_TIME": "en_GB.UTF-8",
    "TZ": "UTC",
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "https_proxy": "http://admin:password@proxy:3128",
    "LCX": "not a locale",
    "PATHX": "not PATH",
}


def test_the_default_passes_only_harmless_variables() -> None:
    got = job_environment(SUBMITTER, DEFAULT_JOB_ENVIRONMENT)
    assert got == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "LC_TIME": "en_GB.UTF-8", "TZ": "UTC"}
    assert not {"HOME", "USER", "LOGNAME"} & set(DEFAULT_JOB_ENVIRONMENT), "they would be the submitter's"


def test_names_match_whole_and_a_trailing_star_is_a_prefix() -> None:
    assert job_environment(SUBMITTER, ["PATH"]) == {"PATH": "/usr/bin:/bin"}
    assert job_environment(SUBMITTER, ["LC*"]) == {"LC_ALL": "C", "LC_TIME": "en_GB.UTF-8", "LCX": "not a locale"}
    assert job_environment(SUBMITTER, []) == {}
    assert allows(["LC_*"], "LC_ALL") and not allows(["LC_*"], "LCX") and not allows(["PATH"], "PATHX")


def test_what_interlink_nats_sets_is_passed_and_wins() -> None:
    ours = {"INTERLINK_JOB_DIR": "/jobs/a", "PATH": "/ours"}
    assert job_environment({"INTERLINK_JOB_DIR": "/other"}, [], ours=ours) == ours


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("PATH", "must be a list"),
        (3, "must be a list"),
        (["*"], "'*' is not an environment variable name"),
        (["A=B"], "'A=B' is not"),
        (["1X"], "'1X' is not"),
        (["A*B"], "'A*B' is not"),
        ([""], "'' is not"),
    ],
)
def test_a_bad_list_is_one_line_naming_the_setting(bad: object, says: str) -> None:
    with pytest.raises(ValueError, match=r"^job_environment") as err:
        check_names(bad, what="job_environment")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_good_list_is_kept_in_order_without_repeats() -> None:
    assert check_names(["PATH", " LC_* ", "PATH", "SITE_"], what="x") == ("PATH", "LC_*", "SITE_")


def test_the_submitters_settings_never_pass_even_if_listed() -> None:
    env = {"INTERLINK_SUBMITTER_NATS__PASSWORD": "x", "INTERLINK_JOB_DIR": "/j"}
    assert job_environment(env, ["INTERLINK_*"]) == {"INTERLINK_JOB_DIR": "/j"}
