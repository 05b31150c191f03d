"""``inclusterconfig``: kube-proxy on the edge uses InClusterConfig (and so the hub).

PURE. In ConfigMap ``kube-system/kube-proxy``, key ``config.conf`` (a KubeProxyConfiguration in
YAML), the ``kubeconfig:`` line is commented out: kube-proxy then falls back to
InClusterConfig, i.e. ``KUBERNETES_SERVICE_HOST``, which ``masterservice`` points at the hub
(reference §6, OpenYurt issue #358). So it is kept off whenever ``masterservice`` is (pods
cannot reach the hub's secure port): kube-proxy then keeps its kubeconfig, instead of a
``kubernetes`` ClusterIP only it could route.

A line is commented when its first word is the key ``kubeconfig`` followed by ``:``, whatever
the value holds. YurtHub also needs the trimmed line to split on ``:`` into exactly two parts,
so a value with a colon in it (``C:\\kube\\config``, a URL-like path) stays active: here it is
commented too, since the intent is the same. The first ``kubeconfig`` on the line becomes
``#kubeconfig``; indentation and every other byte of the text stay as they were.
"""

from __future__ import annotations

import re

from yurthub.filters import inputs, objects

NAMESPACE, NAME, KEY = "kube-system", "kube-proxy", "config.conf"
_KUBECONFIG_LINE = re.compile(r"^([ \t]*)(kubeconfig[ \t]*:)", re.MULTILINE)


def comment_kubeconfig(text: str) -> str:
    return _KUBECONFIG_LINE.sub(r"\1#\2", text)


def apply(obj: objects.Obj, kind: str, world: inputs.Inputs) -> objects.Obj | None:
    if kind != "ConfigMap" or objects.namespace_name(obj) != (NAMESPACE, NAME):
        return obj
    data = objects.mapping(obj.get("data"))
    text = data.get(KEY)
    if not isinstance(text, str):
        return obj
    changed = comment_kubeconfig(text)
    if changed == text:
        return obj
    return {**obj, "data": {**data, KEY: changed}}
