"""Who may read what offline: an answer fetched with a client's own Bearer token is cached in
that token's ServiceAccount partition, and offline only a request proving the same identity
reads it (issue 10 deliverable 5; THREAT_MODEL.md)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import pathlib
import time
from typing import Any

import orjson
import pytest
from cache_edge import KUBELET_UA, NODE, Edge, edge_node

from yurthub import settings
from yurthub.testing.sim import auth

SECRETS = "/api/v1/namespaces/default/secrets"
AGENT = "discovery-agent/0.1.0"
PARTITION = "discovery-agent@system:serviceaccount:kube-system:default"


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path, agents=("kubectl", "discovery-agent")) as node:
        # Keep the issuer's keys on disk, as --root-dir does: a restart offline still verifies.
        node.hub_settings = dataclasses.replace(
            node.hub_settings,
            authn=settings.AuthnSettings(issuer_keys_file=tmp_path / "issuer.json"),
        )
        await node.restart_hub()
        await node.wait_health(True)
        yield node


def names(body: dict[str, Any]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in body["items"])


async def keys_known(edge: Edge) -> None:
    async with asyncio.timeout(10):
        while edge.hub.issuer_keys.current is None:
            await asyncio.sleep(0.05)


def pod_manifest(
    namespace: str, name: str, *, account: str, node: str = NODE, audiences: tuple[str, ...] = ("",)
) -> dict[str, Any]:
    """A pod with the projected token volume the ServiceAccount admission adds (audience ""),
    plus one per other audience."""
    sources = [
        {
            "serviceAccountToken": {"path": f"token-{i}", "expirationSeconds": 3607}
            | ({"audience": audience} if audience else {})
        }
        for i, audience in enumerate(audiences)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": sources}}],
        },
    }


async def create(edge: Edge, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, created, _ = await edge.request("POST", path, ua="kubectl/v1.32", body=body)
    assert status == 201, created
    return dict(created)


async def kubelet_runs(
    edge: Edge, namespace: str, name: str, *, account: str, audiences: tuple[str, ...] = ("",)
) -> dict[str, Any]:
    """A pod on this node, created online and seen by kubelet (its pod list is cached)."""
    manifest = pod_manifest(namespace, name, account=account, audiences=audiences)
    pod = await create(edge, f"/api/v1/namespaces/{namespace}/pods", manifest)
    status, listed = await edge.get(
        "/api/v1/pods", ua=KUBELET_UA, params={"fieldSelector": f"spec.nodeName={NODE}"}
    )
    assert status == 200 and name in names(listed)
    await edge.flush()
    return pod


def token_request(
    pod: dict[str, Any] | None, *, audiences: list[str] | None = None, **ref: str
) -> dict[str, Any]:
    """kubelet's TokenRequest for ``pod``'s projected token (``ref`` overrides the binding)."""
    spec: dict[str, Any] = {"expirationSeconds": 3607}
    if audiences is not None:
        spec["audiences"] = audiences
    if pod is not None:
        meta = pod["metadata"]
        bound = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
        spec["boundObjectRef"] = bound | ref
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "spec": spec}


def token_path(namespace: str, account: str) -> str:
    return f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"


async def test_bearer_answers_are_read_back_only_by_the_same_identity(edge: Edge) -> None:
    sim = edge.sim
    mine = sim.service_account_token("kube-system", "default")
    other = sim.service_account_token("default", "default")
    await keys_known(edge)

    pod = await kubelet_runs(edge, "kube-system", "agent", account="default")
    status, online = await edge.get(SECRETS, ua=AGENT, token=mine)
    assert status == 200 and online["items"]
    await edge.flush()
    owners = {key.scope.component for key, _ in edge.rt.store.list_records()}
    assert PARTITION in owners and "discovery-agent" not in owners  # never the bare component

    await edge.cut()
    status, offline = await edge.get(SECRETS, ua=AGENT, token=mine)
    assert status == 200 and names(offline) == names(online)

    # The same User-Agent without the token, or with another ServiceAccount's: not this list.
    status, body = await edge.get(SECRETS, ua=AGENT)
    assert status == 404, body
    status, body = await edge.get(SECRETS, ua=AGENT, token=other)
    assert status == 404, body
    # A User-Agent that spells the partition's name proves nothing.
    status, body = await edge.get(SECRETS, ua=f"{PARTITION}/1.0")
    assert status in (404, 503), body

    # Tokens the hub cannot verify prove nothing either: 401 as a Status.
    forged, _ = auth.TokenIssuer().issue(auth.ServiceAccountRef("kube-system", "default", ""))
    status, body = await edge.get(SECRETS, ua=AGENT, token=forged)
    assert status == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized"
    uid = sim.state.get("serviceaccounts", "kube-system", "default")["metadata"]["uid"]
    elsewhere, _ = sim.state.tokens.issue(
        auth.ServiceAccountRef("kube-system", "default", uid), audiences=["vault"]
    )
    assert (await edge.get(SECRETS, ua=AGENT, token=elsewhere))[0] == 401
    # issue() truncates its clock to whole seconds, so this token lives 2 to 3 s: the first
    # request always has 2 s to be served (the hub remembers a refusal, a retry would not help).
    short, expiry = sim.state.tokens.issue(
        auth.ServiceAccountRef("kube-system", "default", uid), expiration_seconds=3
    )
    assert (await edge.get(SECRETS, ua=AGENT, token=short))[0] == 200
    # The event waited for is the token's expiry on the clock the hub checks it against.
    await asyncio.sleep(max(0.0, expiry - time.time()) + 0.1)
    assert (await edge.get(SECRETS, ua=AGENT, token=short))[0] == 401

    # kubelet (the node) asks for the token of a pod it runs; the pod reads its partition with it.
    status, answer, _ = await edge.request(
        "POST",
        "/api/v1/namespaces/kube-system/serviceaccounts/default/token",
        ua=KUBELET_UA,
        body=token_request(pod),
    )
    assert status == 201, answer
    minted = answer["status"]["token"]
    status, body = await edge.get(SECRETS, ua=AGENT, token=minted)
    assert status == 200 and names(body) == names(online)

    # Restarted offline: the saved issuer keys still verify the real token; the old offline
    # token was signed by the previous process's key and is refused (kubelet asks again).
    await edge.restart_hub()
    status, body = await edge.get(SECRETS, ua=AGENT, token=mine)
    assert status == 200 and names(body) == names(online)
    assert (await edge.get(SECRETS, ua=AGENT, token=minted))[0] == 401


async def test_an_unverifiable_token_is_forwarded_but_not_cached(edge: Edge) -> None:
    static = edge.sim.issue_token("someone", ["system:authenticated"])
    await keys_known(edge)
    status, _ = await edge.get(SECRETS, ua=AGENT, token=static)
    assert status == 200  # online it goes upstream as it came
    await edge.flush()
    owners = {key.scope.component for key, _ in edge.rt.store.list_records()}
    assert not [o for o in owners if o.startswith("discovery-agent")]
    await edge.cut()
    assert (await edge.get(SECRETS, ua=AGENT, token=static))[0] == 401


async def test_the_node_partition_behaves_as_before(edge: Edge) -> None:
    status, online = await edge.get(SECRETS, ua="kubectl/v1.32")
    assert status == 200
    await edge.flush()
    await edge.cut()
    status, offline = await edge.get(SECRETS, ua="kubectl/v1.32")
    assert status == 200 and names(offline) == names(online)


async def test_offline_tokens_are_issued_only_as_the_node_authorizer_would(edge: Edge) -> None:
    # A privileged ServiceAccount's Secrets are in its partition; a low-privilege pod runs on
    # this node. Offline, neither that pod's token nor a local process without credentials
    # may mint a token for the privileged account (the escalation of issue 27).
    await create(edge, "/api/v1/namespaces/kube-system/serviceaccounts", sa("privileged"))
    await create(edge, "/api/v1/namespaces/default/serviceaccounts", sa("reader"))
    await keys_known(edge)
    privileged = edge.sim.service_account_token("kube-system", "privileged")
    reader = edge.sim.service_account_token("default", "reader")
    app = await kubelet_runs(edge, "default", "app", account="reader", audiences=("", "vault"))
    elsewhere = await create(
        edge,
        "/api/v1/namespaces/kube-system/pods",
        pod_manifest("kube-system", "admin", account="privileged", node="other-node"),
    )
    assert (await edge.get(SECRETS, ua=AGENT, token=privileged))[0] == 200
    await edge.flush()
    await edge.cut()
    assert (await edge.get(SECRETS, ua=AGENT, token=privileged))[0] == 200  # cached for it

    async def refused(body: dict[str, Any], why: str, *, token: str = "", path: str = "") -> None:
        status, answer, _ = await edge.request(
            "POST", path or token_path("kube-system", "privileged"), body=body, token=token
        )
        assert status == 403, answer
        assert answer["kind"] == "Status" and answer["reason"] == "Forbidden"
        assert why in answer["message"], answer["message"]

    # A pod's own token is not the node: refused whatever it asks for.
    await refused(token_request(None), "only to the node", token=reader)
    await refused(token_request(app), "only to the node", token=reader)
    await refused(
        token_request(app), "only to the node", token=reader, path=token_path("default", "reader")
    )
    # Without credentials (the node's port): only bound to a pod of this node using that account.
    await refused(token_request(None), "not bound to a pod")
    await refused(token_request(elsewhere), "not in the hub's cache of this node's pods")
    await refused(token_request(app), "kube-system/app is not in the hub's cache")  # its namespace
    reader_path = token_path("default", "reader")
    await refused(
        token_request(app),
        "runs as ServiceAccount 'reader', not 'default'",
        path=token_path("default", "default"),
    )
    await refused(token_request(app, uid="stale"), "does not match", path=reader_path)
    await refused(token_request(app, uid=""), "without a uid", path=reader_path)
    await refused(token_request(app, kind="Secret"), "not bound to a pod", path=reader_path)
    await refused(token_request(app, audiences=["other"]), "audience 'other'", path=reader_path)
    await refused(token_request(app, audiences=["", "vault"]), "0 or 1", path=reader_path)
    status, answer, _ = await edge.request(
        "POST", token_path("default", "reader"), body=token_request(app)
    )
    assert status == 201, answer
    assert answer["spec"]["boundObjectRef"]["uid"] == app["metadata"]["uid"]
    minted = answer["status"]["token"]
    claims = orjson.loads(base64.urlsafe_b64decode(minted.split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:default:reader"
    assert claims["kubernetes.io"]["pod"] == {"name": "app", "uid": app["metadata"]["uid"]}
    assert claims["exp"] - claims["iat"] == answer["spec"]["expirationSeconds"] <= 3607
    # It reads the reader's partition, never the privileged one's.
    assert (await edge.get(SECRETS, ua=AGENT, token=minted))[0] == 404
    status, answer, _ = await edge.request(
        "POST", reader_path, body=token_request(app, audiences=["vault"])
    )
    assert status == 201 and answer["spec"]["audiences"] == ["vault"], answer.get("message")


def sa(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
