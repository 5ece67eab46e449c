"""Pure text of a pod group (gang) on Slurm: the one ``sbatch`` for the whole group, and its launcher script.

One homogeneous allocation (``--ntasks=<members>``, every task the largest member's CPUs and memory) rather
than a heterogeneous job: a het job is listed by squeue as one line per component (``<id>+<n>``), which the
single-job poll, cancel and crash recovery would not recognise; every Slurm since 20.11 sizes ``--ntasks``
allocations over one node or many alike; and a member's step then fits any task slot. The cost: a member gets
the largest member's share (docs/backends/slurm.md, "Pod groups on Slurm").

The launcher (bash, the batch script) maps ranks to hosts from the allocation (``SLURM_JOB_NODELIST`` and
``SLURM_TASKS_PER_NODE``: ranks fill nodes in order), starts one ``srun`` step per member, and applies the
failure policy. Tested directly in tests/backends/slurm/test_slurm_gang_text.py (with fake srun/scontrol/scancel) and
on a real two-node Slurm in tests/backends/slurm/test_slurm_gangs.py.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import TypeVar

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.slurm.flags import FlagError
from interlink_nats.submitters.backends.slurm.parse import format_minutes
from interlink_nats.submitters.core.backend import JobSpec

T = TypeVar("T")


def pod_label(spec: JobSpec) -> str:
    """How a message names a member: its pod name, else its uid."""
    return spec.name or spec.uid


def agreed_flags(members: Sequence[JobSpec]) -> tuple[str, ...]:
    """The members' backend flags, which must be the same for all (one allocation takes one set);
    FlagError naming the first two pods that disagree."""
    first = members[0]
    for other in members[1:]:
        if other.backend_flags != first.backend_flags:
            raise FlagError(
                f"pod group: pods {pod_label(first)!r} and {pod_label(other)!r} ask for different slurm flags "
                f"({' '.join(first.backend_flags) or 'none'} vs {' '.join(other.backend_flags) or 'none'})"
            )
    return first.backend_flags


def same_for_all(members: Sequence[JobSpec], values: Sequence[T], what: str) -> T:
    """``values[0]`` when every member's value equals it; FlagError naming the first two pods that differ."""
    for spec, value in zip(members[1:], values[1:], strict=True):
        if value != values[0]:
            raise FlagError(
                f"pod group: pods {pod_label(members[0])!r} and {pod_label(spec)!r} get different {what} "
                f"({values[0]} vs {value})"
            )
    return values[0]


def gang_resource_flags(resources: Sequence[pb.ResourceRequest | None]) -> list[str]:
    """sbatch flags sizing ``len(resources)`` equal tasks so that every member fits in one task: the largest
    CPUs (``--cpus-per-task``), memory per CPU so that CPUs times it covers the largest memory, the largest GPU
    count per task, the longest wall time. Nothing a member did not ask for (the site's defaults apply)."""
    cpus = max((math.ceil(r.cpu_millis / 1000) for r in resources if r and r.cpu_millis > 0), default=0)
    mem_mib = max((math.ceil(r.memory_bytes / 2**20) for r in resources if r and r.memory_bytes > 0), default=0)
    gpus = max((r.gpus for r in resources if r and r.gpus > 0), default=0)
    times = [r.wall_time for r in resources if r and r.wall_time is not None and r.wall_time.total_seconds() > 0]
    flags = [f"--ntasks={len(resources)}"]
    if cpus:
        flags.append(f"--cpus-per-task={cpus}")
    if mem_mib:
        flags.append(f"--mem-per-cpu={math.ceil(mem_mib / max(cpus, 1))}M")
    if gpus:
        flags.append(f"--gpus-per-task={gpus}")
    if times:
        flags.append(f"--time={format_minutes(max(times))}")
    return flags


_FAIL_GANG = (pb.GangFailurePolicy.UNSPECIFIED, pb.GangFailurePolicy.FAIL_GANG)

# The launcher's fixed part. Values come before it as single-quoted assignments; nothing here is interpolated.
_LAUNCHER_BODY = r"""
set -u
if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 403)); then
  printf '%s\n' "interlink-nats: the gang launcher needs bash >= 4.3 (wait -n); this host's is $BASH_VERSION" >&2
  exit 125
fi
# scancel or the time limit: Slurm signals every member's step itself; waiting here could only delay the end.
trap 'exit 143' TERM
say() { printf 'interlink-nats gang: %s\n' "$*" >&2; }
size=${#dirs[@]}

# The host of each rank: ranks fill the allocation's nodes in order, as many on a node as it has tasks there
# (SLURM_TASKS_PER_NODE: "2(x3),1" is 2, 2, 2, 1).
nodes_text=$("$scontrol" show hostnames "$SLURM_JOB_NODELIST") || { say "scontrol show hostnames failed"; exit 125; }
mapfile -t nodes <<< "$nodes_text"
counts=()
IFS=, read -r -a per_node <<< "$SLURM_TASKS_PER_NODE"
for part in "${per_node[@]}"; do
  if [[ $part =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
    for ((k = 0; k < BASH_REMATCH[2]; k++)); do counts+=("${BASH_REMATCH[1]}"); done
  elif [[ $part =~ ^[0-9]+$ ]]; then
    counts+=("$part")
  fi
done
hosts=()
tasks_on=()
node=0
used=0
for ((r = 0; r < size; r++)); do
  while ((node < ${#counts[@]} && used >= counts[node])); do node=$((node + 1)); used=0; done
  if ((node >= ${#counts[@]} || node >= ${#nodes[@]})); then
    say "the allocation ($SLURM_TASKS_PER_NODE tasks on $SLURM_JOB_NODELIST) has no task for rank $r of $size"
    exit 125
  fi
  hosts+=("${nodes[node]}")
  tasks_on+=("${counts[node]}")
  used=$((used + 1))
done
all_hosts=$(IFS=,; printf '%s' "${hosts[*]}")

# Each member's step gets its task's share: the job's CPUs per task and memory per CPU (inherited from the
# environment); where the site gave memory per node instead, that node's memory split among its tasks (a step
# left to default would take all of it and hold back the next member's step).
# A requeued job starts over: no member's outcome from the previous run may stand.
for ((r = 0; r < size; r++)); do rm -f -- "${dirs[r]}/$exit_name" "${dirs[r]}/$stopped_name"; done
pids=()
for ((r = 0; r < size; r++)); do
  mem=()
  if [[ -z ${SLURM_MEM_PER_CPU-} && -n ${SLURM_MEM_PER_NODE-} ]]; then
    mem=("--mem=$((SLURM_MEM_PER_NODE / tasks_on[r]))M")
  fi
  INTERLINK_JOB_DIR=${dirs[r]} INTERLINK_GROUP_NAME=$group_name INTERLINK_GROUP_SIZE=$size \
  INTERLINK_GROUP_RANK=$r INTERLINK_GROUP_HOSTS=$all_hosts INTERLINK_GROUP_LEADER=${hosts[0]} \
    "$srun" --ntasks=1 --nodes=1 --nodelist="${hosts[r]}" --exact --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
    ${mem[@]+"${mem[@]}"} --job-name="${uids[r]}" --chdir="${dirs[r]}" --output="${outputs[r]}" --input=none \
    bash "${scripts[r]}" < /dev/null &
  pids[r]=$!
done
say "started $size members of pod group on $all_hosts"

# Collect each member's step as it ends, in whatever order (as the job script collects its containers: a scan,
# then `wait -n` only to sleep until the next end), and record its code in the member's directory
# (layout.GANG_MEMBER_EXIT), so the submitter maps every member from its own outcome. The TERM trap exits.
first=0
left=$size
ended=()
while ((left > 0)); do
  found=0
  for ((r = 0; r < size; r++)); do
    [[ -n ${ended[r]-} ]] && continue
    kill -0 "${pids[r]}" 2>/dev/null && continue
    wait "${pids[r]}"
    rc=$?
    ended[r]=1
    printf '%s\n' "$rc" > "${dirs[r]}/$exit_name"
    left=$((left - 1))
    found=1
    if ((rc != 0 && first == 0)); then
      first=$rc
      if ((fail_gang && left > 0)); then
        say "a member ended with $rc: stopping the other $left (TERM to their steps)"
        # Marked first (layout.GANG_MEMBER_STOPPED): they end for another member's failure, not their own.
        for ((o = 0; o < size; o++)); do [[ -n ${ended[o]-} ]] || : > "${dirs[o]}/$stopped_name"; done
        # Without --full/--batch, scancel signals the steps only, not this script: each member's job.sh gets TERM.
        "$scancel" --signal=TERM "$SLURM_JOB_ID" || say "scancel --signal=TERM failed"
      else
        say "a member ended with $rc"
      fi
    fi
  done
  ((found || left == 0)) || wait -n
done
exit "$first"
"""


def launcher_script(
    *,
    group_name: str,
    members: Sequence[JobSpec],
    failure_policy: pb.GangFailurePolicy,
    srun: str = "srun",
    scontrol: str = "scontrol",
    scancel: str = "scancel",
) -> str:
    """The gang's batch script: every value a single-quoted shell word (names may hold quotes, ``$``, newlines);
    FlagError for a value with a NUL, which no shell word can hold (bash drops it: the value would change)."""

    def word(value: str) -> str:
        if "\x00" in value:
            raise FlagError(f"pod group {group_name!r}: {value!r} contains a NUL character")
        return shlex.quote(value)

    def words(values: Sequence[str]) -> str:
        return " ".join(word(v) for v in values)

    values = [
        f"srun={word(srun)}",
        f"scontrol={word(scontrol)}",
        f"scancel={word(scancel)}",
        f"group_name={word(group_name)}",
        f"fail_gang={1 if failure_policy in _FAIL_GANG else 0}",
        f"uids=({words([m.uid for m in members])})",
        f"dirs=({words([str(m.job_dir) for m in members])})",
        f"scripts=({words([str(m.script) for m in members])})",
        f"outputs=({words([str(m.job_dir / layout.JOB_STDOUT) for m in members])})",
        f"exit_name={shlex.quote(layout.GANG_MEMBER_EXIT)}",
        f"stopped_name={shlex.quote(layout.GANG_MEMBER_STOPPED)}",
    ]
    head = "#!/bin/bash\n# interlink-nats gang launcher: one srun step per pod-group member (docs/backends/slurm.md).\n"
    return head + "\n".join(values) + "\n" + _LAUNCHER_BODY.lstrip("\n")
