"""The real HTCondor Python bindings as pytest fixtures ``htcondor2`` and ``classad2`` (import the ``*_fixture``
functions into a test module to use them), shared by the htcondor tests."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import missing_service


@pytest.fixture(scope="module", name="htcondor2")
def htcondor2_fixture() -> ModuleType:
    try:
        import htcondor2
    except ImportError:
        missing_service("the HTCondor Python bindings (pip install htcondor)")
    return htcondor2


@pytest.fixture(scope="module", name="classad2")
def classad2_fixture() -> ModuleType:
    try:
        import classad2
    except ImportError:
        missing_service("the HTCondor Python bindings (pip install htcondor)")
    return classad2
