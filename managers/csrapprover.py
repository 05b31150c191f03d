"""The CSR approver controller: carries out ``csrapproving.decide`` on every CSR it sees.

It watches all CertificateSigningRequests (certificates.k8s.io/v1); for each pending one the
pure decision says approve, deny, wait or leave it. When a serving certificate names an IP
that only the ``default/kubernetes`` ClusterIPs or the requesting node's ``status.addresses``
could allow, those are read (a GET each, only then: serving CSRs are rare, and a watch of
Services would be one more long-running request per replica) and the CSR decided again. A
CSR that must wait (its node is not registered yet) is asked about again after a per-CSR
capped back-off, logged once. Approving or denying is one conditional PUT of
the ``approval`` subresource with the CSR as last seen (its resourceVersion), adding an
``Approved`` (reason ``AutoApproved``) or ``Denied`` (reason ``Invalid<Check>``) condition;
the real controller-manager then signs an approved one. A 409 means the CSR changed (someone
else decided, or it was updated): the key is requeued shortly and decided again from the
newer copy the watch brings. A denial is also posted as a Warning Event on the CSR and
logged; approvals are logged. CSRs that are not the hub's are never written to.

RBAC: get/list/watch certificatesigningrequests, update certificatesigningrequests/approval,
approve on signers kubernetes.io/kube-apiserver-client and kubernetes.io/kubelet-serving,
create events, get services and nodes (``manifests/manager/rbac.yaml``).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
from typing import Any

from kubecontrol import backoff, controlling, kubeapi
from managers import context, csrapproving

logger = logging.getLogger(__name__)

NAME = "csrapprover"
CONFLICT_REQUEUE = 1.0
"""Seconds before a CSR whose approval write lost a race is decided again."""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def approval_body(
    csr: dict[str, Any], decision: csrapproving.Approve | csrapproving.Deny, now: str
) -> dict[str, Any]:
    """The CSR with the decision's condition appended (keeps its resourceVersion)."""
    body = copy.deepcopy(csr)
    status = body.get("status")
    if not isinstance(status, dict):
        status = body["status"] = {}
    conditions = status.get("conditions")
    status["conditions"] = [*(conditions if isinstance(conditions, list) else [])]
    status["conditions"].append(
        {
            "type": "Approved" if isinstance(decision, csrapproving.Approve) else "Denied",
            "status": "True",
            "reason": decision.reason,
            "message": decision.message,
            "lastUpdateTime": now,
        }
    )
    return body


class CsrApprover:
    def __init__(self, ctx: context.Context) -> None:
        self.api = ctx.api
        self.recorder = ctx.recorder
        self.metrics = ctx.metrics
        own = ctx.settings.csr_approver
        self.policy = csrapproving.Policy(
            extra_organizations=own.extra_organizations,
            cluster_domain=own.cluster_domain,
            dummy_ips=own.dummy_ips,
        )
        self.controller = controlling.Controller(
            NAME, self.reconcile, own.timings, observer=ctx.metrics, informers=ctx.informers
        )
        self.csrs = self.controller.watch(ctx.api, kubeapi.CERTIFICATE_SIGNING_REQUESTS)
        self.waiting: backoff.PerKey[controlling.Key] = backoff.PerKey(
            own.wait_initial, own.wait_cap
        )
        """CSRs left pending for a fact not known yet: how often each was asked about."""

    async def _decide(self, csr: dict[str, Any]) -> csrapproving.Decision:
        """Decide; if the decision needs facts from the cluster, read them and decide again."""
        facts = csrapproving.Facts()
        decision = csrapproving.decide(csr, self.policy, facts)
        if not isinstance(decision, csrapproving.Wait) or not decision.reads:
            return decision
        if decision.service:
            service = await self.api.get_or_none(kubeapi.SERVICES, "default", "kubernetes")
            ips = frozenset() if service is None else csrapproving.service_ips(service)
            facts = dataclasses.replace(facts, service_ips=ips)
        if decision.node:
            node = await self.api.get_or_none(kubeapi.NODES, "", decision.node)
            addresses = None if node is None else csrapproving.node_addresses(node)
            facts = dataclasses.replace(facts, nodes={decision.node: addresses})
        return csrapproving.decide(csr, self.policy, facts)

    async def reconcile(self, key: controlling.Key) -> float | None:
        csr = self.csrs.store.get(key)
        if csr is None:
            self.waiting.forget(key)
            return None
        decision = await self._decide(csr)
        name = key[1]
        if isinstance(decision, csrapproving.Wait):
            if not self.waiting.failures(key):
                logger.info("CSR %s left pending: %s", name, decision.why)
            return self.waiting.failed(key)
        self.waiting.forget(key)
        if isinstance(decision, csrapproving.Ignore):
            return None
        body = approval_body(csr, decision, _now())
        try:
            await self.api.replace(
                kubeapi.CERTIFICATE_SIGNING_REQUESTS, "", name, body, subresource="approval"
            )
        except kubeapi.Conflict:
            logger.debug("CSR %s changed while deciding it; deciding again", name)
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return None
        if isinstance(decision, csrapproving.Approve):
            self.metrics.csr_decisions.labels(decision.kind, "approved", decision.reason).inc()
            logger.info("CSR %s approved: %s", name, decision.message)
        else:
            self.metrics.csr_decisions.labels(decision.kind, "denied", decision.reason).inc()
            logger.warning("CSR %s denied (%s): %s", name, decision.reason, decision.message)
            await self.recorder.post(csr, "Warning", decision.reason, decision.message)
        return None


def build(ctx: context.Context) -> controlling.Controller:
    return CsrApprover(ctx).controller
