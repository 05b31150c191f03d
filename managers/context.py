"""What every controller is built with: the API, the settings, Events and metrics."""

from __future__ import annotations

import dataclasses

from kubecontrol import events, kubeapi
from managers import metrics, settings


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    api: kubeapi.KubeApi
    settings: settings.ManagerSettings
    recorder: events.Recorder
    metrics: metrics.Metrics
