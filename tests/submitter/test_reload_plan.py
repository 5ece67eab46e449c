"""The pure half of a reload (kernel.reload): which changed keys apply live, which need a restart."""

from __future__ import annotations

from pathlib import Path

from interlink_nats.kernel.reload import ReloadPlan, merged, plan_reload
from interlink_nats.submitters.backends.shell.config import ShellConfig
from interlink_nats.submitters.settings import SubmitterSettings


def settings(**values: object) -> SubmitterSettings:
    return SubmitterSettings(pool="hpc-a", backend="shell", state_dir=Path("/s"), **values)  # type: ignore[arg-type]


LIVE = ("build_config", "labels", "shell.accounting")


def test_nothing_changed_says_so() -> None:
    assert plan_reload(settings(), settings(), live=LIVE) == ReloadPlan()
    assert ReloadPlan().summary() == "nothing changed"


def test_live_keys_apply_and_the_rest_keep_their_old_values() -> None:
    old = settings(labels={"a": "1"}, nats={"url": "nats://a:4222"})
    table = {"namespaces": {"lab": {"run_as_user": "lab"}}}
    new = settings(
        labels={"a": "2"},
        nats={"url": "nats://b:4222"},
        shell={"accounting": table},
        build_config={"runtime": "podman"},
    )
    plan = plan_reload(old, new, live=LIVE)
    assert plan.live == ("build_config", "labels", "shell.accounting")  # a section named once, as given
    assert plan.restart == ("nats.url",)
    assert plan.summary() == (
        "applied build_config, labels, shell.accounting; nats.url changed but need a restart (the old values stay)"
    )
    now = merged(old, new, plan.live)
    assert now.labels == {"a": "2"} and now.build_config == {"runtime": "podman"}
    assert now.nats.url == "nats://a:4222"
    shell = now.backend_config()
    assert isinstance(shell, ShellConfig) and shell.accounting is not None
    assert shell.accounting.namespaces["lab"].run_as_user == "lab"
    assert old.labels == {"a": "1"}, "the running settings are not changed in place"


def test_a_secret_is_compared_but_never_named_with_its_value() -> None:
    plan = plan_reload(settings(nats={"token": "old-secret"}), settings(nats={"token": "new-secret"}), live=LIVE)
    assert plan.restart == ("nats.token",)
    assert "secret" not in plan.summary()


def test_a_reload_says_when_the_credential_file_in_use_went_bad(tmp_path: Path) -> None:
    """The NATS client reads the seed file again at each reconnection: a reload checks it before that fails."""
    import nkeys  # type: ignore[import-untyped]
    from interlink_nats.kernel.nats_connection import NatsConnectionSettings, credential_problem

    seed = tmp_path / "pool.nk"
    seed.write_bytes(bytes(nkeys.encode_seed(bytes(32), nkeys.PREFIX_BYTE_USER)))
    seed.chmod(0o600)
    nats = NatsConnectionSettings(nkey_seed_file=seed)
    assert credential_problem(nats) is None
    seed.chmod(0o644)
    problem = credential_problem(nats)
    assert problem is not None and "permissions 0644 are too open" in problem and "next reconnection" in problem
    seed.chmod(0o600)
    seed.write_text("garbage\n")
    assert "not an nkey seed" in (credential_problem(nats) or "")
