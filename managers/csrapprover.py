"""The CSR approver controller: carries out ``csrapproving.decide`` on every CSR it sees.

It watches all CertificateSigningRequests (certificates.k8s.io/v1); for each pending one the
pure decision says approve, deny or leave it. Approving or denying is one conditional PUT of
the ``approval`` subresource with the CSR as last seen (its resourceVersion), adding an
``Approved`` (reason ``AutoApproved``) or ``Denied`` (reason ``Invalid<Check>``) condition;
the real controller-manager then signs an approved one. A 409 means the CSR changed (someone
else decided, or it was updated): the key is requeued shortly and decided again from the
newer copy the watch brings. A denial is also posted as a Warning Event on the CSR and
logged; approvals are logged. CSRs that are not the hub's are never written to.

RBAC: get/list/watch certificatesigningrequests, update certificatesigningrequests/approval,
approve on signers kubernetes.io/kube-apiserver-client and kubernetes.io/kubelet-serving,
create events (``manifests/manager/rbac.yaml``).
"""

from __future__ import annotations

import copy
import datetime
import logging
from typing import Any

from kubecontrol import controlling, kubeapi
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
        self.policy = csrapproving.Policy(extra_organizations=own.extra_organizations)
        self.controller = controlling.Controller(
            NAME, self.reconcile, own.timings, observer=ctx.metrics
        )
        self.csrs = self.controller.watch(ctx.api, kubeapi.CERTIFICATE_SIGNING_REQUESTS)

    async def reconcile(self, key: controlling.Key) -> float | None:
        csr = self.csrs.store.get(key)
        if csr is None:
            return None
        decision = csrapproving.decide(csr, self.policy)
        if isinstance(decision, csrapproving.Ignore):
            return None
        name = key[1]
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
