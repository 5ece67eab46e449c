"""Each backend's BuildConfig options in ``BuildConfig.backends``, and peers of the release before, which know only
the old fields ``slurm`` (11) and ``shell`` (12): both directions, with messages of the old shape built by hand as
wire bytes (what an older peer's generated code sends and reads), and the site file's old spelling.

The bridge is ``kernel.backend_options``; docs/rpc.md, "Backend options", says the rules these check.
"""

from __future__ import annotations

import pytest
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.kernel.backend_options import backend_options, with_legacy_fields
from interlink_nats.kernel.config_files import ConfigFileError
from interlink_nats.services.scripts import PodRejected, render_job
from interlink_nats.submitters.backends.shell.backend import ShellBackend
from interlink_nats.submitters.backends.slurm.backend import SlurmBackend
from interlink_nats.submitters.settings import parse_build_config
from jobs import pod_dict

FLAGS = "slurm-job.vk.io/flags"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def embedded(number: int, payload: bytes) -> bytes:
    """One length-delimited field (wire type 2): a message-typed field as every protobuf encoder writes it."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def top_fields(data: bytes) -> dict[int, bytes]:
    """The length-delimited top-level fields of ``data`` by number, read as a peer that knows only the old fields
    reads them (varints skipped); enough for a BuildConfig whose other fields are varints or messages."""
    fields: dict[int, bytes] = {}
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        if key & 7 == 0:
            _, i = read_varint(data, i)
            continue
        assert key & 7 == 2, f"unexpected wire type {key & 7}"
        size, i = read_varint(data, i)
        fields[key >> 3] = data[i : i + size]
        i += size
    return fields


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def old_submitters_announcement(slurm: pb.SlurmOptions | None = None, shell: pb.ShellOptions | None = None) -> bytes:
    """A BuildConfig as a submitter of the release before encodes it: runtime none (field 1 = 4), the options in
    fields 11 and 12, no field 17."""
    data = varint(1 << 3) + varint(pb.ContainerRuntime.NONE.value)
    if slurm is not None:
        data += embedded(11, bytes(slurm))
    if shell is not None:
        data += embedded(12, bytes(shell))
    return data


def test_an_older_submitters_options_are_read_from_the_old_fields() -> None:
    """A new gateway refuses a pod's flag by an older pool's announced allowlist; new backends take their options
    from the old fields too (a site's BuildConfig kept by an older release)."""
    bc = pb.BuildConfig.parse(
        old_submitters_announcement(
            pb.SlurmOptions(allowed_pod_flags=["time"], sbatch_flags=["-p", "batch"]),
            pb.ShellOptions(max_concurrent_jobs=3),
        )
    )
    assert bc.backends is None, "the old shape carries no field 17"
    pod = pod_dict("2b0b1b7e-6a55-4c7f-9d41-0f5a1d2c3e4f", {"main": "true"}, annotations={FLAGS: "--qos=hi"})
    with pytest.raises(PodRejected, match="not allowed on this pool") as err:
        render_job(pod, bc)
    assert err.value.field == f'metadata.annotations["{FLAGS}"]'
    pod["metadata"]["annotations"] = {FLAGS: "--time=5"}
    assert render_job(pod, bc).backend_flags == ["--time=5"]

    slurm = SlurmBackend()
    slurm.configure(bc)
    assert [f.argv() for f in slurm._pool_flags] == ["--partition=batch"]
    shell = ShellBackend()
    shell.configure(bc)
    assert shell._limit == 3


def test_the_new_section_wins_over_an_old_field_and_each_backend_falls_back_alone() -> None:
    bc = pb.BuildConfig.parse(
        old_submitters_announcement(pb.SlurmOptions(use_sacct=False), pb.ShellOptions(max_concurrent_jobs=2))
        + embedded(17, bytes(pb.BackendOptions(slurm=pb.SlurmOptions(use_sacct=True))))
    )
    options = backend_options(bc)
    assert options.slurm == pb.SlurmOptions(use_sacct=True)
    assert options.shell == pb.ShellOptions(max_concurrent_jobs=2), "no shell in backends: the old field"


def test_an_older_gateway_reads_the_copies_in_the_old_fields() -> None:
    """What a new submitter announces (its backend has configured it, then the announcer copies) carries each
    section in field 11/12 too, byte for byte what the older release wrote there."""
    bc = pb.BuildConfig(runtime=pb.ContainerRuntime.NONE)
    bc.backends = pb.BackendOptions(shell=pb.ShellOptions(max_concurrent_jobs=4))
    SlurmBackend().configure(bc)
    announced = bytes(with_legacy_fields(bc))
    fields = top_fields(announced)
    assert bc.backends is not None and bc.backends.slurm is not None
    assert fields[11] == bytes(bc.backends.slurm) and pb.SlurmOptions.parse(fields[11]).allowed_pod_flags
    assert pb.ShellOptions.parse(fields[12]).max_concurrent_jobs == 4
    assert pb.BackendOptions.parse(fields[17]) == bc.backends


def test_a_backend_this_peer_does_not_know_is_kept_and_ignored() -> None:
    """A newer pool's options for a backend added after this release: an unknown field of BackendOptions, read
    as nothing, and written back unchanged (a gateway storing the announcement in redis loses nothing)."""
    unknown = embedded(9, b"\x0a\x03pbs")  # BackendOptions field 9, not in this release
    data = embedded(17, bytes(pb.BackendOptions(slurm=pb.SlurmOptions(use_sacct=True))) + unknown)
    bc = pb.BuildConfig.parse(data)
    assert backend_options(bc) == pb.BackendOptions(slurm=pb.SlurmOptions(use_sacct=True))
    assert bytes(pb.BuildConfig.parse(bytes(bc))) == data
    SlurmBackend().configure(bc)  # a submitter of this release, handed such a BuildConfig, and its announcer
    assert top_fields(bytes(with_legacy_fields(bc)))[17].endswith(unknown), "the unknown backend is still there"


def test_the_site_files_old_spelling_is_read_into_backends() -> None:
    """``build_config: {slurm: …}`` (before ``backends``) still loads, into the new section, with no deprecation
    warning (pytest turns one into an error); both spellings at once is one line naming both."""
    bc = parse_build_config({"runtime": "none", "slurm": {"use_sacct": True}, "shell": {"maxConcurrentJobs": 2}})
    assert bc.backends == pb.BackendOptions(
        slurm=pb.SlurmOptions(use_sacct=True), shell=pb.ShellOptions(max_concurrent_jobs=2)
    )
    assert bc.slurm is None and bc.shell is None
    new = parse_build_config({"backends": {"slurm": {"use_sacct": True}}})
    assert new.backends == pb.BackendOptions(slurm=pb.SlurmOptions(use_sacct=True))
    with pytest.raises(ConfigFileError, match=r"slurm is set twice: as slurm and as backends\.slurm"):
        parse_build_config({"slurm": {}, "backends": {"slurm": {"use_sacct": True}}})
    with pytest.raises(ConfigFileError, match="backends must be a mapping"):
        parse_build_config({"slurm": {}, "backends": ["slurm"]})
