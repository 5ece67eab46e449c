"""protoc plugin: straight-line protobuf codecs for a few hot messages, generated from proto/.

Why: betterproto2 spends 20 to 150 µs per message on reflection, and a handful of messages cross NATS once
per pod (Submit's request and reply, job statuses and events). Their codecs were written by hand, field
numbers included, and checked only against samples; here they are generated from the contract instead,
the way vtprotobuf generates marshalers for Go, so a change to proto/ cannot leave them behind.

For every message reachable from the ``roots=`` option (``+``-separated full names) the generated module
(``<package path>/fastwire.py``, next to betterproto2's) has:

- ``encode_<message>(msg) -> bytes``: ``bytes(msg)``, byte for byte (betterproto2's field order, which is the
  declaration order; proto3 defaults left out; set messages and ``optional`` fields written; unknown
  fields kept at the end);
- ``decode_<message>(data) -> pb.Message``: ``pb.Message.parse(data)``; bytes in the plain shape (known
  fields of the right wire type, singular ones once, valid UTF-8, known enum values, in-range ints and
  timestamps) are read straight, anything else goes to betterproto2, so results and errors are its own;
- ``read_<message>(data) -> MessageView | None``: the same plain shape as a NamedTuple (enums as ints,
  sub-messages as views, each view with its ``encoded`` bytes), None when not plain: for readers that need a
  few fields and the bytes as they came (the gateway stores statuses encoded);
- ``<message>_<field>_field(value) -> bytes``: one singular field as ``bytes(msg)`` writes it (a message
  field takes the sub-message already encoded), to build a message from parts already encoded;
- ``<message>_<field>_once(data) -> bytes | None``: a message field's bytes as they came, when it occurs once;
- ``<message>_without(*fields) -> (data -> bytes)``: a function that drops the named top-level fields from
  encoded messages (every occurrence; the rest byte for byte), for a holder that keeps those fields elsewhere;
- ``<message>_with(field) -> ((data, encoded field) -> bytes)``: a function that puts one field, already
  encoded (``<message>_<field>_field``), into an encoded message that lacks it, where ``bytes(msg)`` writes
  it, for a message encoded before that field was known (the rest byte for byte);
- ``check_<message>(data)``: ValueError unless the top-level fields are well-formed (known fields of their
  wire type, lengths within the data), which betterproto2 does not check.

Supported field types: string, bytes, bool, enum, (u)int32, (u)int64, messages of the same package,
``google.protobuf.Timestamp`` and ``Duration``; singular, ``optional`` and repeated (strings, bytes and
messages only). Anything else in a root's reach stops the generation with an error.

Reads a ``CodeGeneratorRequest`` on stdin, writes a ``CodeGeneratorResponse`` on stdout (google.protobuf).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from fastwire_model import (
    VARINT_KINDS,
    VIEW_EXTRA,
    Field,
    Message,
    Writer,
    collect,
    decode_type,
    default,
    has_presence,
    py_type,
    view_type,
)
from google.protobuf.compiler import plugin_pb2  # type: ignore[import-untyped]

RUNTIME = "interlink_nats.kernel.fastwire_runtime"
"""The hand-written wire primitives the generated codecs call, imported rather than copied into each module."""
_RUNTIME_NAMES = {
    "Unusual": "Unusual",
    "check_top": "_check_top",
    "encode_duration": "_duration",
    "encode_timestamp": "_timestamp",
    "field_once": "_field_once",
    "insert": "_insert",
    "read_duration": "_read_duration",
    "read_timestamp": "_read_timestamp",
    "read_varint": "_read_varint",
    "without": "_without",
    "write_varint": "_varint",
}
"""Runtime name → the module-level name the generated code calls it by (private there: not its API)."""


_VARINT_READS: dict[str, tuple[tuple[str, ...], str]] = {
    "bool": (("if value > 1:", "    raise Unusual"), "value == 1"),
    "int32": (
        ("if value >> 31:", "    if value < 0xFFFFFFFF80000000:", "        raise Unusual", "    value -= 1 << 64"),
        "value",
    ),
    "int64": (("if value >> 63:", "    value -= 1 << 64"), "value"),
    "uint32": (("if value >> 32:", "    raise Unusual"), "value"),
    "uint64": ((), "value"),
}
"""A varint kind (enums aside: theirs name the enum) → the lines that check and convert the ``value`` read,
and the expression the field keeps. One table, so each kind's rule is read in one place."""


def _literal(data: bytes) -> str:
    """``data`` as a bytes literal of hex escapes: keys read as numbers, not as stray characters."""
    return 'b"' + "".join(f"\\x{byte:02x}" for byte in data) + '"'


def _emit_len(w: Writer, key: bytes, payload: str) -> None:
    """Append a length-delimited value already in ``payload`` (bytes) under ``key``."""
    w(f"n = len({payload})")
    w(f"out += {_literal(key)}")
    w("if n < 0x80:")
    w("    out.append(n)")
    w("else:")
    w("    _varint(out, n)")
    w(f"out += {payload}")


def _emit_encode_value(w: Writer, f: Field, value: str) -> None:
    """Append field ``f`` holding ``value`` (known to be set and not the default)."""
    if f.kind == "string":
        w(f"b = {value}.encode()")
        _emit_len(w, f.key_bytes, "b")
    elif f.kind == "bytes":
        _emit_len(w, f.key_bytes, value)
    elif f.kind == "message":
        w(f"b = _encode_{Message(f.type_name, ()).snake}({value})")
        _emit_len(w, f.key_bytes, "b")
    elif f.kind == "timestamp":
        w(f"b = _timestamp({value})")
        _emit_len(w, f.key_bytes, "b")
    elif f.kind == "duration":
        w(f"d = _wkt.Duration.from_timedelta({value})  # betterproto2's own conversion")
        w("b = _duration(d.seconds, d.nanos)")
        _emit_len(w, f.key_bytes, "b")
    elif f.kind == "bool" and has_presence(f):  # an ``optional`` bool set to false is written too
        w(f"out += {_literal(f.key_bytes + bytes([1]))} if {value} else {_literal(f.key_bytes + bytes([0]))}")
    elif f.kind == "bool":
        w(f"out += {_literal(f.key_bytes + bytes([1]))}")
    else:
        w(f"v = int({value})")
        w(f"out += {_literal(f.key_bytes)}")
        w("if 0 <= v < 0x80:")
        w("    out.append(v)")
        w("else:")
        w("    _varint(out, v)")


def _emit_encode_field(w: Writer, f: Field, value: str) -> None:
    """Append field ``f`` of ``value`` unless betterproto2 leaves it out (None, or proto3's default)."""
    w(f"# {f.name} = {f.number}")
    if f.repeated:
        w(f"for item in {value}:")
        _emit_encode_value(w.indent(), f, "item")
        w.dedent()
        return
    w(f"v = {value}")
    w("if v is not None:" if has_presence(f) else "if v:")
    _emit_encode_value(w.indent(), f, "v")
    w.dedent()


def emit_encoders(w: Writer, m: Message) -> None:
    w(f"def encode_{m.snake}(msg: pb.{m.name}) -> bytes:")
    w('    """``bytes(msg)``, byte for byte, without betterproto2\'s reflection."""')
    w(f"    return bytes(_encode_{m.snake}(msg))")
    w()
    w()
    w(f"def _encode_{m.snake}(msg: pb.{m.name}) -> bytearray:")
    w.indent()
    w("out = bytearray()")
    for f in m.fields:
        _emit_encode_field(w, f, f"msg.{f.name}")
    w("out += msg._unknown_fields")
    w("return out")
    w.dedent()
    w()
    w()
    for f in m.fields:
        if f.repeated:
            continue
        value_type = "bytes" if f.kind == "message" else py_type(f)
        w(f"def {m.snake}_{f.name}_field(value: {value_type} | None) -> bytes:")
        what = "the encoded sub-message" if f.kind == "message" else "the value"
        w(f'    """``{m.name}.{f.name}`` as ``bytes(msg)`` writes it, from {what}."""')
        w.indent()
        w("out = bytearray()")
        if f.kind == "message":
            w("v = value")
            w("if v is not None:")
            _emit_len(w.indent(), f.key_bytes, "v")
            w.dedent()
        else:
            _emit_encode_field(w, f, "value")
        w("return bytes(out)")
        w.dedent()
        w()
        w()
        if f.kind == "message":
            w(f"def {m.snake}_{f.name}_once(data: bytes) -> bytes | None:")
            w(f'    """``{m.name}.{f.name}``\'s bytes as they came in ``data``, when it occurs exactly once."""')
            w(f"    return _field_once(data, {f.key})")
            w()
            w()


def _emit_read_field(w: Writer, f: Field, view: bool, bit: int) -> None:
    """The branch of the reading loop for field ``f``'s key: check, read, store in its local."""
    w(f"elif key == {f.key}:" if bit else f"if key == {f.key}:")
    w.indent()
    w(f"# {f.name} = {f.number}")
    if not f.repeated:
        w(f"if seen & {1 << bit}:")
        w("    raise Unusual")
        w(f"seen |= {1 << bit}")
    w("value = data[pos]")
    w("if value < 0x80:")
    w("    pos += 1")
    w("else:")
    w("    value, pos = _read_varint(data, pos)")
    target = f"{f.name}.append" if f.repeated else None
    if f.kind == "enum":
        if view:
            w(f"if value not in _{Message(f.type_name, ()).snake.upper()}_VALUES:")
            w("    raise Unusual")
            result = "value"
        else:
            w(f"member = _{Message(f.type_name, ()).snake.upper()}.get(value)")
            w("if member is None:")
            w("    raise Unusual")
            result = "member"
    elif f.kind in VARINT_KINDS.values():
        checks, result = _VARINT_READS[f.kind]
        for line in checks:
            w(line)
    else:
        w("stop = pos + value")
        w("if stop > end:")
        w("    raise Unusual")
        if f.kind == "string":
            result = 'str(data[pos:stop], "utf-8")'
        elif f.kind == "bytes":
            result = "data[pos:stop]"
        elif f.kind == "timestamp":
            result = "_read_timestamp(data, pos, stop)"
        elif f.kind == "duration":
            result = "_read_duration(data, pos, stop)"
        else:
            prefix = "_view" if view else "_decode"
            result = f"{prefix}_{Message(f.type_name, ()).snake}(data, pos, stop)"
        w(f"{'item' if f.repeated else f.name} = {result}")
        w("pos = stop")
        result = "item"
        if not f.repeated:
            w.dedent()
            return
    if f.repeated:
        w(f"{target}({result})")
    elif result != f.name:
        w(f"{f.name} = {result}")
    w.dedent()


def emit_readers(w: Writer, m: Message, view: bool) -> None:
    prefix = "_view" if view else "_decode"
    result = f"{m.name}View" if view else f"pb.{m.name}"
    w(f"def {prefix}_{m.snake}(data: bytes, pos: int, end: int) -> {result}:")
    w.indent()
    if view:
        w("start = pos")
    for f in m.fields:
        annotation = view_type(f) if view else decode_type(f)
        w(f"{f.name}: {annotation} = {default(f, view)}")
    if any(not f.repeated for f in m.fields):
        w("seen = 0")
    w("while pos < end:")
    w.indent()
    w("key = data[pos]")
    w("if key < 0x80:")
    w("    pos += 1")
    w("else:")
    w("    key, pos = _read_varint(data, pos)")
    for bit, f in enumerate(m.fields):
        _emit_read_field(w, f, view, bit)
    if m.fields:
        w("else:")
        w("    raise Unusual")
    else:
        w("raise Unusual")
    w.dedent()
    w("if pos != end:")
    w("    raise Unusual")
    args = ", ".join(f.name for f in m.fields)
    if view:
        w(f"return {m.name}View({args}{', ' if args else ''}data[start:end])")
    else:
        kwargs = ", ".join(f"{f.name}={f.name}" for f in m.fields)
        w(f"return pb.{m.name}({kwargs})")
    w.dedent()
    w()
    w()


def emit_public_readers(w: Writer, m: Message) -> None:
    w(f"def decode_{m.snake}(data: bytes) -> pb.{m.name}:")
    w(f'    """``pb.{m.name}.parse(data)``: read straight when plain, else by betterproto2 (its result and errors)."""')
    w("    try:")
    w(f"        return _decode_{m.snake}(data, 0, len(data))")
    w("    except (Unusual, IndexError, ValueError, OverflowError):")
    w(f"        return pb.{m.name}.parse(data)")
    w()
    w()
    w(f"def decode_plain_{m.snake}(data: bytes) -> pb.{m.name} | None:")
    w(f'    """``pb.{m.name}.parse(data)`` when ``data`` is plain, else None. Plain bytes are well-formed in every')
    w("    field (known fields only, each with its own wire type, every length and varint within its message), so a")
    w('    caller may take them without a separate strict check; None leaves them to that check and betterproto2."""')
    w("    try:")
    w(f"        return _decode_{m.snake}(data, 0, len(data))")
    w("    except (Unusual, IndexError, ValueError, OverflowError):")
    w("        return None")
    w()
    w()
    w(f"def read_{m.snake}(data: bytes) -> {m.name}View | None:")
    w(f'    """The fields of a plain ``{m.name}``; None when ``data`` is not one (ask betterproto2 then)."""')
    w("    try:")
    w(f"        return _view_{m.snake}(data, 0, len(data))")
    w("    except (Unusual, IndexError, ValueError, OverflowError):")
    w("        return None")
    w()
    w()


def emit_check(w: Writer, m: Message) -> None:
    keys = ", ".join(str(f.key) for f in m.fields)
    w(f"def check_{m.snake}(data: bytes) -> None:")
    w(f'    """ValueError (or IndexError) unless the top-level fields of ``data`` are a well-formed ``{m.name}``."""')
    w(f"    _check_top(data, frozenset(({keys}{',' if len(m.fields) == 1 else ''})))")
    w()
    w()


def _frozenset(numbers: Iterable[int]) -> str:
    listed = ", ".join(map(str, numbers))
    return f"frozenset({{{listed}}})" if listed else "frozenset()"


def emit_without(w: Writer, m: Message) -> None:
    numbers = ", ".join(f'"{f.name}": {f.number}' for f in m.fields)
    w(f"_{m.snake.upper()}_NUMBERS = {{{numbers}}}")
    w()
    w()
    w(f"def {m.snake}_without(*fields: str) -> Callable[[bytes], bytes]:")
    w(f'    """A function that returns an encoded ``{m.name}`` less the named top-level fields (KeyError: no such')
    w('    field); ValueError from it unless the top-level fields are well-formed."""')
    w(f"    return partial(_without, numbers=frozenset(_{m.snake.upper()}_NUMBERS[name] for name in fields))")
    w()
    w()
    earlier = ", ".join(f'"{f.name}": {_frozenset(e.number for e in m.fields[:i])}' for i, f in enumerate(m.fields))
    w(f"_{m.snake.upper()}_EARLIER = {{{earlier}}}")
    w()
    w()
    w(f"def {m.snake}_with(field: str) -> Callable[[bytes, bytes], bytes]:")
    w(f'    """A function that puts the named field, already encoded, into an encoded ``{m.name}`` that lacks it,')
    w("    where ``bytes(msg)`` writes it (KeyError: no such field); ValueError from it unless the top-level fields")
    w('    are well-formed."""')
    w(f"    return partial(_insert, after=_{m.snake.upper()}_EARLIER[field])")
    w()
    w()


def emit_view_class(w: Writer, m: Message) -> None:
    w(f"class {m.name}View(NamedTuple):")
    w(f'    """A plain ``{m.name}`` as read: enums as ints, sub-messages as views, ``encoded`` its bytes."""')
    w()
    for f in m.fields:
        w(f"    {f.name}: {view_type(f)}")
    w(f"    {VIEW_EXTRA}: bytes")
    w()
    w()


def generate(request: plugin_pb2.CodeGeneratorRequest) -> plugin_pb2.CodeGeneratorResponse:
    options = dict(item.split("=", 1) for item in request.parameter.split(",") if item)
    roots = [r for r in options.get("roots", "").split("+") if r]
    if not roots:
        raise SystemExit("fastwire: give the root messages: opt roots=<package>.<Message>+...")
    package, messages, enums = collect(request, roots)
    depth = package.count(".") + 1
    used_enums = sorted({f.type_name for m in messages for f in m.fields if f.kind == "enum"})
    w = Writer()
    w(f'"""Fast protobuf codecs for {", ".join(r.rsplit(".", 1)[1] for r in roots)} and what they hold.')
    w()
    w("Generated by proto/plugins/fastwire_plugin.py from proto/ (``make gen``): never edit. See the plugin's")
    w("docstring for what each function promises; tests/rpc/test_wire_property.py checks them against betterproto2.")
    w('"""')
    w()
    w("# ruff: noqa")
    w("from __future__ import annotations")
    w()
    w("import datetime as _dt")
    w("from collections.abc import Callable")
    w("from functools import partial")
    w("from typing import NamedTuple")
    w()
    w(f"from {RUNTIME} import (")
    for name, local in _RUNTIME_NAMES.items():
        w(f"    {name}," if name == local else f"    {name} as {local},")
    w(")")
    w()
    w(f"from {'.' * (depth + 1)}google import protobuf as _wkt")
    w(f"from .. import {package.rsplit('.', 1)[1]} as pb")
    w()
    w()
    for name in used_enums:
        constant = Message(name, ()).snake.upper()
        values = ", ".join(str(v) for v in enums[name])
        w(f"_{constant} = {{v: pb.{name}(v) for v in ({values},)}}")
        w(f"_{constant}_VALUES = frozenset(_{constant})")
    w()
    w()
    for m in messages:
        emit_view_class(w, m)
    for m in messages:
        emit_encoders(w, m)
        emit_readers(w, m, view=False)
        emit_readers(w, m, view=True)
        emit_public_readers(w, m)
        emit_check(w, m)
        emit_without(w, m)
    text = "\n".join(w.lines).rstrip("\n") + "\n"
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    response = plugin_pb2.CodeGeneratorResponse()
    response.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    out = response.file.add()
    out.name = f"{package.replace('.', '/')}/fastwire.py"
    out.content = text
    return response


def main() -> None:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    sys.stdout.buffer.write(generate(request).SerializeToString())


if __name__ == "__main__":
    main()
