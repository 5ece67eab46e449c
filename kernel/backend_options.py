"""Each backend's own BuildConfig options (``BuildConfig.backends``), read and written across one release of peers
that still use the fields they replaced.

``BuildConfig.slurm`` (11) and ``BuildConfig.shell`` (12) once held these options in the shared message; they now
live in ``BuildConfig.backends``, one field per backend. For one release both sides bridge the two shapes:
readers take a backend's section from ``backends`` and, where it lacks that backend, from the old field (an older
submitter's announcement); a submitter copies its ``backends`` sections into the old fields before it announces (an
older gateway reads only those). The old fields are a closed set (``build_config.LEGACY_SECTIONS``, the same names
in a site file): a new backend's options go into ``backends`` only. Pure (no I/O); the one place that reads or writes
the old fields, so the next release drops them here.
"""

from __future__ import annotations

from interlink_nats.gen.interlink_nats import v1 as pb

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)


def backend_options(bc: pb.BuildConfig) -> pb.BackendOptions:
    """The pool's backend sections: ``bc.backends``, with a section it lacks taken from the old field of the same
    name (an older submitter announced only that). Every other field of ``bc.backends`` is kept, those of backends
    this release does not know too (unknown fields). ``bc`` is left as it is; the answer may be ``bc.backends``
    itself, so a caller that changes it assigns it back."""
    current = bc.backends or pb.BackendOptions()
    missing_slurm = current.slurm is None and bc.slurm is not None
    missing_shell = current.shell is None and bc.shell is not None
    if not (missing_slurm or missing_shell):
        return current
    merged = pb.BackendOptions.parse(bytes(current))  # a copy, unknown fields and all
    if missing_slurm:
        merged.slurm = bc.slurm
    if missing_shell:
        merged.shell = bc.shell
    return merged


def with_legacy_fields(bc: pb.BuildConfig) -> pb.BuildConfig:
    """``bc`` with its ``backends`` sections copied into the old fields too, so that a gateway of the release
    before reads them (it knows no ``backends``); set by attribute, as the generated constructor warns on the
    deprecated fields. Returns ``bc``."""
    options = backend_options(bc)
    bc.backends = options
    bc.slurm = options.slurm
    bc.shell = options.shell
    return bc
