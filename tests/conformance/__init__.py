"""The backend conformance kit: one scenario suite every backend passes (``pytest tests/conformance -k <name>``).

A package (this file) so its ``conftest`` and test modules are ``conformance.*`` and never shadow the flat
``tests/`` helpers they import (``conftest``, ``slurm_cluster``, ``htcondor_standin``, ``accounts``)."""
