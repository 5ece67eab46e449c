"""Fake srun, scontrol and scancel for the pod-group launcher run under plain bash (no Slurm)."""

from __future__ import annotations

FAKE_SRUN = r"""#!/bin/bash
# Records its arguments and the group environment, then runs the member's script (the last argument) itself.
uid=; for a in "$@"; do case $a in --job-name=*) uid=${a#*=};; esac; done
printf '%s\n' "$@" > "$FAKE/$uid.argv"
env | grep -a '^INTERLINK_' > "$FAKE/$uid.env"
printf '%s=%q\n' NAME "$INTERLINK_GROUP_NAME" >> "$FAKE/$uid.env"
echo $$ > "$FAKE/$uid.pid"
exec bash "${!#}"
"""


FAKE_SCONTROL = '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "%s\\n" $FAKE_NODES\n'


FAKE_SCANCEL = r"""#!/bin/bash
# --signal=TERM <job>: TERM to every member still running (what Slurm does to the steps).
echo "$@" >> "$FAKE/scancel.log"
for p in "$FAKE"/*.pid; do kill -TERM "$(cat "$p")" 2>/dev/null; done
"""
