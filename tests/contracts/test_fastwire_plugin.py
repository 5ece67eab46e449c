"""The fastwire protoc plugin (proto/plugins/) refuses what its codecs cannot do, rather than generating wrong code.

The codecs it does generate are checked against betterproto2 in ``tests/rpc/test_wire_property.py``; here, the
shapes it must not take: a map, a oneof, a packed repeated number, a type of another package, a missing root.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2

# The plugin is a script buf runs, not a package module: loaded from its folder, as buf's python does.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proto" / "plugins"))
fastwire_plugin = importlib.import_module("fastwire_plugin")

FieldType = descriptor_pb2.FieldDescriptorProto


def request(*fields: FieldType, roots: str = "demo.v1.Thing") -> plugin_pb2.CodeGeneratorRequest:
    file = descriptor_pb2.FileDescriptorProto(name="demo/v1/thing.proto", package="demo.v1", syntax="proto3")
    file.message_type.add(name="Thing", field=list(fields))
    file.message_type.add(name="Other")
    return plugin_pb2.CodeGeneratorRequest(parameter=f"roots={roots}", proto_file=[file])


def field(name: str, kind: int, label: int = FieldType.LABEL_OPTIONAL, **extra: object) -> FieldType:
    return FieldType(name=name, number=1, type=kind, label=label, **extra)


def test_a_plain_message_generates_a_module_named_after_its_package() -> None:
    response = fastwire_plugin.generate(request(field("name", FieldType.TYPE_STRING)))
    (out,) = response.file
    assert out.name == "demo/v1/fastwire.py"
    assert "def encode_thing(msg: pb.Thing) -> bytes:" in out.content
    assert "def decode_thing(data: bytes) -> pb.Thing:" in out.content
    compile(out.content, out.name, "exec")


@pytest.mark.parametrize(
    ("fields", "roots", "message"),
    [
        ([field("n", FieldType.TYPE_INT64, FieldType.LABEL_REPEATED)], "demo.v1.Thing", "packed"),
        ([field("x", FieldType.TYPE_DOUBLE)], "demo.v1.Thing", "not supported"),
        ([field("o", FieldType.TYPE_STRING, oneof_index=0)], "demo.v1.Thing", "oneof"),
        ([field("t", FieldType.TYPE_MESSAGE, type_name=".other.v1.T")], "demo.v1.Thing", "not supported"),
        ([field("encoded", FieldType.TYPE_STRING)], "demo.v1.Thing", "cannot use"),
        ([], "demo.v1.Missing", "no message"),
        ([], "", "roots"),
    ],
)
def test_what_the_codecs_cannot_do_stops_the_generation(fields: list[FieldType], roots: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        fastwire_plugin.generate(request(*fields, roots=roots))
