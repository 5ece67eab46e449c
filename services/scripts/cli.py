"""`interlink-nats render POD.json`: show the script a pod becomes, secrets masked (for users and admins)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.build_config import build_config_section, proto_names
from interlink_nats.kernel.config_files import ConfigFileError, load_document
from interlink_nats.kernel.errors import UsageError

from .errors import PodRejected
from .render import render_job
from .runtimes import RUNTIME_NAMES

RUNTIMES = {name: rt for rt, name in RUNTIME_NAMES.items()}


def load_build_config(path: Path | None, runtime: str | None) -> pb.BuildConfig:
    """BuildConfig from a file: a submitter's site file (its ``build_config``) or the section alone.

    The format is the site file's (``runtime: apptainer`` or the enum name), so an admin previews a
    pod with the very file their submitter reads; ``runtime`` (e.g. "none") overrides it.
    """
    bc = pb.BuildConfig()
    if path is not None:
        try:
            bc = pb.BuildConfig.from_dict(proto_names(build_config_section(load_document(path)), list(RUNTIMES)))
        except ConfigFileError as exc:
            raise UsageError(f"--build-config: {exc}") from None
        except (KeyError, ValueError, TypeError) as exc:
            raise UsageError(f"--build-config {path}: {_why(exc)}") from None
    if runtime is not None:
        key = runtime.strip().lower()
        if key not in RUNTIMES:
            raise UsageError(f"--runtime {runtime!r}: must be one of {', '.join(sorted(RUNTIMES))}")
        bc.runtime = RUNTIMES[key]
    return bc


def _why(exc: Exception) -> str:
    """A parse error as one phrase (a KeyError's text is just the quoted key)."""
    return str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc).splitlines()[0]


def render(
    pod_json: Annotated[
        Path, typer.Argument(metavar="POD.json", help="A pod, or interLink's /create body (RetrievedPodData).")
    ],
    build_config: Annotated[
        Path | None, typer.Option("--build-config", help="BuildConfig file (YAML or JSON, proto3-JSON names).")
    ] = None,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="apptainer, singularity, podman or none (overrides the file).")
    ] = None,
    submit_request: Annotated[
        bool,
        typer.Option(
            "--submit-request",
            help="Print the SubmitRequest for the pool as proto3 JSON instead (docs/rpc.md), so a client in any "
            "language can submit the pod. It carries the pod's secret values: it is what the pool receives.",
        ),
    ] = False,
) -> None:
    """Print the job script a pod renders to, with secret values masked (or, with --submit-request, the request)."""
    bc = load_build_config(build_config, runtime)
    data = json.loads(pod_json.read_text(encoding="utf-8"))
    try:
        job = render_job(data, bc, mask_secrets=not submit_request)
    except PodRejected as e:
        typer.echo(f"rejected: {e}", err=True)
        raise typer.Exit(code=2) from None
    if submit_request:
        typer.echo(pb.SubmitRequest(job=job).to_json(indent=2))
        return
    typer.echo(job.script, nl=False)


def main() -> None:  # pragma: no cover - the project CLI registers `render` itself
    typer.run(render)
