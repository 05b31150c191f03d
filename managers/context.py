"""What every controller is built with: the API, the settings, Events, metrics and the
process's shared informers."""

from __future__ import annotations

import dataclasses

from kubecontrol import events, informing, kubeapi
from managers import metrics, settings


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    api: kubeapi.KubeApi
    settings: settings.ManagerSettings
    recorder: events.Recorder
    metrics: metrics.Metrics
    informers: informing.Informers | None = None
    """Shared reflectors (one list+watch per resource and scope for the process); None: each
    controller runs its own (tests that build one controller alone)."""
