"""Pure text of the pods of one Job as ONE Slurm job array: its ``sbatch --array`` and the task script.

Every task of an array has the same sbatch options (slurm.schedmd.com ``job_array.html``), so the members must
agree on their flags and each task gets the largest member's resources; their scripts differ, so the array's
batch script is a small wrapper that runs the member whose index is ``SLURM_ARRAY_TASK_ID``. Each member keeps
its own directory, ``INTERLINK_JOB_DIR`` and output: the backend links ``<array dir>/tasks/<i>`` to member i's
directory, and the array's ``--output=<array dir>/tasks/%a/job.out`` (``%a``: the task index) is then that
member's own ``job.out`` (Slurm's own messages, a cancel or an out-of-memory kill, land there too, as a single
job's do). Tested in tests/backends/slurm/test_slurm_array_text.py; on a real Slurm in
tests/backends/slurm/test_slurm_arrays.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import timedelta

from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel import layout
from interlink_nats.submitters.backends.slurm import array_ids
from interlink_nats.submitters.backends.slurm.flags import Flag, FlagError
from interlink_nats.submitters.backends.slurm.parse import resource_flags, sbatch_argv
from interlink_nats.submitters.core.backend import JobSpec

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)

TASKS_DIR = "tasks"
"""``<array dir>/tasks/<i>``: a link to member i's job directory (what ``%a`` in ``--output`` reaches)."""


def per_task_resources(resources: Sequence[pb.ResourceRequest | None]) -> pb.ResourceRequest | None:
    """One task's request, which every member fits in: the largest CPUs, memory, GPUs and wall time asked by any
    member (members of one Job ask the same; None when none asked anything)."""
    asked = [r for r in resources if r is not None]
    if not asked:
        return None
    times = [r.wall_time for r in asked if r.wall_time is not None and r.wall_time.total_seconds() > 0]
    return pb.ResourceRequest(
        cpu_millis=max(r.cpu_millis for r in asked),
        memory_bytes=max(r.memory_bytes for r in asked),
        gpus=max(r.gpus for r in asked),
        wall_time=max(times) if times else timedelta(0),
    )


def array_sbatch_argv(
    sbatch: str,
    *,
    array_uid: str,
    array_dir: str,
    script: str,
    count: int,
    throttle: int,
    pool_flags: Sequence[Flag],
    pod_flags: Sequence[Flag],
    resources: Sequence[pb.ResourceRequest | None],
    site: Sequence[str] = (),
) -> list[str]:
    """The one sbatch of an array of ``count`` tasks, named by the array's uid (``find_array`` finds it by that
    name after a crash), in the precedence of ``parse.sbatch_argv``; each task's output is its member's own."""
    sized = [*resource_flags(per_task_resources(resources)), array_ids.array_flag(count, throttle)]
    argv = sbatch_argv(
        sbatch,
        uid=array_uid,
        job_dir=array_dir,
        script=script,
        pool_flags=pool_flags,
        pod_flags=pod_flags,
        sized=sized,
        site=site,
    )
    own = f"--output={array_dir}/{TASKS_DIR}/%a/{layout.JOB_STDOUT}"
    return [own if word.startswith("--output=") else word for word in argv]


_TASK_BODY = r"""
i=${SLURM_ARRAY_TASK_ID-}
if [[ ! $i =~ ^[0-9]+$ ]] || ((10#$i >= ${#dirs[@]})); then
  printf '%s\n' "interlink-nats array: no member for task '$i' of ${#dirs[@]}" >&2
  exit 125
fi
i=$((10#$i))
export INTERLINK_JOB_DIR=${dirs[i]}
cd -- "$INTERLINK_JOB_DIR" || exit 125
exec bash -- "${scripts[i]}" < /dev/null
"""


def task_script(members: Sequence[JobSpec]) -> str:
    """The array's batch script. Its header is fixed text (sbatch reads ``#SBATCH`` lines only up to the first
    command, ``set -u``, before any value); every member's directory and script is a single-quoted shell word
    (``shlex.quote``), never in a comment. FlagError for a value with a NUL, which no shell word can hold."""

    def words(values: Sequence[str]) -> str:
        for value in values:
            if "\x00" in value:
                raise FlagError(f"job array: {value!r} contains a NUL character")
        return " ".join(shlex.quote(v) for v in values)

    head = (
        "#!/bin/bash\n# interlink-nats job array: task i runs member i's own script (docs/backends/slurm.md).\nset -u\n"
    )
    dirs = f"dirs=({words([str(m.job_dir) for m in members])})\n"
    scripts = f"scripts=({words([str(m.script) for m in members])})\n"
    return head + dirs + scripts + _TASK_BODY.lstrip("\n")


def throttle_for(asked: int, site: int) -> int:
    """The ``%`` throttle: the array's own (``ArraySpec.throttle``) when set, else the site's; 0: none."""
    return asked if asked > 0 else max(site, 0)
