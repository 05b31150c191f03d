"""The Akri custom resources the agent reads and writes (akri.sh/v0), as ``kubeapi`` paths."""

from __future__ import annotations

from kubecontrol import kubeapi

CONFIGURATIONS = kubeapi.Resource("akri.sh", "v0", "configurations")
INSTANCES = kubeapi.Resource("akri.sh", "v0", "instances")
