"""Who may read what offline: an answer fetched with a client's own Bearer token is cached in
that token's ServiceAccount partition, and offline only a request proving the same identity
reads it (issue 10 deliverable 5; THREAT_MODEL.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import time
from typing import Any

import pytest
from cache_edge import KUBELET_UA, Edge, edge_node

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


async def test_bearer_answers_are_read_back_only_by_the_same_identity(edge: Edge) -> None:
    sim = edge.sim
    mine = sim.service_account_token("kube-system", "default")
    other = sim.service_account_token("default", "default")
    await keys_known(edge)

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
    short, expiry = sim.state.tokens.issue(
        auth.ServiceAccountRef("kube-system", "default", uid),
        expiration_seconds=2,
        now=time.time() - 1,
    )
    assert (await edge.get(SECRETS, ua=AGENT, token=short))[0] == 200
    await asyncio.sleep(max(0.0, expiry - time.time()) + 0.1)
    assert (await edge.get(SECRETS, ua=AGENT, token=short))[0] == 401

    # kubelet (the node) asks for the pod's token offline; the pod reads its partition with it.
    status, answer, _ = await edge.request(
        "POST",
        "/api/v1/namespaces/kube-system/serviceaccounts/default/token",
        ua=KUBELET_UA,
        body={"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "spec": {}},
    )
    assert status == 201
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
