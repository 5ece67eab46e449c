"""Pod groups: members held until their policy says "submit as one", then ONE ``SubmitGroup`` to the pool.

When to hold, submit or refuse is the policy's (``group_policy``, pure); what a group is, ``pod_group``'s
(pure); this module does the I/O around them, the same for every policy: the pod table (each member is an
ordinary pod record, so ``/status`` answers it as any pod), the held groups (``group_store``, mirrored to
redis), the pool's ``SubmitGroup`` with back-off, and one background task that asks the policy about every
group as time passes (a gang that waited too long is refused, an array whose window closed is sent). A gateway
runs one runner per policy (gangs, and arrays: ``array_policy``), each with its own held groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.clock import SYSTEM_CLOCK, Clock
from interlink_nats.kernel.tasks import cancel_and_wait
from interlink_nats.services.gateway import pod_group
from interlink_nats.services.gateway.errors import GatewayError, PoolError
from interlink_nats.services.gateway.group_policy import GangPolicy, GroupPolicy, Hold, Refuse, SubmitAsOne
from interlink_nats.services.gateway.group_store import PodGroupStore
from interlink_nats.services.gateway.pod_group import PodGroup, PodGroupMember
from interlink_nats.services.gateway.pool_client import PoolClient
from interlink_nats.services.gateway.record import PodRecord
from interlink_nats.services.gateway.store import PodStore
from interlink_nats.services.gateway.usage import allowance_of
from interlink_nats.services.scripts import PodGroupSpec

log = logging.getLogger("interlink_nats.gateway")

RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
MEMBER_OVERHEAD = 512
"""Bytes a member adds to a ``SubmitGroup`` beyond its job: the field's tag and length, its ``ArrayMember``
(an array uid, a Job name and uid of at most 63 + 36 characters, three integers), with room to spare."""
REQUEST_OVERHEAD = 16 * 1024
"""The request's other fields and the NATS headers the RPC layer adds (deadline, reply subject), with room."""


@dataclass(eq=False, repr=False, slots=True)
class PodGroupRunner:
    """The pod-group use cases: hold members, submit a group once when its policy says so, fail those it
    refuses. The policy is a gang's (``wait_s``, ``limits``) unless another is given."""

    store: PodStore
    held: PodGroupStore
    client: PoolClient
    _: KW_ONLY
    wait_s: float
    limits: pod_group.PodGroupLimits = field(default_factory=pod_group.PodGroupLimits)
    clock: Clock = SYSTEM_CLOCK
    policy: GroupPolicy | None = None
    retry_s: float | None = None
    """How long a group's transient ``SubmitGroup`` failures are retried; None: ``wait_s``."""
    max_payload: Callable[[], int] | None = None
    """The most bytes one ``SubmitGroup`` may carry (NATS's ``max_payload``, known once connected): a policy that
    chooses groups (arrays) starts the next one rather than grow one past it. None: no bound here."""
    _submitting: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _sweeper: asyncio.Task[None] | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    """Arrivals, departures and outcomes of groups one at a time: each reads a group and writes it back."""
    _stale: set[str] = field(default_factory=set, init=False)
    """Groups whose members' waiting statuses are shown again by the next sweep (a member arrived)."""
    _holding: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    """Set when a group is held: the sweeper waits for it while none is."""

    def __post_init__(self) -> None:
        if self.policy is None:
            self.policy = GangPolicy(self.wait_s, self.limits)

    @property
    def _policy(self) -> GroupPolicy:
        assert self.policy is not None  # set by __post_init__
        return self.policy

    # --- life cycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Restore held groups: every member gets its pod record back if redis lost it, complete groups (the
        gateway died before recording their submission) are sent again (``SubmitGroup`` is idempotent by
        ``group_uid``), and the wait of incomplete ones goes on from their first member's arrival."""
        loaded = await self.held.load()
        for group in list(self.held.groups.values()):
            records = [self.store.get(uid) for uid in group.members]
            if all(r is not None and r.job_id for r in records):
                await self.held.drop(group.key)  # sent and recorded; the gateway stopped before forgetting it
                continue
            for member in group.members.values():
                if self.store.get(member.uid) is None:
                    await self.store.put(self._record(group, member))
            self._show_waiting(group)
            if isinstance(self._policy.decide(group, self.clock.time()), SubmitAsOne):
                self._submit_later(group.key)
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="gateway-pod-groups")
        if loaded:
            log.info("restored %d held pod groups (%d members)", loaded, self.held.members())

    async def stop(self) -> None:
        await cancel_and_wait(*self._submitting.values(), self._sweeper)
        self._submitting.clear()
        self._sweeper = None

    # --- calls ---------------------------------------------------------------------------------
    async def hold(self, record: PodRecord, job: pb.JobScript, group: PodGroupSpec) -> str:
        """Hold a member (its ``/create``); returns its ``PodJID``. Raises a 4xx GatewayError when it does not
        fit its group (another pool, another count) or the site's limits (``pod_group.PodGroupLimits``); a member
        held already (interLink retries) is answered as before."""
        member = PodGroupMember.arrived(record.uid, record.name, group.index, job, record.images)
        async with self._lock:
            known = self.store.get(record.uid)
            if known is not None and not self.holds(record.uid) and (known.job_id or known.is_final()):
                # a retried create that raced its group's outcome (sent, or failed): that answer stands
                return known.job_id or self.jid(record.namespace, group)
            now = self.clock.time()
            already = self.held.group_of(record.uid)
            name = (
                already.name
                if already is not None
                else self._policy.name_for(self.held.get, record.namespace, group, now, lambda g: self._fits(g, member))
            )
            group = replace(group, name=name)
            key = pod_group.group_key(record.namespace, name)
            held = self._policy.admit(
                self.held.get(key), member, group, namespace=record.namespace, pool=record.pool, now=now
            )
            if record.uid not in held.members:
                pod_group.check_room(self.limits, self.held.usage(record.namespace), held, member)
                # redis first: once the member is answered it must survive a restart
                await self.held.add(held, member, now)
                self._holding.set()
                await self.store.put(record)
                self._show_waiting(held, record)
                log.info("holding pod %s/%s: %s", record.namespace, record.name, self._waiting(held))
            if isinstance(self._policy.decide(held, now), SubmitAsOne):
                self._submit_later(key)
        return self.jid(record.namespace, group)

    def _fits(self, group: PodGroup, member: PodGroupMember) -> bool:
        """Whether ``group``'s ``SubmitGroup`` with ``member`` added stays within the NATS message limit: each
        member travels as its job plus its place in the group (``MEMBER_OVERHEAD`` at most), the request's own
        fields and NATS's headers within ``REQUEST_OVERHEAD``."""
        if self.max_payload is None or not group.members:
            return True
        size = self.held.group_bytes(group.key) + member.size + MEMBER_OVERHEAD * (len(group.members) + 1)
        return size + REQUEST_OVERHEAD <= self.max_payload()

    def jid(self, namespace: str, group: PodGroupSpec) -> str:
        """A member's ``PodJID`` before its group is sent."""
        return pod_group.held_jid(pod_group.group_key(namespace, group.name))

    def holds(self, uid: str) -> bool:
        return self.held.group_of(uid) is not None

    def waiting_message(self, uid: str) -> str | None:
        group = self.held.group_of(uid)
        return None if group is None else self._waiting(group)

    def _waiting(self, group: PodGroup) -> str:
        """What a held member's status says: the policy's words while it holds, else a gang's count."""
        decision = self._policy.decide(group, self.clock.time())
        return decision.message if isinstance(decision, Hold) else pod_group.waiting_message(group)

    async def release(self, uid: str) -> bool:
        """A held member's pod was deleted: it leaves the group, which then waits for a replacement (as the Job
        controller makes one); True if ``uid`` was held."""
        async with self._lock:
            if not self.holds(uid):
                return False
            group = await self.held.release(uid)
            await self.store.delete(uid)
            if group is not None:
                self._show_waiting(group)
        return True

    # --- submission ----------------------------------------------------------------------------
    def _submit_later(self, key: str) -> None:
        task = self._submitting.get(key)
        if task is None or task.done():
            self._submitting[key] = asyncio.create_task(self._submit(key), name=f"gateway-submit-group-{key}")

    async def _submit(self, key: str) -> None:
        """Send the complete group until the pool answers; transient failures are retried with back-off for
        ``wait_s``, a refusal fails every member with the pool's message."""
        deadline = self.clock.monotonic() + (self.wait_s if self.retry_s is None else self.retry_s)
        attempt = 0
        try:
            while True:
                group = self.held.get(key)
                if group is None or not isinstance(self._policy.decide(group, self.clock.time()), SubmitAsOne):
                    return  # a member was deleted meanwhile: the group waits for its replacement again
                jobs = self._policy.submission(group)
                try:
                    reply = await self.client.submit_group(group.pool, jobs, self._policy.kind)
                except GatewayError as exc:
                    rpc = exc.rpc_status.name if isinstance(exc, PoolError) else "UNAVAILABLE"  # our NATS is down
                    if rpc in pod_group.TRANSIENT and self.clock.monotonic() < deadline:
                        attempt += 1
                        pause = min(RETRY_FIRST_S * 2 ** (attempt - 1), RETRY_MAX_S)
                        log.warning("pod group %s: SubmitGroup failed (%s), retrying in %gs", key, exc.message, pause)
                        await self.clock.sleep(pause)
                        continue
                    reason = pod_group.UNAVAILABLE_REASON if rpc in pod_group.TRANSIENT else pod_group.REJECTED_REASON
                    async with self._lock:
                        await self._fail(group, reason, f"pod group {key}: {exc.message}")
                    return
                async with self._lock:
                    await self._submitted(group, jobs, reply)
                return
        except asyncio.CancelledError:
            raise
        except Exception:  # never lose the task silently: the group stays held and is sent again at start-up
            log.exception("submitting pod group %s failed", key)
        finally:
            if self._submitting.get(key) is asyncio.current_task():
                del self._submitting[key]

    async def _submitted(self, group: PodGroup, jobs: list[pb.JobScript], reply: pb.SubmitGroupResponse) -> None:
        """Every member's record gets its job id (a gang's: the gang's; an array's: its task's); from here statuses
        flow per member as for any pod."""
        gone: list[str] = []
        for rank, job in enumerate(jobs):
            uid = job.pod.uid if job.pod else ""
            record = self.store.get(uid)
            if record is None:
                gone.append(uid)  # deleted while the group was in flight
                continue
            record.job_id = reply.member_job_ids[rank] if rank < len(reply.member_job_ids) else reply.job_id
            if not reply.created and rank < len(reply.statuses):
                self.store.apply_status(uid, reply.statuses[rank], 0)
            elif not record.revision:  # no event came first: the pod now waits as any submitted pod
                record.status = None
            await self.store.save(record)
        await self.held.drop(group.key)
        log.info(
            "submitted pod group %s (%d members) to pool %s: job %s", group.key, len(jobs), group.pool, reply.job_id
        )
        for uid in gone:  # a gang cannot run without it: its cancel stops the whole gang (an array's: its task)
            with contextlib.suppress(GatewayError):
                await self.client.cancel(group.pool, uid)

    async def _fail(self, group: PodGroup, reason: str, message: str) -> None:
        for uid in group.members:
            record = self.store.get(uid)
            if record is not None:
                status = pod_group.member_status(
                    record.init_containers, record.containers, final=True, reason=reason, message=message
                )
                self.store.apply_status(uid, status, 0)
                await self.store.save(record)
        await self.held.drop(group.key)
        log.warning("%s: failing its %d members (%s)", message, len(group.members), reason)

    # --- waiting -------------------------------------------------------------------------------
    async def _sweep_forever(self) -> None:
        """Ask the policy about every held group each tick; with none held, sleep until one is (no timer wakes
        an idle gateway: on a virtual machine each wake-up costs a few ms of CPU)."""
        tick = min(1.0, max(0.05, self.wait_s / 20))
        while True:
            if not self.held.groups:
                self._holding.clear()
                await self._holding.wait()
            await self.clock.sleep(tick)
            try:
                await self.sweep()
            except Exception:  # never let the timeout die
                log.exception("checking held pod groups failed")

    async def sweep(self) -> None:
        """Fail the members of every group its policy refuses now (a gang that waited ``wait_s`` for the rest);
        send every group it says to send now and no task sends (an array whose window closed)."""
        async with self._lock:
            now = self.clock.time()
            stale, self._stale = self._stale, set()
            for group in list(self.held.groups.values()):
                decision = self._policy.decide(group, now)
                if isinstance(decision, Hold) and group.key in stale:
                    self._show_waiting(group)
                if isinstance(decision, Refuse):
                    await self._fail(group, decision.reason, decision.message)
                elif isinstance(decision, SubmitAsOne):
                    self._submit_later(group.key)

    def _show_waiting(self, group: PodGroup, arrived: PodRecord | None = None) -> None:
        """Held members' statuses say how many of the group have arrived (and, for an array, until when it is
        sent at the latest). In memory only: the message is derived from the held group (redis has it), and
        ``start`` shows it again after a restart. With ``arrived``, only that member's status is set now, the
        others' at the next sweep tick (their count may be one tick stale): an arrival costs the same whatever
        the group's size, never a status per member already there."""
        message = self._waiting(group)
        if arrived is not None:
            self._stale.add(group.key)
        for record in (arrived,) if arrived is not None else (self.store.get(uid) for uid in group.members):
            if record is None or record.is_final() or record.job_id:
                continue
            record.status = pod_group.member_status(
                record.init_containers, record.containers, final=False, reason=pod_group.WAITING_REASON, message=message
            )

    def _record(self, group: PodGroup, member: PodGroupMember) -> PodRecord:
        job = member.job
        return PodRecord(
            uid=member.uid,
            namespace=group.namespace,
            name=member.name,
            pool=group.pool,
            init_containers=job.init_containers,
            containers=job.containers,
            images=member.images,
            allowance=allowance_of(job.resources, self.clock.time()),
        )
