"""Every codec generated into ``gen/interlink_nats/v1/fastwire.py`` against betterproto2, on generated messages.

Both ways: a fast encoder gives ``bytes(message)``; a fast decoder of betterproto2's bytes gives what
``Message.parse`` gives, and reads them itself (betterproto2's parser is never called) when they are plain;
the views hold the same values and the bytes they came from. Unicode and empty strings, repeated fields,
int64 and uint64 extremes, durations, timestamps; and the fallback: bytes betterproto2 reads but the fast path
does not take (unknown fields, a singular field twice, pre-1970 timestamps, values out of an enum or an int32)
and bytes that are not a message at all give betterproto2's own result or error, and no view.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import betterproto2
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from interlink_nats.gen.interlink_nats import v1 as pb
from interlink_nats.gen.interlink_nats.v1 import fastwire
from interlink_nats.kernel import fastwire_runtime as runtime

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
PLAIN_TIMES = st.datetimes(
    min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(dt.UTC)
)
ANY_TIMES = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(dt.UTC))
DURATIONS = st.timedeltas(min_value=dt.timedelta(days=-(10**5)), max_value=dt.timedelta(days=10**5))


def messages(times: st.SearchStrategy[dt.datetime]) -> dict[type[betterproto2.Message], st.SearchStrategy[Any]]:
    """A strategy per generated message, every field drawn (None and empty included)."""
    stamps = st.one_of(st.none(), times)
    pod = st.builds(pb.PodRef, uid=TEXT, namespace=TEXT, name=TEXT)
    resources = st.builds(
        pb.ResourceRequest,
        cpu_millis=INT64,
        memory_bytes=INT64,
        gpus=INT64,
        wall_time=st.one_of(st.none(), DURATIONS),
    )
    layout = st.builds(
        pb.LayoutEntry,
        kind=st.sampled_from(list(pb.LayoutEntryKind)),
        path=TEXT,
        mode=st.one_of(st.none(), st.integers(min_value=0, max_value=2**32 - 1)),
        target=TEXT,
    )
    job = st.builds(
        pb.JobScript,
        pod=st.one_of(st.none(), pod),
        script=st.text(max_size=300).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)),
        init_containers=st.lists(TEXT, max_size=3),
        containers=st.lists(TEXT, max_size=3),
        resources=st.one_of(st.none(), resources),
        backend_flags=st.lists(TEXT, max_size=3),
        layout=st.lists(layout, max_size=3),
    )
    container = st.builds(
        pb.ContainerStatus,
        name=TEXT,
        init=st.booleans(),
        phase=st.sampled_from(list(pb.ContainerPhase)),
        exit_code=st.one_of(st.none(), INT32),
        started_at=stamps,
        finished_at=stamps,
        reason=TEXT,
        message=TEXT,
    )
    status = st.builds(
        pb.JobStatus,
        pod=st.one_of(st.none(), pod),
        pool=TEXT,
        job_id=TEXT,
        state=st.sampled_from(list(pb.JobState)),
        containers=st.lists(container, max_size=3),
        reason=TEXT,
        message=TEXT,
        updated_at=stamps,
        deleted=st.booleans(),
    )
    return {
        pb.PodRef: pod,
        pb.ResourceRequest: resources,
        pb.LayoutEntry: layout,
        pb.JobScript: job,
        pb.SubmitRequest: st.builds(pb.SubmitRequest, job=st.one_of(st.none(), job)),
        pb.ContainerStatus: container,
        pb.JobStatus: status,
        pb.SubmitResponse: st.builds(
            pb.SubmitResponse, job_id=TEXT, created=st.booleans(), status=st.one_of(st.none(), status)
        ),
        pb.JobEvent: st.builds(pb.JobEvent, status=st.one_of(st.none(), status), revision=UINT64, instance_id=TEXT),
    }


PLAIN = messages(PLAIN_TIMES)
ANY = messages(ANY_TIMES)
CLASSES = list(PLAIN)


def snake(cls: type) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in cls.__name__).lstrip("_")


def codec(cls: type, kind: str) -> Callable[..., Any]:
    return getattr(fastwire, f"{kind}_{snake(cls)}")  # type: ignore[no-any-return]


@contextmanager
def betterproto_never_parses() -> Iterator[None]:
    """Make every generated class's ``parse`` fail: proof that a decode did not fall back."""

    def refuse(cls: type, data: bytes) -> None:
        raise AssertionError(f"{cls.__name__}.parse was called: the fast path fell back")

    saved = {cls: cls.__dict__.get("parse") for cls in CLASSES}
    for cls in CLASSES:
        cls.parse = classmethod(refuse)  # type: ignore[attr-defined, assignment]
    try:
        yield
    finally:
        for cls, original in saved.items():
            if original is None:
                del cls.parse  # type: ignore[attr-defined]
            else:
                cls.parse = original  # type: ignore[attr-defined]


def assert_view_holds(view: Any, message: betterproto2.Message) -> None:
    """The view's fields are the message's (enums as their ints, sub-messages as views), and its bytes read
    back as the message."""
    assert type(message).parse(view.encoded) == message
    for name in view._fields:
        if name == "encoded":
            continue
        got, want = getattr(view, name), getattr(message, name)
        if isinstance(want, betterproto2.Message):
            assert_view_holds(got, want)
        elif isinstance(want, list) and want and isinstance(want[0], betterproto2.Message):
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert_view_holds(g, w)
        else:
            assert got == want, name
            assert type(got) is (int if isinstance(want, betterproto2.Enum) else type(want)), name


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_encoding_is_betterproto2s_bytes(cls: type, data: st.DataObject) -> None:
    message = data.draw(ANY[cls])
    assert codec(cls, "encode")(message) == bytes(message)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_plain_bytes_are_decoded_and_viewed_without_betterproto2(cls: type, data: st.DataObject) -> None:
    message = data.draw(PLAIN[cls])
    encoded = bytes(message)
    expected = cls.parse(encoded)  # type: ignore[attr-defined]
    with betterproto_never_parses():
        decoded = codec(cls, "decode")(encoded)
    assert decoded == expected  # not always ``message``: betterproto2 reads a negative duration back otherwise
    assert bytes(decoded) == bytes(expected)
    view = codec(cls, "read")(encoded)
    assert view is not None
    assert view.encoded == encoded
    assert_view_holds(view, expected)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_bytes_of_betterproto2_decode_as_it_decodes_them(cls: type, data: st.DataObject) -> None:
    """Pre-1970 timestamps and extreme durations included: the fast path or the fallback, the same result."""
    encoded = bytes(data.draw(ANY[cls]))
    assert codec(cls, "decode")(encoded) == cls.parse(encoded)  # type: ignore[attr-defined]


UNUSUAL_TAILS = [
    b"\xf8\x07\x01",  # an unknown varint field (number 127)
    b"\x82\x08\x03abc",  # an unknown length-delimited field (number 128)
    b"\xf9\x07" + bytes(8),  # an unknown fixed64 field
]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), tail=st.sampled_from(UNUSUAL_TAILS))
def test_unknown_fields_fall_back_to_betterproto2(cls: type, data: st.DataObject, tail: bytes) -> None:
    encoded = bytes(data.draw(PLAIN[cls])) + tail
    decoded = codec(cls, "decode")(encoded)
    expected = cls.parse(encoded)  # type: ignore[attr-defined]
    assert decoded == expected
    assert bytes(decoded) == bytes(expected), "the unknown field is kept, and written back, as betterproto2 does"
    assert codec(cls, "encode")(decoded) == bytes(expected)
    assert codec(cls, "read")(encoded) is None


@pytest.mark.parametrize("cls", [pb.JobStatus, pb.JobEvent, pb.SubmitResponse], ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_singular_field_twice_falls_back_and_the_last_wins(cls: type, data: st.DataObject) -> None:
    first, second = bytes(data.draw(PLAIN[cls])), bytes(data.draw(PLAIN[cls]))
    assume(first and second)
    encoded = first + second
    expected = cls.parse(encoded)  # type: ignore[attr-defined]
    assert codec(cls, "decode")(encoded) == expected


@pytest.mark.parametrize(
    ("cls", "encoded"),
    [
        (pb.JobStatus, bytes(pb.JobStatus(state=pb.JobState.RUNNING))[:-1] + b"\x09"),  # a state not in the enum
        (pb.ContainerStatus, b"\x20" + b"\xff" * 5 + b"\x0f"),  # an int32 written in 5 bytes above its range
        (pb.ContainerStatus, b"\x10\x02"),  # a bool of 2
        (pb.ContainerStatus, b"\x2a\x02\x08\x7f" + b"\x2a\x00"),  # started_at twice
        (pb.JobStatus, b"\x42\x0b\x08" + b"\xff" * 9 + b"\x01"),  # updated_at before 1970
        (pb.LayoutEntry, b"\x18\x80\x80\x80\x80\x10"),  # a uint32 mode above 32 bits
        (pb.PodRef, b"\x0a\x01\xff"),  # not UTF-8
        (pb.PodRef, b"\x0a\x05ab"),  # a string cut short
        (pb.JobEvent, b"\x0a"),  # a key and nothing else
        (pb.JobEvent, b"\x10" + b"\xff" * 11),  # a varint of eleven bytes
        (pb.ResourceRequest, b"\x22\x04\x08\x01\x10\x01" + b"\x22\x00"),  # wall_time twice
    ],
)
def test_unusual_or_broken_bytes_get_betterproto2s_answer_and_no_view(cls: type, encoded: bytes) -> None:
    assert codec(cls, "read")(encoded) is None
    try:
        expected = cls.parse(encoded)  # type: ignore[attr-defined]
    except Exception as exc:  # the same error, from the same parser
        with pytest.raises(type(exc)):
            codec(cls, "decode")(encoded)
        return
    assert codec(cls, "decode")(encoded) == expected


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_field_alone_is_what_betterproto2_writes_for_it(cls: type, data: st.DataObject) -> None:
    """``<message>_<field>_field``: a message of that field only; message fields from their encoded bytes."""
    message = data.draw(ANY[cls])
    for name, meta in cls._betterproto.meta_by_field_name.items():  # type: ignore[attr-defined]
        if meta.repeated:
            continue
        value = getattr(message, name)
        part = value if not isinstance(value, betterproto2.Message) else bytes(value)
        alone = bytes(cls(**{name: value}))
        assert getattr(fastwire, f"{snake(cls)}_{name}_field")(part) == alone, name
        once = getattr(fastwire, f"{snake(cls)}_{name}_once", None)
        if once is not None:
            assert once(alone) == (None if value is None else bytes(value))
            assert once(alone + alone) is None if value is not None else once(alone) is None


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_without_drops_the_named_fields_as_betterproto2_would_clear_them(cls: type, data: st.DataObject) -> None:
    """``<message>_without(*names)``: the bytes of the message with those fields unset, the rest as they were."""
    message = data.draw(ANY[cls])
    names = list(cls._betterproto.meta_by_field_name)  # type: ignore[attr-defined]
    dropped = data.draw(st.lists(st.sampled_from(names), unique=True))
    kept = {name: getattr(message, name) for name in names if name not in dropped}
    encoded = bytes(message)
    without = getattr(fastwire, f"{snake(cls)}_without")(*dropped)
    assert without(encoded) == bytes(cls(**kept))
    if without(encoded) == encoded:
        assert without(encoded) is encoded  # nothing dropped: no copy
    with pytest.raises(KeyError):
        getattr(fastwire, f"{snake(cls)}_without")("no_such_field")


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_with_puts_a_field_where_betterproto2_writes_it(cls: type, data: st.DataObject) -> None:
    """``<message>_with(name)``: a message encoded without a singular field, and that field encoded alone, give
    the message's bytes; unknown fields stay last, where betterproto2 writes a parsed message's."""
    message = data.draw(ANY[cls])
    singular = [name for name in cls._betterproto.meta_by_field_name if hasattr(fastwire, f"{snake(cls)}_{name}_field")]  # type: ignore[attr-defined]
    assume(singular)
    name = data.draw(st.sampled_from(singular))
    value = getattr(message, name)
    field = getattr(fastwire, f"{snake(cls)}_{name}_field")(
        bytes(value) if isinstance(value, betterproto2.Message) else value
    )
    lacking = getattr(fastwire, f"{snake(cls)}_without")(name)(bytes(message))
    put = getattr(fastwire, f"{snake(cls)}_with")(name)
    assert put(lacking, field) == bytes(message)
    unknown = b"\xc0\x3e\x01"  # field 1000, varint 1: no generated message declares it
    assert put(lacking + unknown, field) == bytes(message) + unknown
    with pytest.raises(KeyError):
        getattr(fastwire, f"{snake(cls)}_with")("no_such_field")


@given(INT64, st.integers(min_value=0, max_value=2**64 - 1))
def test_varints_read_back_as_written(signed: int, unsigned: int) -> None:
    for value in (signed, unsigned):
        out = bytearray()
        runtime.write_varint(out, value)
        read, pos = runtime.read_varint(bytes(out) + b"\x01", 0)
        assert (read, pos) == (value % 2**64, len(out))
        assert runtime.skip(bytes(out), 0, 0) == len(out)


def test_what_no_int64_is_is_refused() -> None:
    with pytest.raises(ValueError, match="ten bytes"):
        runtime.read_varint(b"\xff" * 11, 0)
    with pytest.raises(ValueError, match="64 bits"):
        runtime.read_varint(b"\xff" * 9 + b"\x7f", 0)
    with pytest.raises(IndexError):
        runtime.read_varint(b"\x80", 0)
    with pytest.raises(ValueError, match="64-bit"):
        fastwire.encode_resource_request(pb.ResourceRequest(gpus=-(2**63) - 1))
    with pytest.raises(ValueError, match="wire type 3"):
        runtime.skip(b"", 0, 3)
