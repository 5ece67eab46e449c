"""``interlink-nats submitter <backend>``: run a submitter for one pool.

Registered by the top-level CLI as ``app.add_typer(submitters.cli.app, name="submitter")``.
Every option can also come from the environment (``INTERLINK_SUBMITTER_<FIELD>``) or the config
file (``--config``, YAML or TOML); the command line wins, then the environment, then the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from interlink_nats.kernel.gc_tuning import freeze_long_lived

from interlink_nats.logging_setup import setup_logging
from interlink_nats.signals import run_until_signal

app = typer.Typer(
    name="submitter",
    help="Serve SubmitterService for one pool on a site (settings also from INTERLINK_SUBMITTER_* and --config).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML config file")]
PoolOpt = Annotated[str | None, typer.Option(help="pool name (a DNS label)")]
NatsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--nats-url", help="nats://, tls:// or wss:// URL; repeatable or comma-separated (every node of a cluster)"
    ),
]
StateOpt = Annotated[Path | None, typer.Option(help="job directories and the registry")]
PollOpt = Annotated[float | None, typer.Option(help="seconds between backend polls")]
InstanceOpt = Annotated[str | None, typer.Option(help="name of this replica (default: host + random)")]
LogOpt = Annotated[str, typer.Option(help="debug, info, warning")]
JsonOpt = Annotated[bool, typer.Option(help="log JSON lines")]


def _serve(config: Path | None, log_level: str, json_logs: bool, overrides: dict[str, Any]) -> None:
    from interlink_nats.submitters.runtime import run_submitter
    from interlink_nats.submitters.settings import SubmitterSettings

    setup_logging(log_level, json_logs)
    # Invalid settings (ValidationError, ConfigFileError) and start-up failures leave through the CLI's one
    # error boundary (interlink_nats.errors): one line, exit 2 for bad input, 1 for a failed start.
    settings = SubmitterSettings.load(config, **overrides)
    freeze_long_lived()  # start-up (modules, settings) leaves the collector's scans; see kernel/gc_tuning.py
    run_until_signal(lambda stop: run_submitter(settings, stop))


@app.command()
def shell(
    config: ConfigOpt = None,
    pool: PoolOpt = None,
    nats_url: NatsOpt = None,
    state_dir: StateOpt = None,
    poll_interval: PollOpt = None,
    instance_id: InstanceOpt = None,
    max_concurrent_jobs: Annotated[int | None, typer.Option(help="jobs at once (0: BuildConfig, else CPUs)")] = None,
    log_level: LogOpt = "info",
    json_logs: JsonOpt = False,
) -> None:
    """Run pods as local processes (bash job.sh) on this host."""
    shell_opts = {"max_concurrent_jobs": max_concurrent_jobs} if max_concurrent_jobs is not None else None
    _serve(
        config,
        log_level,
        json_logs,
        {
            "backend": "shell",
            "pool": pool,
            "nats_url": nats_url or None,
            "state_dir": state_dir,
            "poll_interval": poll_interval,
            "instance_id": instance_id,
            "shell": shell_opts,
        },
    )


@app.command()
def slurm(
    config: ConfigOpt = None,
    pool: PoolOpt = None,
    nats_url: NatsOpt = None,
    state_dir: StateOpt = None,
    poll_interval: PollOpt = None,
    instance_id: InstanceOpt = None,
    partition: Annotated[str | None, typer.Option(help="partition whose nodes are announced as capacity")] = None,
    use_sacct: Annotated[bool | None, typer.Option(help="ask sacct about jobs that left squeue")] = None,
    log_level: LogOpt = "info",
    json_logs: JsonOpt = False,
) -> None:
    """Submit pods as Slurm batch jobs (sbatch/squeue/sacct/scancel/sinfo)."""
    slurm_opts = {k: v for k, v in {"partition": partition, "use_sacct": use_sacct}.items() if v is not None}
    _serve(
        config,
        log_level,
        json_logs,
        {
            "backend": "slurm",
            "pool": pool,
            "nats_url": nats_url or None,
            "state_dir": state_dir,
            "poll_interval": poll_interval,
            "instance_id": instance_id,
            "slurm": slurm_opts or None,
        },
    )


@app.command()
def htcondor(
    config: ConfigOpt = None,
    pool: PoolOpt = None,
    nats_url: NatsOpt = None,
    state_dir: StateOpt = None,
    poll_interval: PollOpt = None,
    instance_id: InstanceOpt = None,
    mode: Annotated[
        str | None, typer.Option(help="local (submit node, shared filesystem) or remote (an HTCondor-CE)")
    ] = None,
    collector: Annotated[str | None, typer.Option(help="-pool of the condor commands (the CE's collector)")] = None,
    schedd: Annotated[str | None, typer.Option(help="-name of the condor commands (the CE's schedd)")] = None,
    log_level: LogOpt = "info",
    json_logs: JsonOpt = False,
) -> None:
    """Submit pods as HTCondor jobs (condor_submit/condor_q/condor_history/condor_rm/condor_transfer_data).

    Token secrets come from files or the environment (see docs/submitters.md), never from options."""
    opts = {k: v for k, v in {"mode": mode, "collector": collector, "schedd": schedd}.items() if v is not None}
    _serve(
        config,
        log_level,
        json_logs,
        {
            "backend": "htcondor",
            "pool": pool,
            "nats_url": nats_url or None,
            "state_dir": state_dir,
            "poll_interval": poll_interval,
            "instance_id": instance_id,
            "htcondor": opts or None,
        },
    )


@app.command()
def run(
    config: ConfigOpt = None,
    instance_id: InstanceOpt = None,
    log_level: LogOpt = "info",
    json_logs: JsonOpt = False,
) -> None:
    """Run the backend the config file names (its `backend:` key): what the systemd unit starts."""
    if config is None and not os.environ.get("INTERLINK_SUBMITTER_CONFIG_FILE"):
        raise typer.BadParameter("required: the site file that names the pool and backend", param_hint="'--config'")
    _serve(config, log_level, json_logs, {"instance_id": instance_id})


if __name__ == "__main__":  # ``python -m interlink_nats.submitters.cli shell …`` (tests run it this way)
    app()
