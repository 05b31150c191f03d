"""docs/operating.md shows ``edgehub status`` as it is: its sample screen is what
``statustext.render`` draws from the hub's and the agent's JSON below (a node whose link to
both apiservers is cut, answering from its cache, following its pool's leader)."""

from __future__ import annotations

import pathlib
import re
from typing import Any

from edgehub import statustext

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "operating.md"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z

HUB: dict[str, Any] = {
    "node": "edge-1",
    "ready": True,
    "servers": [
        {"url": "https://10.0.0.10:6443", "healthy": False, "lastError": "no answer within 2 s",
         "lastErrorTime": "2027-01-15T07:59:55Z", "lastSuccessTime": "2027-01-15T07:57:00Z"},
        {"url": "https://10.0.0.11:6443", "healthy": False, "lastError": "connection refused",
         "lastErrorTime": "2027-01-15T07:59:58Z", "lastSuccessTime": "2027-01-15T07:57:00Z"},
    ],
    "cache": {
        "path": "/etc/kubernetes/cache", "sizeBytes": 13_002_342, "objects": 1021, "lists": 14,
        "documents": 5, "writeFailures": 0, "errorKeys": 0,
        "sealedBy": "TPM at device:/dev/tpmrm0",
        "offlineEvents": {"pending": 7, "dropped": 0},
        "components": [
            {"component": "coredns", "objects": 210, "lists": 4, "newestList": {"ageSeconds": 190}},
            {"component": "kube-proxy", "objects": 402, "lists": 4,
             "newestList": {"ageSeconds": 185}},
            {"component": "kubelet", "objects": 391, "lists": 5, "newestList": {"ageSeconds": 181}},
            {"component": "yurthub", "objects": 18, "lists": 1, "newestList": {"ageSeconds": 200}},
        ],
    },
    "certificates": [
        {"name": "client", "subject": "CN=system:node:edge-1,O=system:nodes,O=openyurt:yurthub",
         "notAfter": "2027-06-16T10:00:00Z", "expiresInSeconds": 152 * 86400 + 3600,
         "file": "/var/lib/yurthub/pki/yurthub-current.pem", "keySealedWith": 1},
        {"name": "serving", "subject": "CN=system:node:edge-1,O=system:nodes",
         "notAfter": "2027-06-16T10:00:00Z", "expiresInSeconds": 152 * 86400 + 3600,
         "file": "/var/lib/yurthub/pki/yurthub-server-current.pem", "keySealedWith": 1},
    ],
    "filters": {
        "active": ["masterservice", "discardcloudservice", "nodeportisolation",
                   "servicetopology", "forwardkubesvctraffic", "inclusterconfig",
                   "serviceenvupdater"],
        "inactive": {},
        "hubAddress": "169.254.2.1:10268",
    },
    "pool": {
        "nodePool": "hangzhou",
        "role": "follower",
        "leaders": [{"node": "edge-2", "address": "10.0.0.22", "usable": True}],
        "resources": [
            {"resource": "/v1/services", "synced": True, "objects": 41, "clients": 2,
             "readFrom": "edge-2", "lastError": ""},
            {"resource": "discovery.k8s.io/v1/endpointslices", "synced": True, "objects": 44,
             "clients": 2, "readFrom": "edge-2", "lastError": ""},
        ],
    },
}  # fmt: skip

AGENT: dict[str, Any] = {
    "kubeletSocket": {"path": "/var/lib/kubelet/device-plugins/kubelet.sock", "present": True},
    "handlers": [{"name": "onvif", "endpoints": 1}, {"name": "udev", "endpoints": 1}],
    "configurations": [
        {"namespace": "default", "name": "akri-udev-video", "handler": "udev",
         "handlerRegistered": True,
         "instances": [{"name": "akri-udev-video-1a2b3c", "slots": 1, "slotsInUse": 1},
                       {"name": "akri-udev-video-4d5e6f", "slots": 1, "slotsInUse": 0}]},
    ],
}  # fmt: skip


def screen() -> str:
    return statustext.render(
        HUB,
        "http://127.0.0.1:10267",
        NOW,
        agent=AGENT,
        agent_source="agent http://127.0.0.1:10270",
    )


def documented() -> str:
    text = DOC.read_text()
    section = text.split("## `edgehub status`", 1)[1]
    found = re.search(r"```text\n(.*?)```", section, re.S)
    assert found is not None, 'docs/operating.md: no ```text block under "## `edgehub status`"'
    return found.group(1)


def test_the_documented_status_screen_is_the_real_one() -> None:
    assert documented() == screen(), (
        "docs/operating.md's `edgehub status` sample differs from what statustext draws; "
        "paste this in its place:\n" + screen()
    )
