"""When a YurtStaticSet's rollout stops, and what says so (the ``yurtstaticset`` controller).

PURE: JSON dicts, texts and clocks in, frozen values out; nothing is raised for bad input.

A rollout (AdvancedRollingUpdate) halts at the first node whose swap went wrong:

* its worker Pod **failed** (the new static Pod was not ready in time and the worker put the
  old manifest back), reason ``WorkerFailed``; or
* its worker **succeeded** but the node's kubelet did not come back: within ``ready_timeout``
  after the worker ended, the node's Lease must be renewed (kubelet's requests reach the
  apiserver through the new hub: the old one is gone by then), the Node must be Ready and its
  mirror Pod must carry the new hash (kubelet posted it). Otherwise, reason ``NodeNotReady``.
  [quirk] A node cut off from the cloud right after its swap looks the same, and halts too:
  the controller cannot tell them apart; resume once it is back.

A halt is recorded where every CRD keeps it: the annotation ``edgehub.io/rollout-halted`` on
the YurtStaticSet, a JSON ``Halt`` naming the template hash it applies to. While it names the
current template, no worker is created for the whole YurtStaticSet (running ones finish). The
condition ``Halted`` in ``status.conditions`` and a Warning Event say the same (OpenYurt's
YurtStaticSet status has no conditions: with OpenYurt's CRD the apiserver drops them, the
annotation and the Event remain). The worker that halted it is kept (its log says why) and its
uid recorded in ``edgehub.io/rollout-halted-by`` beside the halt.

It resumes only when an operator says so: removing the annotation (``edgehub rollout resume``,
or ``kubectl annotate yss/<name> edgehub.io/rollout-halted-``) deletes the recorded workers, so
a failed node is tried again and a node whose kubelet did not come back is left as it is; or
changing the template (a fix, or ``edgehub rollout undo``): a halt of another hash no longer
applies and is removed. An annotation that is not a ``Halt`` (say, ``edgehub rollout pause``
writes one, or someone writes ``paused``) halts every template until removed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from kubecontrol import timestamps

HALT_ANNOTATION = "edgehub.io/rollout-halted"
HALTED_BY_ANNOTATION = "edgehub.io/rollout-halted-by"
"""On the YurtStaticSet: the uids of the workers that halted its rollout (kept while halted,
deleted when it resumes). Written with the halt in one update; on the YurtStaticSet, so the
controller needs no right to change Pods."""
CONDITION = "Halted"

WORKER_FAILED = "WorkerFailed"
NODE_NOT_READY = "NodeNotReady"
PAUSED = "Paused"
RESUMED = "Resumed"
TEMPLATE_CHANGED = "TemplateChanged"

MAX_MESSAGE = 1024
ANY_HASH = "*"
"""The hash of a halt that applies to every template (an operator's pause)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Halt:
    hash: str
    """The template it applies to; ``ANY_HASH``: every template."""
    node: str = ""
    worker: str = ""
    reason: str = PAUSED
    message: str = ""
    since: str = ""

    def applies_to(self, digest: str) -> bool:
        return self.hash in (ANY_HASH, digest)

    def render(self) -> str:
        return orjson.dumps(dataclasses.asdict(self)).decode()


def read(annotations: object) -> Halt | None:
    """The halt an object's annotations record; None when there is none. A value that is not
    a ``Halt`` is an operator's pause of every template, its text the message."""
    if not isinstance(annotations, Mapping):
        return None
    raw = annotations.get(HALT_ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("hash"), str) or not doc["hash"]:
        text = raw.strip()[:MAX_MESSAGE]
        return Halt(ANY_HASH, message=f"paused by an operator: {text}" if text else "paused")
    fields = {f.name: doc.get(f.name) for f in dataclasses.fields(Halt)}
    return Halt(**{k: str(v)[:MAX_MESSAGE] if v is not None else "" for k, v in fields.items()})


def with_halt(obj: Mapping[str, Any], halt: Halt | None) -> dict[str, Any]:
    """``obj`` with the halt annotation set to ``halt`` (removed when None)."""
    meta = dict(obj.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    if halt is None:
        annotations.pop(HALT_ANNOTATION, None)
    else:
        annotations[HALT_ANNOTATION] = halt.render()
    meta["annotations"] = annotations
    return {**obj, "metadata": meta}


MAX_HALTED_BY = 64


def halted_by(annotations: object) -> frozenset[str]:
    """The uids of the workers that halted a rollout (``edgehub.io/rollout-halted-by``)."""
    if not isinstance(annotations, Mapping):
        return frozenset()
    raw = annotations.get(HALTED_BY_ANNOTATION)
    if not isinstance(raw, str):
        return frozenset()
    uids = [u.strip()[:64] for u in raw.split(",") if u.strip()]
    return frozenset(uids[:MAX_HALTED_BY])


def with_halted_by(obj: Mapping[str, Any], workers: frozenset[str]) -> dict[str, Any]:
    """``obj`` with the halted-by annotation set to ``workers`` (removed when empty)."""
    meta = dict(obj.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    if workers:
        annotations[HALTED_BY_ANNOTATION] = ",".join(sorted(workers)[:MAX_HALTED_BY])
    else:
        annotations.pop(HALTED_BY_ANNOTATION, None)
    meta["annotations"] = annotations
    return {**obj, "metadata": meta}


# -- what a worker Pod says about its end


def finished_at(pod: Mapping[str, Any]) -> float | None:
    """When the worker's container ended (its ``terminated.finishedAt``), epoch seconds."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if not isinstance(status, Mapping):
            continue
        terminated = (status.get("state") or {}).get("terminated")
        if isinstance(terminated, Mapping):
            when = timestamps.epoch(terminated.get("finishedAt"))
            if when is not None:
                return when
    return None


def failure_message(pod: Mapping[str, Any]) -> str:
    """Why a worker failed, from its container's termination (message, else reason and exit
    code), bounded."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if not isinstance(status, Mapping):
            continue
        terminated = (status.get("state") or {}).get("terminated")
        if not isinstance(terminated, Mapping):
            continue
        message = str(terminated.get("message") or "").strip()
        if message:
            return message.splitlines()[-1][:MAX_MESSAGE]
        reason = str(terminated.get("reason") or "Error")
        return f"{reason}, exit code {terminated.get('exitCode')}"[:MAX_MESSAGE]
    return str((pod.get("status") or {}).get("message") or "no termination reported")[:MAX_MESSAGE]


# -- did the node's kubelet come back after its swap

VERIFIED = "verified"
WAITING = "waiting"
NOT_BACK = "not back"
RECHECK_SECONDS = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str
    message: str = ""
    recheck: float | None = None
    """Seconds until it is worth looking again (WAITING only)."""


def verify(
    *,
    ended: float,
    node_ready: bool,
    renewed: float | None,
    upgraded: bool,
    now: float,
    timeout: float,
) -> Verdict:
    """Whether the kubelet of a node whose worker ended at ``ended`` came back: its Lease
    ``renewed`` after that, the Node Ready and its mirror Pod on the new hash."""
    missing = []
    if renewed is None or renewed <= ended:
        missing.append("its Lease was not renewed since")
    if not node_ready:
        missing.append("the Node is not Ready")
    if not upgraded:
        missing.append("its mirror Pod does not carry the new hash")
    if not missing:
        return Verdict(VERIFIED)
    if now >= ended + timeout:
        return Verdict(
            NOT_BACK,
            f"kubelet did not come back within {timeout:g} s after the hub was swapped: "
            + "; ".join(missing),
        )
    return Verdict(WAITING, recheck=max(0.1, min(RECHECK_SECONDS, ended + timeout - now)))


# -- the condition in status (beyond OpenYurt's status)


def condition(halt: Halt | None, previous: Sequence[Any], now: str) -> list[dict[str, Any]] | None:
    """``status.conditions`` with ``Halted`` saying ``halt``; None when nothing changes (no
    condition is written before the first halt)."""
    kept = [dict(c) for c in previous if isinstance(c, Mapping) and c.get("type") != CONDITION]
    current = next(
        (c for c in previous if isinstance(c, Mapping) and c.get("type") == CONDITION), None
    )
    if halt is None:
        if current is None or current.get("status") == "False":
            return None
        want: dict[str, Any] = {
            "type": CONDITION,
            "status": "False",
            "reason": RESUMED,
            "message": "",
        }
    else:
        message = f"node {halt.node}: {halt.message}" if halt.node else halt.message
        want = {
            "type": CONDITION,
            "status": "True",
            "reason": halt.reason,
            "message": message[:MAX_MESSAGE],
        }
    if current is not None and all(current.get(k) == v for k, v in want.items()):
        return None
    return [*kept, {**want, "lastTransitionTime": now}]
