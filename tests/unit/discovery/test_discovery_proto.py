"""The committed stubs equal a fresh generation, and the wire contract matches Akri's."""

from __future__ import annotations

from pathlib import Path

import pytest

from discovery.proto import discovery_pb2, generate


def test_committed_stubs_match_a_fresh_generation() -> None:
    assert generate.drift() == []


def test_drift_reports_an_edited_stub(tmp_path: Path) -> None:
    proto_dir = tmp_path / "proto"
    proto_dir.mkdir()
    (proto_dir / "discovery.proto").write_bytes(
        (generate.PROTO_DIR / "discovery.proto").read_bytes()
    )
    generate.generate_into(proto_dir, proto_dir, "pkg")
    assert generate.drift(proto_dir, "pkg") == []
    stub = proto_dir / "discovery_pb2.py"
    stub.write_text(stub.read_text() + "# hand edit\n")
    (proto_dir / "gone_pb2.py").write_text("")
    problems = generate.drift(proto_dir, "pkg")
    assert [p.split(":")[0] for p in problems] == ["discovery_pb2.py", "gone_pb2.py"]


def test_cross_file_imports_become_package_imports(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.proto").write_text(
        'syntax = "proto3";\npackage b;\nmessage M { string s = 1; }\n'
    )
    (tmp_path / "sub" / "api.proto").write_text(
        'syntax = "proto3";\npackage s;\nimport "base.proto";\n'
        'import "google/protobuf/empty.proto";\n'
        "message N { b.M m = 1; }\n"
        "service S { rpc Call(N) returns (google.protobuf.Empty) {} }\n"
    )
    (tmp_path / "user.proto").write_text(
        'syntax = "proto3";\npackage u;\nimport "sub/api.proto";\nmessage U { s.N n = 1; }\n'
    )
    out = tmp_path / "out"
    stubs = generate.generate_into(tmp_path, out, "pkg.proto")
    assert "sub/api_pb2.py" in {str(s) for s in stubs}
    api = (out / "sub" / "api_pb2.py").read_text()
    assert "from pkg.proto import base_pb2 as base__pb2" in api
    assert "from google.protobuf import empty_pb2" in api
    user = (out / "user_pb2.py").read_text()
    assert "from pkg.proto.sub import api_pb2 as sub_dot_api__pb2" in user
    grpc_stub = (out / "sub" / "api_pb2_grpc.py").read_text()
    assert "from pkg.proto.sub import api_pb2 as sub_dot_api__pb2" in grpc_stub
    assert (out / "sub" / "__init__.py").exists()


def test_protoc_errors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "bad.proto").write_text('syntax = "proto3";\nmessage {\n')
    with pytest.raises(generate.GenerationError):
        generate.generate_into(tmp_path, tmp_path / "out")


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (
            "RegisterDiscoveryHandlerRequest",
            {"name": 1, "endpoint": 2, "endpoint_type": 3, "shared": 4},
        ),
        ("ByteData", {"vec": 1}),
        ("DiscoverRequest", {"discovery_details": 1, "discovery_properties": 2}),
        ("DiscoverResponse", {"devices": 1}),
        ("Device", {"id": 1, "properties": 2, "mounts": 3, "device_specs": 4}),
        ("Mount", {"container_path": 1, "host_path": 2, "read_only": 3}),
        ("DeviceSpec", {"container_path": 1, "host_path": 2, "permissions": 3}),
        ("Empty", {}),
    ],
)
def test_wire_contract(message: str, fields: dict[str, int]) -> None:
    descriptor = discovery_pb2.DESCRIPTOR.message_types_by_name[message]
    assert {f.name: f.number for f in descriptor.fields} == fields
    assert descriptor.full_name == f"v0.{message}"


def test_services_and_presence() -> None:
    services = discovery_pb2.DESCRIPTOR.services_by_name
    assert [m.full_name for m in services["Registration"].methods] == [
        "v0.Registration.RegisterDiscoveryHandler"
    ]
    discover = services["DiscoveryHandler"].methods_by_name["Discover"]
    assert discover.server_streaming and not discover.client_streaming
    enum = discovery_pb2.RegisterDiscoveryHandlerRequest.EndpointType
    assert (enum.Value("UDS"), enum.Value("NETWORK")) == (0, 1)
    # `optional bytes vec`: an unset value is distinguishable from b"".
    assert not discovery_pb2.ByteData().HasField("vec")
    assert discovery_pb2.ByteData(vec=b"").HasField("vec")
