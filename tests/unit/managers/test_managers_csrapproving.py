"""The CSR approver's decisions as a table: the hub's exact shapes are approved, a CSR that
claims to be the hub's but fails a check is denied naming the check, anything else is left;
a serving certificate names only what the hub serves (the kubernetes names in the cluster
domain, the Service's ClusterIPs, the dummy IP, loopback, its node's own addresses)."""

from __future__ import annotations

import dataclasses
from typing import Any

import csr_support as cs
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from managers import csrapproving as ca

NODE = "edge-1"
NODE_USER = f"system:node:{NODE}"
NODES = ["system:nodes", "system:authenticated"]
HUB = ["openyurt:yurthub", "system:nodes", "system:authenticated"]
TOKEN_USER = "system:bootstrap:abcdef"
TOKEN = ["system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"]
CLIENT = ["digital signature", "key encipherment", "client auth"]
CLIENT_EC = ["digital signature", "client auth"]
SERVING = ["digital signature", "key encipherment", "server auth"]
SERVING_EC = ["digital signature", "server auth"]

# One key for the table: generating one per row would make the table slow.
KEY = cs.new_key()
NODE_IP = "192.0.2.10"
OTHER_NODE_IP = "192.0.2.11"
# What the controller reads from the cluster: default/kubernetes and the requesting node.
FACTS = ca.Facts(
    service_ips=frozenset({"10.96.0.1", "fd00:10:96::1"}),
    nodes={NODE: frozenset({NODE_IP, "2001:db8::10"})},
)


def decide(obj: dict[str, Any], policy: ca.Policy = ca.Policy()) -> ca.Decision:
    return ca.decide(obj, policy, FACTS)


def client(
    *,
    cn: str = NODE_USER,
    orgs: tuple[str, ...] = ("openyurt:yurthub", "system:nodes"),
    signer: str = cs.CLIENT_SIGNER,
    usages: list[str] = CLIENT,
    user: str = NODE_USER,
    groups: list[str] = HUB,
    **sans: Any,
) -> dict[str, Any]:
    pem = cs.request_pem(cn, orgs, key=KEY, **sans)
    return cs.csr("c", pem, signer, usages, username=user, groups=groups)


def serving(
    *,
    cn: str = NODE_USER,
    orgs: tuple[str, ...] = ("system:nodes",),
    signer: str = cs.SERVING_SIGNER,
    usages: list[str] = SERVING_EC,
    user: str = NODE_USER,
    groups: list[str] = HUB,
    dns: tuple[str, ...] = cs.HUB_DNS,
    ips: tuple[str, ...] = cs.HUB_IPS,
    **sans: Any,
) -> dict[str, Any]:
    pem = cs.request_pem(cn, orgs, dns=dns, ips=ips, key=KEY, **sans)
    return cs.csr("s", pem, signer, usages, username=user, groups=groups)


APPROVE = [
    ("hub client, renewed by the hub", client()),
    ("hub client, EC key usages", client(usages=CLIENT_EC)),
    ("hub client, first one with a bootstrap token", client(user=TOKEN_USER, groups=TOKEN)),
    ("hub client, made with kubelet's identity", client(groups=NODES)),
    (
        "hub client, tenant organization",
        client(orgs=("openyurt:yurthub", "system:nodes", "openyurt:tenant:team-a")),
    ),
    ("hub client, usages in any order", client(usages=["client auth", "digital signature"])),
    ("hub serving, by the node", serving()),
    ("hub serving, RSA usages", serving(usages=SERVING)),
    ("hub serving, bootstrap token", serving(user=TOKEN_USER, groups=TOKEN)),
    ("hub serving, bootstrap token, IPs only", serving(user=TOKEN_USER, groups=TOKEN, dns=())),
]


@pytest.mark.parametrize(("case", "obj"), APPROVE, ids=[c for c, _ in APPROVE])
def test_hub_shapes_are_approved(case: str, obj: dict[str, Any]) -> None:
    decision = decide(obj)
    assert isinstance(decision, ca.Approve), decision
    assert decision.node == NODE and decision.reason == "AutoApproved"
    assert "edgehub" in decision.message and NODE in decision.message


DENY = [
    # claimed by O=openyurt:yurthub
    ("client for the serving signer", client(signer=cs.SERVING_SIGNER), "SignerName"),
    ("client for kubelet's client signer", client(signer=cs.KUBELET_CLIENT_SIGNER), "SignerName"),
    ("client for a custom signer", client(signer="example.com/anything"), "SignerName"),
    ("client, CN not a node", client(cn="admin"), "CommonName"),
    ("client, CN with a bad node name", client(cn="system:node:Bad_Name"), "CommonName"),
    ("client, empty node name", client(cn="system:node:"), "CommonName"),
    ("client without system:nodes", client(orgs=("openyurt:yurthub",)), "Organizations"),
    (
        "client claiming cluster-admin",
        client(orgs=("openyurt:yurthub", "system:nodes", "system:masters")),
        "Organizations",
    ),
    (
        "client with an unlisted organization",
        client(orgs=("openyurt:yurthub", "system:nodes", "kubeadm:cluster-admins")),
        "Organizations",
    ),
    (
        "client, bare tenant prefix",
        client(orgs=("openyurt:yurthub", "system:nodes", "openyurt:tenant:")),
        "Organizations",
    ),
    ("client with a DNS SAN", client(dns=["edge-1"]), "SubjectAltNames"),
    ("client with an IP SAN", client(ips=["192.0.2.1"]), "SubjectAltNames"),
    ("client asking for server auth too", client(usages=[*CLIENT, "server auth"]), "Usages"),
    ("client without client auth", client(usages=["digital signature"]), "Usages"),
    ("client with cert sign", client(usages=[*CLIENT, "cert sign"]), "Usages"),
    ("client for another node", client(cn="system:node:edge-2"), "Requester"),
    ("client requested by a user", client(user="alice", groups=["developers"]), "Requester"),
    (
        "client, token not in bootstrappers",
        client(user=TOKEN_USER, groups=["system:authenticated"]),
        "Requester",
    ),
    ("client, node name without the nodes group", client(groups=["openyurt:yurthub"]), "Requester"),
    # claimed by the serving SANs
    ("serving with an email SAN", serving(emails=["a@example.com"]), "SubjectAltNames"),
    ("serving with a URI SAN", serving(uris=["spiffe://cluster/ns/x"]), "SubjectAltNames"),
    ("serving, extra organization", serving(orgs=("system:nodes", "x")), "Organizations"),
    ("serving, CN not a node", serving(cn="kubernetes"), "CommonName"),
    ("serving, client usages", serving(usages=CLIENT), "Usages"),
    ("serving without digital signature", serving(usages=["server auth"]), "Usages"),
    ("serving for another node", serving(cn="system:node:edge-2"), "Requester"),
    (
        "serving by a ServiceAccount",
        serving(user="system:serviceaccount:ns:sa", groups=["system:serviceaccounts"]),
        "Requester",
    ),
    # claimed by a bootstrap token asking for a serving certificate
    (
        "serving by a token, no SANs",
        serving(user=TOKEN_USER, groups=TOKEN, dns=(), ips=()),
        "SubjectAltNames",
    ),
]


@pytest.mark.parametrize(("case", "obj", "check"), DENY, ids=[c for c, _, _ in DENY])
def test_claims_that_fail_a_check_are_denied_naming_it(
    case: str, obj: dict[str, Any], check: str
) -> None:
    decision = decide(obj)
    assert isinstance(decision, ca.Deny), decision
    assert decision.check == check and decision.reason == f"Invalid{check}"
    assert decision.message.startswith("edgehub manager denied")


def plain(
    pem: bytes, signer: str, usages: list[str], user: str, groups: list[str]
) -> dict[str, Any]:
    return cs.csr("p", pem, signer, usages, username=user, groups=groups)


IGNORE = [
    (
        "kubelet's serving CSR",
        plain(cs.kubelet_serving_request(NODE), cs.SERVING_SIGNER, SERVING, NODE_USER, NODES),
        "not a hub",
    ),
    (
        # Through the hub, kubelet's requests carry the hub's identity: still kubelet's.
        "kubelet's serving CSR sent through the hub",
        plain(cs.kubelet_serving_request(NODE), cs.SERVING_SIGNER, SERVING, NODE_USER, HUB),
        "not a hub",
    ),
    (
        "kubelet's client CSR (bootstrap)",
        plain(
            cs.request_pem(NODE_USER, ["system:nodes"], key=KEY),
            cs.KUBELET_CLIENT_SIGNER,
            CLIENT_EC,
            TOKEN_USER,
            TOKEN,
        ),
        "not a hub",
    ),
    (
        "someone's client certificate",
        plain(
            cs.request_pem("alice", ["developers"], key=KEY),
            cs.CLIENT_SIGNER,
            CLIENT,
            "alice",
            ["x"],
        ),
        "not a hub",
    ),
    (
        "a node name on a custom signer",
        plain(
            cs.request_pem(NODE_USER, ["system:nodes"], dns=cs.HUB_DNS, key=KEY),
            "example.com/signer",
            SERVING,
            NODE_USER,
            NODES,
        ),
        "not a hub",
    ),
    (
        "a bare 'kubernetes' DNS name is a possible hostname, not a hub marker",
        plain(
            cs.request_pem(NODE_USER, ["system:nodes"], dns=["kubernetes"], key=KEY),
            cs.SERVING_SIGNER,
            SERVING,
            NODE_USER,
            NODES,
        ),
        "not a hub",
    ),
    (
        "already approved",
        cs.csr(
            "a",
            cs.hub_client_request(NODE),
            cs.CLIENT_SIGNER,
            CLIENT,
            username=NODE_USER,
            groups=HUB,
            conditions=[{"type": "Approved", "status": "True"}],
        ),
        "already approved",
    ),
    (
        "already denied",
        cs.csr(
            "d",
            cs.hub_client_request(NODE),
            cs.CLIENT_SIGNER,
            CLIENT,
            username=NODE_USER,
            groups=HUB,
            conditions=[{"type": "Denied", "status": "True"}],
        ),
        "already denied",
    ),
    (
        "a garbage request by a node",
        plain(b"garbage", cs.CLIENT_SIGNER, CLIENT, NODE_USER, HUB),
        "not a hub",
    ),
    ("no spec", {"metadata": {"name": "x"}}, "no spec"),
]


@pytest.mark.parametrize(("case", "obj", "why"), IGNORE, ids=[c for c, _, _ in IGNORE])
def test_what_is_not_the_hubs_is_never_touched(case: str, obj: dict[str, Any], why: str) -> None:
    decision = decide(obj)
    assert isinstance(decision, ca.Ignore), decision
    assert why in decision.why


def test_a_token_made_serving_request_that_does_not_parse_is_denied() -> None:
    obj = plain(b"garbage", cs.SERVING_SIGNER, SERVING_EC, TOKEN_USER, TOKEN)
    decision = decide(obj)
    assert isinstance(decision, ca.Deny) and decision.check == "Request"


@pytest.mark.parametrize(
    ("key", "check"),
    [
        (rsa.generate_private_key(65537, 2048), None),
        (rsa.generate_private_key(65537, 1024), "PublicKey"),
        (ec.generate_private_key(ec.SECP384R1()), None),
        (ec.generate_private_key(ec.SECP256K1()), "PublicKey"),
    ],
    ids=["rsa-2048", "rsa-1024", "p-384", "secp256k1"],
)
def test_key_strength(key: Any, check: str | None) -> None:
    obj = cs.csr(
        "k",
        cs.hub_client_request(NODE, key=key),
        cs.CLIENT_SIGNER,
        CLIENT,
        username=NODE_USER,
        groups=HUB,
    )
    decision = decide(obj)
    if check is None:
        assert isinstance(decision, ca.Approve), decision
    else:
        assert isinstance(decision, ca.Deny) and decision.check == check, decision


def test_ed25519_is_accepted() -> None:
    pem = cs.hub_client_request(NODE, key=ed25519.Ed25519PrivateKey.generate())
    obj = cs.csr("e", pem, cs.CLIENT_SIGNER, CLIENT_EC, username=NODE_USER, groups=HUB)
    assert isinstance(decide(obj), ca.Approve)


def test_operator_allowed_organizations() -> None:
    obj = client(orgs=("openyurt:yurthub", "system:nodes", "edge-operators"))
    assert isinstance(decide(obj), ca.Deny)
    policy = ca.Policy(extra_organizations=frozenset({"edge-operators"}))
    assert isinstance(decide(obj, policy), ca.Approve)


@pytest.mark.parametrize("org", ["system:masters", "system:nodes", ""])
def test_policy_refuses_reserved_organizations(org: str) -> None:
    with pytest.raises(ValueError):
        ca.Policy(extra_organizations=frozenset({org}))


# --- what a serving certificate may name --------------------------------------------------

EDGE_DOMAIN = ca.Policy(cluster_domain="edge.example")
CUSTOM_DUMMY = ca.Policy(dummy_ips=frozenset({"169.254.9.9"}))

NAMES_APPROVED = [
    ("the hub's own request", serving(), ca.Policy()),
    ("DNS names only", serving(ips=()), ca.Policy()),
    ("one kubernetes name alone", serving(dns=("kubernetes.default.svc",), ips=()), ca.Policy()),
    ("the node's own IP", serving(ips=(NODE_IP,)), ca.Policy()),
    ("the node's own IPv6 address", serving(ips=("2001:db8::10",)), ca.Policy()),
    ("the Service's IPv6 ClusterIP", serving(ips=("fd00:10:96::1",)), ca.Policy()),
    ("a loopback bind address", serving(ips=("127.0.0.1", "::1")), ca.Policy()),
    ("the cluster domain", serving(dns=("kubernetes.default.svc.edge.example",)), EDGE_DOMAIN),
    ("a custom dummy IP", serving(ips=("169.254.9.9",)), CUSTOM_DUMMY),
    ("names in capitals", serving(dns=("Kubernetes.Default.SVC",), ips=()), ca.Policy()),
]


@pytest.mark.parametrize(
    ("case", "obj", "policy"), NAMES_APPROVED, ids=[c for c, _, _ in NAMES_APPROVED]
)
def test_serving_names_the_hub_serves_are_approved(
    case: str, obj: dict[str, Any], policy: ca.Policy
) -> None:
    assert isinstance(ca.decide(obj, policy, FACTS), ca.Approve)


HUB_NAMES = ("kubernetes.default",)
NAMES_DENIED = [
    ("a wildcard", serving(dns=(*HUB_NAMES, "*")), ca.Policy(), "DNS:*"),
    (
        "every Service",
        serving(dns=(*HUB_NAMES, "*.svc.cluster.local")),
        ca.Policy(),
        "DNS:*.svc.cluster.local",
    ),
    (
        "another host",
        serving(dns=(*HUB_NAMES, "vault.example.com")),
        ca.Policy(),
        "DNS:vault.example.com",
    ),
    (
        "kubernetes in another domain",
        serving(dns=("kubernetes.default.svc.evil.example",)),
        ca.Policy(),
        "DNS:kubernetes.default.svc.evil.example",
    ),
    (
        "the default domain when the cluster's is another",
        serving(dns=("kubernetes.default.svc.cluster.local",)),
        EDGE_DOMAIN,
        "DNS:kubernetes.default.svc.cluster.local",
    ),
    (
        "a name under the kubernetes names",
        serving(dns=(*HUB_NAMES, "x.kubernetes.default.svc")),
        ca.Policy(),
        "DNS:x.kubernetes.default.svc",
    ),
    ("another node's IP", serving(ips=(OTHER_NODE_IP,)), ca.Policy(), f"IP:{OTHER_NODE_IP}"),
    ("the default dummy IP when it is another", serving(), CUSTOM_DUMMY, "IP:169.254.2.1"),
    ("a public IP", serving(ips=("8.8.8.8",)), ca.Policy(), "IP:8.8.8.8"),
    (
        # A bootstrap token is no node: it may name no node's addresses.
        "a node IP requested with a bootstrap token",
        serving(user=TOKEN_USER, groups=TOKEN, ips=(NODE_IP,)),
        ca.Policy(),
        f"IP:{NODE_IP}",
    ),
]


@pytest.mark.parametrize(
    ("case", "obj", "policy", "san"), NAMES_DENIED, ids=[c for c, _, _, _ in NAMES_DENIED]
)
def test_serving_names_the_hub_does_not_serve_are_denied_naming_them(
    case: str, obj: dict[str, Any], policy: ca.Policy, san: str
) -> None:
    decision = ca.decide(obj, policy, FACTS)
    assert isinstance(decision, ca.Deny), decision
    assert decision.reason == "InvalidSubjectAltNames"
    assert san in decision.message, decision.message


@pytest.mark.parametrize(
    ("case", "facts", "ip", "node", "service"),
    [
        # Not read yet: the controller reads what the decision names and decides again.
        ("nothing read", ca.Facts(), NODE_IP, NODE, True),
        ("node not read", dataclasses.replace(FACTS, nodes={}), NODE_IP, NODE, False),
        ("Service not read", dataclasses.replace(FACTS, service_ips=None), "10.96.0.1", "", True),
        # Not registered yet (a hub asks before its kubelet registers): asked again later.
        ("node does not exist", dataclasses.replace(FACTS, nodes={NODE: None}), NODE_IP, "", False),
    ],
)
def test_a_name_only_missing_facts_could_allow_waits(
    case: str, facts: ca.Facts, ip: str, node: str, service: bool
) -> None:
    decision = ca.decide(serving(ips=(ip,)), ca.Policy(), facts)
    assert isinstance(decision, ca.Wait), decision
    assert (decision.node, decision.service) == (node, service)
    assert decision.reads is bool(node or service)
    assert f"IP:{ip}" in decision.why


def test_facts_that_are_read_and_do_not_allow_a_name_deny_it() -> None:
    """No default/kubernetes Service (read: none) is no reason to wait for it."""
    facts = dataclasses.replace(FACTS, service_ips=frozenset())
    decision = ca.decide(serving(ips=("10.96.0.1",)), ca.Policy(), facts)
    assert isinstance(decision, ca.Deny) and "IP:10.96.0.1" in decision.message


def test_what_needs_no_fact_is_decided_without_reading_any() -> None:
    static = serving(ips=("169.254.2.1", "127.0.0.1"))
    assert isinstance(ca.decide(static, ca.Policy(), ca.Facts()), ca.Approve)
    wildcard = serving(dns=("kubernetes.default", "*"), ips=(NODE_IP,))
    assert isinstance(ca.decide(wildcard, ca.Policy(), ca.Facts()), ca.Deny)


def test_what_the_facts_say_is_read_from_cluster_objects() -> None:
    service = {"spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1", "fd00::1"]}}
    assert ca.service_ips(service) == frozenset({"10.96.0.1", "fd00::1"})
    assert ca.service_ips({"spec": {"clusterIP": "None"}}) == frozenset()
    node = {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "192.0.2.10"},
                {"type": "ExternalIP", "address": "2001:DB8::10"},
                {"type": "Hostname", "address": "edge-1"},
                {"type": "InternalIP"},
            ]
        }
    }
    assert ca.node_addresses(node) == frozenset({"192.0.2.10", "2001:db8::10"})
    assert ca.node_addresses({"status": {"addresses": "junk"}}) == frozenset()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cluster_domain": "Not A Domain"}, "cluster domain"),
        ({"cluster_domain": ""}, "cluster domain"),
        ({"dummy_ips": frozenset({"not-an-ip"})}, "dummy"),
    ],
)
def test_policy_refuses_bad_names(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ca.Policy(**kwargs)
