"""The manager's reconcile counter writes every outcome of every followed controller from the
start: a series that first appears at 1 has no ``rate()``/``increase()``, so the alert on
reconcile errors would miss a controller's first error (and, with no error ever, its query
had no data at all)."""

from __future__ import annotations

from kubecontrol import controlling
from managers import metrics


async def _nothing(key: controlling.Key) -> None:
    return None


def test_every_outcome_is_written_from_the_start() -> None:
    collected = metrics.Metrics()
    collected.follow([controlling.Controller("brokers", _nothing)])
    text = collected.render().decode()
    for outcome in ("success", "requeue", "error"):
        assert (
            f'edgehub_manager_reconciles_total{{controller="brokers",outcome="{outcome}"}} 0.0'
            in text
        )
    assert metrics.OUTCOMES == ("success", "requeue", "error")
