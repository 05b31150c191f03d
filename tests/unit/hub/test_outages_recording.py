"""What begins an outage (``outages.recording.Recorder``), fed as health feeds it: a hub still
joining (no identity, its probes not sent) has not lost the cloud; a probe that then fails for
a reason of the link begins the outage."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from yurthub import metrics
from yurthub.outages import causes, recording

SERVER = "https://10.0.0.1:6443"
T0 = 1_767_225_600.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def recorder() -> AsyncIterator[recording.Recorder]:
    made = recording.Recorder(None, metrics.Metrics(), clock=Clock())
    await made.open()
    yield made
    await made.close()


def joining(r: recording.Recorder) -> None:
    """The first probe round of a hub with no identity yet: not probed, so unhealthy."""
    r.failure(SERVER, causes.Cause.NO_IDENTITY, "not probed: the hub has no identity yet")
    r.cloud(False)


async def test_a_join_is_no_outage(recorder: recording.Recorder) -> None:
    joining(recorder)
    assert recorder.current is None
    recorder.cloud(True)  # the identity came, the probe passed
    assert recorder.current is None and recorder.last is None
    assert await recorder.unposted() == []
    assert recorder.last_outage() is None  # the Autonomy condition names none


async def test_a_link_failure_while_joining_begins_the_outage_with_its_cause(
    recorder: recording.Recorder,
) -> None:
    joining(recorder)
    recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
    outage = recorder.current
    assert outage is not None and outage.cause == "refused"
    assert outage.reason == f"{SERVER}: connection refused"
    assert outage.causes == {"refused": 1}
    recorder.cloud(True)
    assert recorder.last is outage and outage.ended is not None


async def test_a_link_failure_begins_the_outage_as_before(recorder: recording.Recorder) -> None:
    recorder.failure(SERVER, causes.Cause.SILENT, "no answer within 2 s")
    recorder.cloud(False)
    outage = recorder.current
    assert outage is not None and outage.cause == "silent" and outage.causes == {"silent": 1}
    recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
    assert recorder.current is outage and outage.causes == {"silent": 1, "refused": 1}
