"""What an operator sees when NATS says no: one line naming the identity and the file, exit 2, at once.

Before: the gateway given a pool's seed file connected, then exited 1 after 6 s with ``TimeoutError: nats:
timeout``; the submitter given another pool's seed logged 22 lines before its good one; an unreachable NATS
at first start warned every 2 s forever. Each test runs the command as an operator would, against a real
nats-server started from what ``nats-config`` writes (tests/harness/tls.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from stack import free_port
from tls import SecureStack, stack_fixture

CLI = [sys.executable, "-m", "interlink_nats.cli"]
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    yield from stack_fixture(tmp_path_factory.mktemp("credential-errors"))


def run(args: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=DEADLINE_S)
    return result, time.monotonic() - started


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line; nothing else of the refusal in the log (no per-subject warnings before it)."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert not [line for line in lines[:-1] if "violation" in line.lower()], result.stderr
    assert lines[-1].startswith("interlink-nats: error: NATS refused"), result.stderr
    return lines[-1]


def test_the_gateway_given_a_pools_seed_file_names_it_and_exits_2(stack: SecureStack) -> None:
    seed = stack.written.seed_files["pool-a"]
    result, took = run(
        [
            "gateway",
            *("--nats-url", stack.tls_url, "--nats-tls-ca-file", str(stack.tls.ca_cert)),
            *("--nats-nkey-seed-file", str(seed), "--port", str(free_port())),
        ]
    )
    line = refusal(result)
    assert f"nkey {stack.cred('pool-a').public_key} (seed file {seed})" in line, line
    assert "subscribing to interlink.config.*" in line and "not the gateway's credentials" in line, line
    assert took < 5, f"took {took:.1f}s: the refusal must not wait for a JetStream timeout"


def test_a_submitter_given_another_pools_seed_file_says_it_in_one_line(stack: SecureStack, tmp_path: Path) -> None:
    seed = stack.written.seed_files["pool-b"]
    site = tmp_path / "a.yaml"
    site.write_text(
        f"pool: a\nbackend: shell\nstate_dir: {tmp_path / 'state'}\n"
        f"nats: {{url: '{stack.tls_url}', tls_ca_file: {stack.tls.ca_cert}, nkey_seed_file: {seed}}}\n"
    )
    result, took = run(["submitter", "run", "--config", str(site)])
    line = refusal(result)
    assert "interlink_nats.v1.SubmitterService.Submit.a" in line, line  # spelled as subscribed, not lower-cased
    assert f"nkey {stack.cred('pool-b').public_key} (seed file {seed})" in line, line
    assert took < 5, f"took {took:.1f}s: the refusal must not wait for the stream lookup's timeout"


def test_an_unreachable_nats_at_first_start_is_said_once_with_the_retry_interval(tmp_path: Path) -> None:
    """A listener that hangs up at once stands for a NATS that is not there yet: it counts the attempts."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    attempts = threading.Semaphore(0)

    def refuse() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()
            attempts.release()

    threading.Thread(target=refuse, daemon=True).start()
    log = tmp_path / "submitter.log"
    args = ["submitter", "shell", "--pool", "a", "--state-dir", str(tmp_path / "s"), "--nats-url"]
    with log.open("wb") as out:
        proc = subprocess.Popen([*CLI, *args, f"nats://127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)
    try:
        for _ in range(3):
            assert attempts.acquire(timeout=DEADLINE_S), log.read_text()
        proc.terminate()
        assert proc.wait(DEADLINE_S) == 0, log.read_text()
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in log.read_text().splitlines() if "nats_connection" in line]
    # Each kind of failure is said once, not each attempt: on a loaded machine an attempt may also time out
    # before the listener hangs up, a second kind (its own line); no kind is ever said twice.
    kinds = [line.split("cannot connect to", 1)[-1] for line in lines]
    assert 1 <= len(lines) <= 2 and len(set(kinds)) == len(kinds), lines
    for line in lines:
        assert f"cannot connect to nats://127.0.0.1:{port}" in line and "trying again every 2 s" in line, lines
    assert os.path.exists(tmp_path / "s")  # it had started: only NATS was missing


def test_refused_subjects_are_printed_as_written_not_lower_cased() -> None:
    """nats-py lower-cases the server's whole -ERR line: the subjects are put back as this code spells them."""
    from types import SimpleNamespace

    from interlink_nats.kernel.nats_connection import as_subscribed

    nc = SimpleNamespace(_subs={1: SimpleNamespace(subject="_INBOX.pool.a.AbC.*")})
    said = 'nats: permissions violation for subscription to "_inbox.pool.a.abc.*"'
    assert as_subscribed(said, nc) == 'nats: permissions violation for subscription to "_INBOX.pool.a.AbC.*"'
    said = 'nats: permissions violation for publish to "$js.api.stream.create.interlink_events"'
    assert as_subscribed(said, None).endswith('"$JS.API.STREAM.CREATE.INTERLINK_EVENTS"')


async def test_a_stop_during_the_first_connect_always_ends_it_wherever_it_lands() -> None:
    """A stop may land anywhere in nats-py's first-connect loop, some of whose awaits eat a cancel (its close path,
    ``wait_for``'s race): connect must still end, each time, with NatsConnectError (kernel.tasks.cancel_until_done). The
    listener accepts and hangs up, or holds the socket, so the stop lands in each phase of an attempt."""
    import asyncio

    from interlink_nats.kernel.nats_connection import NatsConnectError, NatsConnectionSettings, connect

    held: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(listener)
            if len(held) % 2:
                conn.close()  # hang up at once: the attempt fails on reading INFO
            held.append(conn)  # every other one is held silent: the attempt waits on INFO

    server = asyncio.create_task(serve())
    settings = NatsConnectionSettings(url=f"nats://127.0.0.1:{port}", connect_timeout_s=0.2)
    try:
        for round_ in range(24):
            stop = asyncio.Event()
            asyncio.get_running_loop().call_later(0.01 * (round_ % 12) + 0.001 * round_, stop.set)
            with pytest.raises(NatsConnectError):
                await asyncio.wait_for(connect(settings, "storm", stop=stop), DEADLINE_S)
    finally:
        server.cancel()
        listener.close()
        for conn in held:
            conn.close()
