"""Throw-away Unix accounts for the account-switching tests (the tests run as root), removed afterwards.

Also a job-directory root every account can reach: pytest's own tmp_path sits below a 0700 directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class ThrowAway:
    name: str
    uid: int
    gid: int


def need_root() -> None:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.fail("the account tests need root and useradd (CI runs them as root)")


@pytest.fixture
def account() -> Iterator[ThrowAway]:
    """A new user with its own group and no home directory."""
    need_root()
    name = f"il26{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        pw = pwd.getpwnam(name)
        yield ThrowAway(name, pw.pw_uid, pw.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", name], check=False, stderr=subprocess.DEVNULL)


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A state directory below /tmp that other accounts may traverse (0711), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="il26-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
