"""The model the fastwire plugin generates from: the messages a root reaches, their fields, and how each field
is typed in Python (betterproto2's classes, and the generated views). Split from ``fastwire_plugin.py``, which
emits the code."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]
from google.protobuf.compiler import plugin_pb2  # type: ignore[import-untyped]

FieldType = descriptor_pb2.FieldDescriptorProto
VARINT_KINDS = {
    FieldType.TYPE_BOOL: "bool",
    FieldType.TYPE_ENUM: "enum",
    FieldType.TYPE_INT32: "int32",
    FieldType.TYPE_INT64: "int64",
    FieldType.TYPE_UINT32: "uint32",
    FieldType.TYPE_UINT64: "uint64",
}
WELL_KNOWN = {".google.protobuf.Timestamp": "timestamp", ".google.protobuf.Duration": "duration"}
PY_TYPES = {
    "string": "str",
    "bytes": "bytes",
    "bool": "bool",
    "enum": "int",
    "int32": "int",
    "int64": "int",
    "uint32": "int",
    "uint64": "int",
    "timestamp": "_dt.datetime",
    "duration": "_dt.timedelta",
}
VIEW_EXTRA = "encoded"


@dataclass(frozen=True)
class Field:
    name: str
    number: int
    kind: str
    """string, bytes, bool, enum, int32, int64, uint32, uint64, message, timestamp or duration."""
    repeated: bool
    optional: bool
    type_name: str
    """A message's or enum's Python class name; empty for the others."""

    @property
    def key(self) -> int:
        wire = 0 if self.kind in VARINT_KINDS.values() else 2
        return self.number << 3 | wire

    @property
    def key_bytes(self) -> bytes:
        out, key = bytearray(), self.key
        while key > 0x7F:
            out.append(0x80 | (key & 0x7F))
            key >>= 7
        out.append(key)
        return bytes(out)


@dataclass(frozen=True)
class Message:
    name: str
    fields: tuple[Field, ...]

    @property
    def snake(self) -> str:
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.name).lower()


def _pascal(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _field(package: str, proto: descriptor_pb2.FieldDescriptorProto, owner: str) -> Field:
    where = f"{owner}.{proto.name}"
    if keyword.iskeyword(proto.name) or proto.name == VIEW_EXTRA:
        raise SystemExit(f"fastwire: {where}: a field name the generated code cannot use")
    repeated = proto.label == FieldType.LABEL_REPEATED
    optional = proto.proto3_optional
    if proto.HasField("oneof_index") and not optional:
        raise SystemExit(f"fastwire: {where}: oneof fields are not supported")
    type_name = ""
    if proto.type == FieldType.TYPE_STRING:
        kind = "string"
    elif proto.type == FieldType.TYPE_BYTES:
        kind = "bytes"
    elif proto.type in VARINT_KINDS:
        kind = VARINT_KINDS[proto.type]
        if proto.type == FieldType.TYPE_ENUM:
            type_name = _pascal(proto.type_name)
    elif proto.type == FieldType.TYPE_MESSAGE and proto.type_name in WELL_KNOWN:
        kind = WELL_KNOWN[proto.type_name]
    elif proto.type == FieldType.TYPE_MESSAGE and proto.type_name.startswith(f".{package}."):
        kind, type_name = "message", proto.type_name.removeprefix(f".{package}.")
        if "." in type_name:
            raise SystemExit(f"fastwire: {where}: nested messages are not supported")
    else:
        raise SystemExit(f"fastwire: {where}: type {proto.type} {proto.type_name} is not supported")
    if repeated and kind not in ("string", "bytes", "message"):
        raise SystemExit(f"fastwire: {where}: repeated {kind} (packed) is not supported")
    return Field(proto.name, proto.number, kind, repeated, optional, type_name)


Collected = tuple[str, list["Message"], dict[str, list[int]]]


def collect(request: plugin_pb2.CodeGeneratorRequest, roots: list[str]) -> Collected:
    """The roots' package, every message they reach (dependencies first) and the enums' values."""
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    enums: dict[str, list[int]] = {}
    packages = {root.rsplit(".", 1)[0] for root in roots}
    if len(packages) != 1:
        raise SystemExit("fastwire: the roots must share one package")
    package = packages.pop()
    for file in request.proto_file:
        if file.package != package:
            continue
        for message in file.message_type:
            messages[message.name] = message
        for enum in file.enum_type:
            enums[enum.name] = [value.number for value in enum.value]
    order: list[Message] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        done.add(name)
        if name not in messages:
            raise SystemExit(f"fastwire: no message {package}.{name}")
        fields = tuple(_field(package, f, name) for f in messages[name].field)
        for f in fields:
            if f.kind == "message":
                visit(f.type_name)
        order.append(Message(name, fields))

    for root in roots:
        visit(root.rsplit(".", 1)[1])
    return package, order, enums


class Writer:
    """Lines of Python with indentation."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def indent(self) -> Writer:
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1


def py_type(f: Field) -> str:
    if f.kind == "message":
        return f"pb.{f.type_name}"
    if f.kind == "enum":
        return f"pb.{f.type_name}"
    return PY_TYPES[f.kind]


def has_presence(f: Field) -> bool:
    """Whether betterproto2 holds the field as ``X | None`` (``optional``, messages, well-known types)."""
    return f.optional or f.kind in ("message", "timestamp", "duration")


def annotation(f: Field, base: str) -> str:
    if f.repeated:
        return f"list[{base}]"
    return f"{base} | None" if has_presence(f) else base


def view_type(f: Field) -> str:
    return annotation(f, f"{f.type_name}View" if f.kind == "message" else PY_TYPES[f.kind])


def default(f: Field, view: bool) -> str:
    if f.kind == "enum" and not f.repeated and not f.optional and not view:
        return f"_{Message(f.type_name, ()).snake.upper()}[0]"
    if f.repeated:
        return "[]"
    if has_presence(f):
        return "None"
    return {"string": '""', "bytes": 'b""', "bool": "False"}.get(f.kind, "0")


def decode_type(f: Field) -> str:
    return annotation(f, py_type(f))
