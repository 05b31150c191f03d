"""The Akri custom resources the agent reads and writes (akri.sh/v0), as ``kubeapi`` paths."""

from __future__ import annotations

from kubecontrol import kubeapi

CONFIGURATIONS = kubeapi.Resource("akri.sh", "v0", "configurations")
INSTANCES = kubeapi.Resource("akri.sh", "v0", "instances")

CRDS_MISSING = (
    "the akri.sh CRDs are not installed: kubectl apply -f manifests/crds/ (or the Helm chart)"
)
"""What the agent and the manager say (once) when the apiserver has no akri.sh resources."""
