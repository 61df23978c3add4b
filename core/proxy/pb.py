"""The ``apache.rocketmq.v2`` message classes, from our ``.proto``, in a private pool.

Attributes mirror a protoc ``_pb2`` module: message classes by name
(``pb.SendMessageRequest``), enum wrappers (``pb.Code.Name(n)``) and every
enum value at top level (``pb.OK``, ``pb.CRC32``).

Why not protoc's ``_pb2.py``: generated Python registers its types in
protobuf's process-wide default pool, and the 5.x Python client registers
the same ``apache.rocketmq.v2`` names there from its own files; the two in
one process make protobuf refuse the second import ("duplicate symbol").
An embedded server must not break an application that also uses the
client, so our types live in a pool of their own, built from a descriptor
set. Message bytes are the same either way.

The descriptor set ``rocketmq_v2.binpb`` is generated from
``rocketmq_v2.proto`` and checked in (a fresh clone needs no protoc and no
build step); generator: grpcio-tools 1.85.1 (libprotoc 35.1). Regenerate
after editing the ``.proto``::

    cd core/proxy && python -m grpc_tools.protoc -I. --include_imports \\
        --descriptor_set_out=rocketmq_v2.binpb rocketmq_v2.proto

``tests/core/proxy/test_wire.py`` fails when the two disagree.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

PACKAGE = "apache.rocketmq.v2"
DESCRIPTOR_SET = Path(__file__).with_name("rocketmq_v2.binpb")

_files = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET.read_bytes()).file
POOL = descriptor_pool.DescriptorPool()
_classes = message_factory.GetMessages(list(_files), pool=POOL)
_ours = POOL.FindFileByName("rocketmq_v2.proto")

for _name, _desc in _ours.message_types_by_name.items():
    globals()[_name] = _classes[_desc.full_name]
for _name, _desc in _ours.enum_types_by_name.items():
    globals()[_name] = EnumTypeWrapper(_desc)
    for _value in _desc.values:
        globals()[_value.name] = _value.number
SERVICE = _ours.services_by_name["MessagingService"]

del _name, _desc, _value
