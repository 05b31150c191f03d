"""The simulated apiserver on the wire: auth, errors as Status, representations, watch streams,
restart, shared state, CSR signing, exec framing. Raw aiohttp against real loopback TLS."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import json
import pathlib
import ssl
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from yurthub.testing import ports, simapiserver

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
async def http(sim_apiserver: simapiserver.SimApiserver) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {sim_apiserver.admin_token}"}
    connector = aiohttp.TCPConnector(
        ssl=ssl.create_default_context(cadata=sim_apiserver.ca_pem.decode())
    )
    async with aiohttp.ClientSession(
        sim_apiserver.url, headers=headers, connector=connector
    ) as session:
        yield session


async def _status(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    body: dict[str, Any] = await resp.json(content_type=None)
    assert body["kind"] == "Status", body
    assert body["code"] == resp.status
    return body


async def test_authentication(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    ca = ssl.create_default_context(cadata=sim_apiserver.ca_pem.decode())
    async with aiohttp.ClientSession(
        sim_apiserver.url, connector=aiohttp.TCPConnector(ssl=ca)
    ) as anonymous:
        async with anonymous.get("/api/v1/pods") as resp:
            assert resp.status == 401 and (await _status(resp))["reason"] == "Unauthorized"
        async with anonymous.get("/healthz") as resp:
            assert resp.status == 200 and await resp.text() == "ok"
        async with anonymous.get("/api/v1/pods", headers={"Authorization": "Bearer nope"}) as resp:
            assert resp.status == 401
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    ctx = sim_apiserver.client_ssl_context("system:node:edge-node-1", ["system:nodes"])
    async with (
        aiohttp.ClientSession(sim_apiserver.url, connector=aiohttp.TCPConnector(ssl=ctx)) as node,
        node.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json=review) as resp,
    ):
        info = (await resp.json())["status"]["userInfo"]
    assert info["username"] == "system:node:edge-node-1"
    assert info["groups"] == ["system:nodes", "system:authenticated"]
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    }
    async with http.post(
        "/api/v1/namespaces/default/serviceaccounts/default/token", json=request
    ) as resp:
        assert resp.status == 201
        token = (await resp.json())["status"]["token"]
    async with http.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json=review,
        headers={"Authorization": f"Bearer {token}"},
    ) as resp:
        assert (await resp.json())["status"]["userInfo"][
            "username"
        ] == "system:serviceaccount:default:default"
    sim_apiserver.state.delete("serviceaccounts", "default", "default")
    async with http.get("/api/v1/pods", headers={"Authorization": f"Bearer {token}"}) as resp:
        assert resp.status == 401, "a token of a deleted ServiceAccount is no longer valid"
    static = sim_apiserver.issue_token("alice", ["devs"])
    async with http.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json=review,
        headers={"Authorization": f"Bearer {static}"},
    ) as resp:
        assert (await resp.json())["status"]["userInfo"]["groups"] == [
            "devs",
            "system:authenticated",
        ]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "code"),
    [
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {"data": b"{not json", "headers": {"Content-Type": "application/json"}},
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {"data": b"<x/>", "headers": {"Content-Type": "text/xml"}},
            415,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/web-config",
            {"data": b"{}", "headers": {"Content-Type": "application/json"}},
            415,
        ),
        (
            "GET",
            "/api/v1/pods",
            {"headers": {"Accept": "application/vnd.kubernetes.protobuf"}},
            406,
        ),
        ("GET", "/api/v1/nothings", {}, 404),
        ("GET", "/api/v1/pods?labelSelector=a%20in%20(b", {}, 400),
        ("GET", "/api/v1/configmaps?fieldSelector=spec.nodeName%3Dx", {}, 400),
        ("GET", "/api/v1/pods?limit=x", {}, 400),
        ("GET", "/api/v1/pods?watch=1&timeoutSeconds=" + "9" * 400, {}, 400),  # not an int64
        ("POST", "/api/v1/namespaces/nope/configmaps", {"json": {"metadata": {"name": "x"}}}, 404),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {"json": {"metadata": {"name": "web-config"}}},
            409,
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/configmaps/missing",
            {"json": {"metadata": {"name": "missing"}}},
            404,
        ),
        ("POST", "/api/v1/namespaces/default/pods/x", {"json": {}}, 405),
    ],
)
async def test_errors_are_status_objects(
    http: aiohttp.ClientSession, method: str, path: str, kwargs: dict[str, Any], code: int
) -> None:
    async with http.request(method, path, **kwargs) as resp:
        assert resp.status == code
        await _status(resp)


async def test_body_over_3mib_is_413(http: aiohttp.ClientSession) -> None:
    big = json.dumps({"metadata": {"name": "big"}, "data": {"blob": "x" * (3 * 1024 * 1024)}})
    headers = {"Content-Type": "application/json"}
    payload = io.BytesIO(big.encode())
    async with http.post(
        "/api/v1/namespaces/default/configmaps", data=payload, headers=headers
    ) as resp:
        assert resp.status == 413
        await _status(resp)


async def test_protobuf_with_json_fallback_gets_json(http: aiohttp.ClientSession) -> None:
    async with http.get(
        "/api/v1/nodes", headers={"Accept": "application/vnd.kubernetes.protobuf, */*"}
    ) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
        assert (await resp.json())["kind"] == "NodeList"


async def test_tables_and_partial_metadata(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1/nodes", headers={"Accept": TABLE}) as resp:
        table = await resp.json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:3] == ["Name", "Status", "Roles"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    async with http.get(
        "/api/v1/namespaces/default/services/kubernetes?includeObject=Object",
        headers={"Accept": TABLE},
    ) as resp:
        row = (await resp.json())["rows"][0]
    assert (
        row["cells"][:3] == ["kubernetes", "ClusterIP", "10.96.0.1"]
        and row["object"]["kind"] == "Service"
    )
    accept = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
    async with http.get("/api/v1/namespaces/kube-system/pods", headers={"Accept": accept}) as resp:
        partial = await resp.json()
    assert partial["kind"] == "PartialObjectMetadataList"
    assert all(set(i) == {"kind", "apiVersion", "metadata"} for i in partial["items"])


async def _events(
    resp: aiohttp.ClientResponse, count: int, timeout: float = 5
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while len(out) < count:
            line = await resp.content.readline()
            if not line:
                break
            out.append(json.loads(line))
    return out


async def test_watch_streams_events_as_they_happen(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    rv = sim_apiserver.state.resource_version
    url = f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&labelSelector=w%3D1"
    async with http.get(url) as resp:
        assert resp.status == 200
        for i in range(3):
            sim_apiserver.state.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"e{i}", "namespace": "default", "labels": {"w": "1"}},
                }
            )
            (event,) = await _events(resp, 1)
            assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", f"e{i}")
        sim_apiserver.state.delete("configmaps", "default", "e0")
        (event,) = await _events(resp, 1)
        assert event["type"] == "DELETED"


@pytest.mark.parametrize(
    ("value", "watch"), [("yes", True), ("", True), ("FALSE", False), ("0", False)]
)
async def test_watch_flag_converts_as_the_apiserver_does(
    http: aiohttp.ClientSession, value: str, watch: bool
) -> None:
    # Present and neither "0" nor "false" (any case) is true, an empty value included: the
    # apiserver's query conversion, which the hub's request classification follows too.
    url = f"/api/v1/namespaces/default/configmaps?timeoutSeconds=1&watch={value}"
    async with http.get(url) as resp:
        assert resp.status == 200
        body = await resp.read()
    if watch:
        assert all(json.loads(line)["type"] for line in body.splitlines())
    else:
        assert json.loads(body)["kind"] == "ConfigMapList"


async def test_watch_bookmarks_initial_events_and_timeout(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    sim_apiserver.bookmark_interval = 0.1
    url = (
        "/api/v1/namespaces/kube-system/pods?watch=true&allowWatchBookmarks=true&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
    )
    async with http.get(url) as resp:
        events = await _events(resp, 100)
    kinds = [e["type"] for e in events]
    added = kinds.index("BOOKMARK")
    assert set(kinds[:added]) == {"ADDED"} and added >= 5
    assert events[added]["object"]["metadata"]["annotations"] == {
        "k8s.io/initial-events-end": "true"
    }
    assert kinds[added + 1 :] and set(kinds[added + 1 :]) == {"BOOKMARK"}, (
        "periodic bookmarks, then the stream ends"
    )


async def test_watch_too_old_is_an_error_event(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    old = sim_apiserver.state.resource_version
    sim_apiserver.state.set_history_size(2)
    for i in range(4):
        sim_apiserver.state.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"o{i}", "namespace": "default"},
            }
        )
    async with http.get(f"/api/v1/configmaps?watch=1&resourceVersion={old}") as resp:
        assert resp.status == 200
        (event,) = await _events(resp, 2)
    assert (
        event["type"] == "ERROR"
        and event["object"]["code"] == 410
        and event["object"]["reason"] == "Expired"
    )


async def test_restart_keeps_port_and_state(tmp_path: pathlib.Path) -> None:
    # Ports from the ledger, not the ephemeral range: between the stop and the start any
    # outgoing connection on the machine could take a free ephemeral port.
    sim = simapiserver.SimApiserver(
        port=ports.free_port(),
        workdir=tmp_path / "sim",
        seed="none",
        insecure_port=ports.free_port(),
    )
    await sim.start()
    port, insecure = sim.port, sim.insecure_url
    assert insecure is not None
    sim.state.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kept"}})
    async with aiohttp.ClientSession() as session:
        watch = await session.get(
            f"{insecure}/api/v1/namespaces?watch=1&resourceVersion={sim.state.resource_version}"
        )
        await sim.stop()
        async with asyncio.timeout(5):
            assert await watch.content.read() == b"", "stop() ends open watches"
        watch.release()
        await sim.start()
        assert sim.port == port and sim.insecure_url == insecure
        async with session.get(f"{insecure}/api/v1/namespaces/kept") as resp:
            assert resp.status == 200, "no credentials needed on the insecure port"
    await sim.stop()


async def test_two_apiservers_share_one_state(tmp_path: pathlib.Path) -> None:
    a = simapiserver.SimApiserver(workdir=tmp_path / "a", seed="demo")
    async with a, simapiserver.SimApiserver(workdir=tmp_path / "b", state=a.state) as b:
        ctx = a.client_ssl_context()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            rv = a.state.resource_version
            watch = await session.get(
                f"{b.url}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
            )
            body = {"metadata": {"name": "via-a"}, "data": {"k": "v"}}
            async with session.post(
                f"{a.url}/api/v1/namespaces/default/configmaps", json=body
            ) as resp:
                assert resp.status == 201
            (event,) = await _events(watch, 1)
            assert event["object"]["metadata"]["name"] == "via-a"
            watch.release()
            async with session.get(f"{b.url}/api/v1/namespaces/default/configmaps/via-a") as resp:
                assert (await resp.json())["data"] == {"k": "v"}


async def test_csr_approval_is_signed_by_the_sim_ca(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, "system:node:edge-node-1"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "node-csr"},
        "spec": {
            "request": base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
        },
    }
    async with http.post(
        "/apis/certificates.k8s.io/v1/certificatesigningrequests", json=body
    ) as resp:
        created = await resp.json()
    created["status"] = {
        "conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]
    }
    async with http.put(
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/node-csr/approval", json=created
    ) as resp:
        assert resp.status == 200
    async with http.get("/apis/certificates.k8s.io/v1/certificatesigningrequests/node-csr") as resp:
        signed = await resp.json()
    cert = x509.load_pem_x509_certificate(base64.b64decode(signed["status"]["certificate"]))
    ca = x509.load_pem_x509_certificate(sim_apiserver.ca_pem)
    cert.verify_directly_issued_by(ca)
    assert cert.subject == subject
    assert signed["spec"]["username"] == "kubernetes-admin", "the requestor is recorded"


async def test_dry_run_apply_patch_scale_and_deletecollection(http: aiohttp.ClientSession) -> None:
    body = {"metadata": {"name": "dry"}, "data": {"a": "1"}}
    async with http.post("/api/v1/namespaces/default/configmaps?dryRun=All", json=body) as resp:
        assert resp.status == 201
    async with http.get("/api/v1/namespaces/default/configmaps/dry") as resp:
        assert resp.status == 404
    applied = (
        "apiVersion: v1\nkind: ConfigMap\n"
        "metadata:\n  name: applied\n  labels: {sweep: 'yes'}\ndata:\n  a: '1'\n"
    )
    headers = {"Content-Type": "application/apply-patch+yaml"}
    async with http.patch(
        "/api/v1/namespaces/default/configmaps/applied?fieldManager=t",
        data=applied,
        headers=headers,
    ) as resp:
        assert resp.status == 201
    async with http.patch(
        "/api/v1/namespaces/default/configmaps/applied", data=applied, headers=headers
    ) as resp:
        assert resp.status == 422, "apply needs a fieldManager"
    scale = {"spec": {"replicas": 5}}
    merge = {"Content-Type": "application/merge-patch+json"}
    async with http.patch(
        "/apis/apps/v1/namespaces/default/deployments/web/scale", json=scale, headers=merge
    ) as resp:
        assert (await resp.json())["spec"]["replicas"] == 5
    async with http.get("/apis/apps/v1/namespaces/default/deployments/web") as resp:
        assert (await resp.json())["spec"]["replicas"] == 5
    async with http.delete(
        "/api/v1/namespaces/default/configmaps?labelSelector=sweep%3Dyes"
    ) as resp:
        assert [i["metadata"]["name"] for i in (await resp.json())["items"]] == ["applied"]


async def test_logs_follow_ends_when_the_pod_goes(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    pod = sim_apiserver.state.list("pods", "default", label_selector="app=web")[0]["metadata"][
        "name"
    ]
    async with http.get(
        f"/api/v1/namespaces/default/pods/{pod}/log?follow=true&tailLines=0"
    ) as resp:
        sim_apiserver.append_log("default", pod, "web", "fresh")
        async with asyncio.timeout(5):
            assert await resp.content.readline() == b"fresh\n"
            sim_apiserver.state.delete("pods", "default", pod)
            assert await resp.content.read() == b""


async def test_exec_channel_protocol(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    pod = sim_apiserver.state.list("pods", "default", label_selector="app=web")[0]["metadata"][
        "name"
    ]
    url = (
        f"/api/v1/namespaces/default/pods/{pod}/exec?command=cat&stdin=true&stdout=true&stderr=true"
    )
    async with http.ws_connect(url, protocols=("v5.channel.k8s.io",)) as ws:
        assert ws.protocol == "v5.channel.k8s.io"
        await ws.send_bytes(b"\x00ping\n")
        await ws.send_bytes(b"\xff\x00")  # v5: close stdin
        frames = [msg.data async for msg in ws if msg.type is aiohttp.WSMsgType.BINARY]
    stdout = b"".join(f[1:] for f in frames if f[0] == 1)
    status = json.loads(next(f[1:] for f in frames if f[0] == 3))
    assert stdout == b"ping\n" and status["status"] == "Success"
    exit5 = "command=sh&command=-c&command=exit%205&stdout=true"
    url = f"/api/v1/namespaces/default/pods/{pod}/exec?{exit5}"
    async with http.ws_connect(url, protocols=("v4.channel.k8s.io",)) as ws:
        frames = [msg.data async for msg in ws if msg.type is aiohttp.WSMsgType.BINARY]
    status = json.loads(next(f[1:] for f in frames if f[0] == 3))
    assert (
        status["reason"] == "NonZeroExitCode" and status["details"]["causes"][0]["message"] == "5"
    )


async def test_audit_log_records_who_asked_for_what(
    sim_apiserver: simapiserver.SimApiserver, http: aiohttp.ClientSession
) -> None:
    sim_apiserver.clear_audit_log()
    async with http.get(
        "/api/v1/namespaces/default/pods?limit=1", headers={"User-Agent": "probe/1.0"}
    ):
        pass
    async with http.get(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-node-1"
    ):
        pass
    async with http.get("/api/v1/namespaces/default/configmaps/missing"):
        pass
    first, second, third = sim_apiserver.audit_log()
    assert (first.user, first.verb, first.resource, first.code) == (
        "kubernetes-admin",
        "list",
        "pods",
        200,
    )
    assert first.user_agent == "probe/1.0" and first.namespace == "default"
    assert second.rbac == ("get", "coordination.k8s.io", "leases") and second.name == "edge-node-1"
    assert (third.verb, third.code) == ("get", 404)


async def test_create_ignores_status_where_a_subresource_owns_it(
    http: aiohttp.ClientSession,
) -> None:
    status = {"replicas": 9, "readyReplicas": 9}
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "with-status"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}},
        },
        "status": status,
    }
    async with http.post("/apis/apps/v1/namespaces/default/deployments", json=deploy) as resp:
        assert "status" not in await resp.json()
    node = {
        "metadata": {"name": "n9"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    async with http.post("/api/v1/nodes", json=node) as resp:
        assert (await resp.json())["status"] == node["status"], (
            "kubelets post node status with the node"
        )


async def test_compression_follows_the_real_apiserver(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    """Measured on kube-apiserver 1.37: a streaming list is gzipped, each flush a gzip member
    of its own; a plain watch is not; a list only over 128 KiB."""
    gz = {"Accept-Encoding": "gzip"}
    connector = aiohttp.TCPConnector(
        ssl=ssl.create_default_context(cadata=sim_apiserver.ca_pem.decode())
    )
    http = aiohttp.ClientSession(
        sim_apiserver.url,
        headers={"Authorization": f"Bearer {sim_apiserver.admin_token}"},
        connector=connector,
        auto_decompress=False,
    )
    async with http:
        await _check_compression(http, gz)


async def _check_compression(http: aiohttp.ClientSession, gz: dict[str, str]) -> None:
    query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    query += "&allowWatchBookmarks=true&timeoutSeconds=1"
    async with http.get(f"/api/v1/namespaces/kube-system/pods?{query}", headers=gz) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        raw = await resp.content.read()
    members, rest = 0, raw
    while rest:
        z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        data = z.decompress(rest)
        assert z.eof
        member = rest[: len(rest) - len(z.unused_data)]
        # As from Go's gzip writer: the data is flushed before an empty final block (2 bytes,
        # then the 8-byte trailer), so a reader has it all before the member ends; Go's
        # reader holds back a final block's data until the next member begins.
        early = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(member[:-10])
        assert early == data
        members, rest = members + 1, z.unused_data
    assert members >= 2  # the initial events, then the end bookmark
    assert b"k8s.io/initial-events-end" in gzip.decompress(raw)
    async with http.get("/api/v1/pods?watch=1&timeoutSeconds=1", headers=gz) as resp:
        assert "Content-Encoding" not in resp.headers
        await resp.read()
    async with http.get("/api/v1/namespaces", headers=gz) as resp:
        assert "Content-Encoding" not in resp.headers  # small


async def test_deeply_nested_bodies_are_refused_with_a_status(
    http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 item 6: a body or patch nested deeper than the simulator can store (orjson
    encodes 254 levels) was a 500 with a traceback; now a 400/422 Status."""
    cms = "/api/v1/namespaces/default/configmaps"

    def nested(levels: int) -> str:
        return '{"a":' * levels + '"x"' + "}" * levels

    async with http.post(cms, json={"metadata": {"name": "deep"}, "data": {"k": "v"}}) as resp:
        assert resp.status == 201
    requests = [
        ("POST", cms, "application/json", '{"metadata":{"name":"d2"},"x":' + nested(300) + "}"),
        ("PATCH", f"{cms}/deep", "application/merge-patch+json", '{"x":' + nested(500) + "}"),
        ("PATCH", f"{cms}/deep", "application/strategic-merge-patch+json", nested(500)),
        ("PATCH", f"{cms}/deep", "application/apply-patch+yaml", "[" * 300 + "]" * 300),
    ]
    for method, path, content_type, body in requests:
        query = "?fieldManager=t" if "apply" in content_type else ""
        headers = {"Content-Type": content_type}
        async with http.request(method, path + query, data=body, headers=headers) as resp:
            assert resp.status == 400, (content_type, await resp.text())
            assert "nested deeper than 200 levels" in (await _status(resp))["message"]
    # Deeper than libyaml composes (1,000): its own bound, a 400 too.
    headers = {"Content-Type": "application/apply-patch+yaml"}
    brackets = "[" * 5_000 + "]" * 5_000
    async with http.patch(f"{cms}/deep?fieldManager=t", data=brackets, headers=headers) as resp:
        assert resp.status == 400
        assert "maximum nesting depth" in (await _status(resp))["message"]
    # Each part within the bound, the result beyond it: a patch that cannot apply.
    ops = [
        {"op": "add", "path": "/x", "value": json.loads(nested(150))},
        {"op": "add", "path": "/x" + "/a" * 149, "value": json.loads(nested(150))},
    ]
    headers = {"Content-Type": "application/json-patch+json"}
    async with http.patch(f"{cms}/deep", data=json.dumps(ops), headers=headers) as resp:
        assert resp.status == 422
        assert "nested deeper than 200 levels" in (await _status(resp))["message"]
    async with http.get(f"{cms}/deep") as resp:
        assert (await resp.json())["data"] == {"k": "v"}
    assert not [r for r in caplog.records if r.exc_info]


SYNC_POINT = b"\x00\x00\xff\xff"
"""How a Z_SYNC_FLUSH (Go's ``gzip.Writer.Flush``) ends: an empty stored block, byte-aligned."""


class _StreamingGunzip:
    """What a streaming gzip reader can hand over from a body received so far without reading
    on: per member, what inflates from its bytes up to its last sync point. Go's gzip reader
    returns the data of a member's final deflate block only with that block's end, after it has
    read the trailer and the next member's header, so whatever a writer left in the final block
    waits in client-go for the next write."""

    def __init__(self) -> None:
        self._done: list[bytes] = []  # the deliverable text of each complete member
        self._member = b""

    def feed(self, data: bytes) -> None:
        self._member += data
        while self._member:
            z = zlib.decompressobj(16 + zlib.MAX_WBITS)
            z.decompress(self._member)
            if not z.eof:
                return
            member = self._member[: len(self._member) - len(z.unused_data)]
            self._done.append(self._deliverable(member))
            self._member = z.unused_data

    @staticmethod
    def _deliverable(member: bytes) -> bytes:
        end = member.rfind(SYNC_POINT)
        if end < 0:
            return b""
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(member[: end + len(SYNC_POINT)])

    def text(self) -> bytes:
        return b"".join(self._done) + self._deliverable(self._member)


async def test_streaming_list_gzip_hands_over_each_write_as_it_is_sent(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    """kube-apiserver ends each flush of a gzipped streaming list with a sync flush before
    closing the member, so the initial-events-end bookmark, and a live event followed by
    silence, are readable as they arrive: client-go's informer waits for that bookmark."""
    connector = aiohttp.TCPConnector(
        ssl=ssl.create_default_context(cadata=sim_apiserver.ca_pem.decode())
    )
    headers = {"Authorization": f"Bearer {sim_apiserver.admin_token}", "Accept-Encoding": "gzip"}
    query = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    query += "&allowWatchBookmarks=true"
    reader = _StreamingGunzip()
    async with (
        aiohttp.ClientSession(
            sim_apiserver.url, headers=headers, connector=connector, auto_decompress=False
        ) as http,
        http.get(f"/api/v1/namespaces?{query}") as resp,
    ):
        assert resp.headers["Content-Encoding"] == "gzip"

        async def until(needle: bytes) -> None:
            try:
                async with asyncio.timeout(10):
                    while needle not in reader.text():
                        chunk = await resp.content.readany()
                        assert chunk, f"the stream ended before {needle!r}"
                        reader.feed(chunk)
            except TimeoutError:
                pytest.fail(f"{needle!r} not readable in 10 s; readable: {reader.text()[-300:]!r}")

        await until(b"k8s.io/initial-events-end")
        assert b'"name":"kube-system"' in reader.text()  # the initial events came first
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "after-sync"}}
        async with http.post("/api/v1/namespaces", json=body) as created:
            assert created.status == 201, await created.text()
        await until(b'"name":"after-sync"')
