"""``interlink-nats controller …``: render Kueue objects offline, or run the controller."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import astuple
from pathlib import Path
from typing import Annotated

import typer
from interlink_nats.controller import model, offline
from interlink_nats.controller.reconcile import KUEUE_VERSIONS
from interlink_nats.kernel import quantities
from interlink_nats.kernel.reported import DEFAULT_MAXIMA, Maxima
from interlink_nats.kernel.signals import run_until_signal


class InvalidManifest(ValueError):
    """A MasterQueue file that does not validate: bad input (exit 2), its problems by field path."""

    exit_code = 2


app = typer.Typer(help="kueue-nats: keep Kueue ResourceFlavors and ClusterQueues in line with pool reports.")


@app.command()
def render(
    masterqueue: Annotated[
        Path, typer.Option("--masterqueue", "-m", exists=True, dir_okay=False, help="MasterQueue YAML")
    ],
    reports: Annotated[Path, typer.Option("--reports", "-r", exists=True, dir_okay=False, help="ResourceReports JSON")],
    kueue_api: Annotated[str, typer.Option("--kueue-api", help="v1beta2 or v1beta1")] = "v1beta2",
) -> None:
    """Print the ResourceFlavors and ClusterQueues for MQ.yaml and REPORTS.json as a YAML stream (no cluster needed)."""
    if kueue_api not in KUEUE_VERSIONS:
        raise typer.BadParameter(f"must be one of {', '.join(KUEUE_VERSIONS)}", param_hint="--kueue-api")
    bodies = offline.load_masterqueues(masterqueue.read_text())
    if not bodies:
        raise InvalidManifest(f"{masterqueue}: no MasterQueue found")
    try:
        objects, warnings = offline.render(bodies, offline.load_reports(reports.read_text()), kueue_api)
    except model.MasterQueueError as exc:  # every problem of the file, on the one line of the CLI's errors
        raise InvalidManifest(f"{masterqueue}: {'; '.join(exc.problems)}") from None
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(offline.to_yaml_stream(objects), nl=False)


@app.command()
def run(
    kueue_api: Annotated[str, typer.Option("--kueue-api", help="auto (discovery), v1beta2 or v1beta1")] = "auto",
    field_manager: Annotated[str, typer.Option(help="server-side apply field manager")] = "kueue-nats",
    tick_s: Annotated[float, typer.Option("--tick-s", "--tick", help="seconds between liveness checks")] = 2.0,
    describe_timeout_s: Annotated[
        float, typer.Option("--describe-timeout-s", "--describe-timeout", help="seconds to wait for Describe answers")
    ] = 5.0,
    probe_host: Annotated[str, typer.Option(help="address of /healthz and /metrics")] = "0.0.0.0",
    probe_port: Annotated[int, typer.Option(help="port of /healthz and /metrics (0: off)")] = 8080,
    log_level: Annotated[str, typer.Option(help="logging level")] = "INFO",
    json_logs: Annotated[bool, typer.Option(help="log JSON lines")] = False,
    max_reported_cpu: Annotated[
        str, typer.Option(help="the most CPUs a pool may report; more is refused, never a quota")
    ] = DEFAULT_MAXIMA.cpu,
    max_reported_memory: Annotated[
        str, typer.Option(help="the most memory (ephemeral-storage, hugepages-*) a pool may report")
    ] = DEFAULT_MAXIMA.memory,
    max_reported_pods: Annotated[str, typer.Option(help="the most pods a pool may report")] = DEFAULT_MAXIMA.pods,
    max_reported_other: Annotated[
        str, typer.Option(help="the most of any other resource (GPUs, devices) a pool may report")
    ] = DEFAULT_MAXIMA.other,
) -> None:
    """Run the controller against the cluster from KUBECONFIG (or in-cluster service account)."""
    from interlink_nats.controller import kube, runner
    from interlink_nats.controller.observability import controller_probes
    from interlink_nats.kernel.logging_setup import setup_logging
    from interlink_nats.services.ops.probes import serve_probes

    setup_logging(log_level.lower(), json_logs)
    if kueue_api not in ("auto", *KUEUE_VERSIONS):
        raise typer.BadParameter(f"must be auto or one of {', '.join(KUEUE_VERSIONS)}", param_hint="--kueue-api")
    maxima = Maxima(max_reported_cpu, max_reported_memory, max_reported_pods, max_reported_other)
    for flag, value in zip(("cpu", "memory", "pods", "other"), astuple(maxima), strict=True):
        if not quantities.is_valid(value) or quantities.parse(value) <= 0:
            hint = f"--max-reported-{flag}"
            raise typer.BadParameter(f"must be a positive Kubernetes quantity, got {value!r}", param_hint=hint)

    async def main(stop: asyncio.Event) -> None:
        api = kube.LightkubeApi.from_environment(field_manager=field_manager)
        settings = runner.Settings(
            kueue_api=None if kueue_api == "auto" else kueue_api,
            tick_s=tick_s,
            describe_timeout_s=describe_timeout_s,
            maxima=maxima,
        )
        controller = runner.Controller(api, settings=settings)
        probes = await serve_probes(controller_probes(controller), probe_host, probe_port) if probe_port else None
        running = asyncio.create_task(controller.run(), name="controller")
        stopping = asyncio.create_task(stop.wait())
        try:  # INT, TERM, HUP or the parent's death stop it like Ctrl-C, without a KeyboardInterrupt traceback
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()
        finally:
            stopping.cancel()
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            if probes is not None:
                probes.close()
            await api.close()

    run_until_signal(main)
