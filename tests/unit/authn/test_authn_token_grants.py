"""Which TokenRequests the hub grants offline (``authn.tokengranting``): as the Node authorizer
and NodeRestriction grant them to the node online, from the cached pod alone."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub.authn import callers, offlinetokens, tokengranting

NODE = "edge-1"
UID = "6f1c2d3e-0000-4000-8000-000000000001"


def pod(
    *,
    node: str = NODE,
    account: str = "reader",
    uid: str = UID,
    audiences: tuple[str | None, ...] = (None,),
) -> dict[str, Any]:
    """A cached pod of namespace ``apps``; a projected token source per audience (None: the
    ServiceAccount admission's own, without one)."""
    sources: list[dict[str, Any]] = [
        {"serviceAccountToken": {"path": "token"} | ({} if a is None else {"audience": a})}
        for a in audiences
    ]
    return {
        "metadata": {"name": "app", "namespace": "apps", "uid": uid},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "volumes": [
                {"name": "config", "configMap": {"name": "c"}},
                {"name": "kube-api-access", "projected": {"sources": sources}},
            ],
        },
    }


def spec(**changes: Any) -> dict[str, Any]:
    """kubelet's TokenRequest spec for ``pod()``'s projected token; a change of None drops
    the field; ``ref_*`` changes the binding."""
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "app", "uid": UID}
    for key in [k for k in changes if k.startswith("ref_")]:
        value = changes.pop(key)
        if value is None:
            ref.pop(key[4:])
        else:
            ref[key[4:]] = value
    out: dict[str, Any] = {"expirationSeconds": 3607, "boundObjectRef": ref}
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


NODE_CALLER = callers.Kind.NODE
LIFETIME = offlinetokens.LIFETIME
GRANTED = tokengranting.Grant((), LIFETIME, "app", UID)

CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None, tokengranting.Grant | str]] = [
    # (case, decide() arguments, cached pod, Grant or (code, message part) of the Refusal)
    ("kubelet, its pod's projected token", {}, pod(), GRANTED),
    (
        "no expirationSeconds: the apiserver's 3600, still capped",
        {"spec": spec(expirationSeconds=None)},
        pod(),
        GRANTED,
    ),
    (
        "a lifetime no longer than the hub's nor the one asked",
        {"lifetime": 10_000},
        pod(),
        tokengranting.Grant((), 3607, "app", UID),
    ),
    (
        "the audience of another projected source",
        {"spec": spec(audiences=["vault"])},
        pod(audiences=(None, "vault")),
        tokengranting.Grant(("vault",), LIFETIME, "app", UID),
    ),
    (
        "an empty audience list is no audience",
        {"spec": spec(audiences=[])},
        pod(),
        GRANTED,
    ),
    (
        "a Bearer caller (a pod's token)",
        {"caller": callers.Kind.TOKEN},
        pod(),
        "403 only to the node",
    ),
    ("no binding", {"spec": spec(boundObjectRef=None)}, pod(), "403 not bound to a pod"),
    ("bound to a Secret", {"spec": spec(ref_kind="Secret")}, pod(), "403 not bound to a pod"),
    ("bound to a v2 Pod", {"spec": spec(ref_apiVersion="v2")}, pod(), "403 not bound to a pod"),
    ("a binding without a name", {"spec": spec(ref_name="")}, None, "403 not bound to a pod"),
    ("a binding without a uid", {"spec": spec(ref_uid=None)}, pod(), "403 without a uid"),
    ("a pod the cache does not hold", {}, None, "403 not in the hub's cache"),
    ("another uid (re-created)", {}, pod(uid="other"), "403 does not match"),
    ("a pod of another node", {}, pod(node="edge-2"), "403 scheduled on another node"),
    ("a pod without a node", {}, pod(node=""), "403 scheduled on another node"),
    (
        "an account the pod does not run as",
        {"account": "admin"},
        pod(),
        "403 runs as ServiceAccount 'reader', not 'admin'",
    ),
    ("a pod without an account", {}, pod(account=""), "403 runs as ServiceAccount ''"),
    (
        "two audiences",
        {"spec": spec(audiences=["vault", "other"])},
        pod(audiences=(None, "vault", "other")),
        "403 0 or 1 audiences",
    ),
    (
        "an audience no projected source names",
        {"spec": spec(audiences=["vault"])},
        pod(),
        "403 audience 'vault' is not in a projected",
    ),
    (
        "the API audiences for a pod with only another audience's source",
        {},
        pod(audiences=("vault",)),
        "403 audience '' is not in a projected",
    ),
    ("audiences not a list", {"spec": spec(audiences="vault")}, pod(), "400 spec.audiences"),
    ("audiences not strings", {"spec": spec(audiences=[1])}, pod(), "400 spec.audiences"),
    (
        "expirationSeconds not an integer",
        {"spec": spec(expirationSeconds="3600")},
        pod(),
        "400 spec.expirationSeconds",
    ),
    (
        "expirationSeconds a bool",
        {"spec": spec(expirationSeconds=True)},
        pod(),
        "400 spec.expirationSeconds",
    ),
    (
        "under the apiserver's 10 minutes",
        {"spec": spec(expirationSeconds=599)},
        pod(),
        "422 between 600",
    ),
    (
        "over 2^32 seconds",
        {"spec": spec(expirationSeconds=(1 << 32) + 1)},
        pod(),
        "422 between 600",
    ),
]


@pytest.mark.parametrize(
    ("arguments", "cached", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_offline_token_grants(
    arguments: dict[str, Any], cached: dict[str, Any] | None, expected: tokengranting.Grant | str
) -> None:
    decided = tokengranting.decide(
        **{
            "caller": NODE_CALLER,
            "node_name": NODE,
            "namespace": "apps",
            "account": "reader",
            "spec": spec(),
            "pod": cached,
            **arguments,
        }
    )
    if isinstance(expected, tokengranting.Grant):
        assert decided == expected
        return
    assert isinstance(decided, tokengranting.Refusal)
    code, _, part = expected.partition(" ")
    assert decided.code == int(code) and part in decided.message, decided.message


def test_the_pod_to_look_up_is_the_bound_one() -> None:
    assert tokengranting.pod_name(spec()) == "app"
    assert tokengranting.pod_name(spec(ref_kind="Secret")) == ""
    assert tokengranting.pod_name(spec(boundObjectRef=None)) == ""
    assert tokengranting.pod_name({"boundObjectRef": {"kind": "Pod", "name": 3}}) == ""
