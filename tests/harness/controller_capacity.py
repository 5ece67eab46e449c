"""A pool's row in the MasterQueue status, as the capacity tests read it."""

from __future__ import annotations

from typing import Any

from kube_emulator import KubeEmulator


def pool_row(emu: KubeEmulator, pool: str) -> dict[str, Any]:
    status = (emu.get("MasterQueue", "mq") or {}).get("status") or {}
    return next((row for row in status.get("pools") or [] if row["name"] == pool), {})
