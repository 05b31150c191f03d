"""client-go's node informer (kubelet's: one node by field selector) through an outage.

The informer is ``tests/cluster/informer`` (client-go from the pinned modules, WatchListClient
on), run with ``--report-watch``: a line for every BOOKMARK read off the wire and for every
error its reflector meets. Offline, the hub holds the watch open with bookmarks; client-go
decodes each by its kind, and one it cannot decode (an empty kind) ends the watch with an
error at every bookmark. After the heal, the watch resumes upstream from the bookmarks'
version and sees what changed, with no error on the way. (The informer's own streaming list
left the hub a list record here; a watch with none is ``test_cache_watch_kinds``.)
"""

from __future__ import annotations

import asyncio
import pathlib

from cache_edge import NODE, Edge, edge_node

from yurthub.testing import partition

TIMEOUT = 60.0
"""The informer's own deadline for syncing and then for the label; it then says what failed."""
MARK = "edgehub.test/after-the-heal"
BOOKMARKS = 5
"""Offline bookmarks to read before the outage ends (the hub sends one every 0.3 s here)."""


class Lines:
    """The informer's stdout, a line at a time, kept whole for the failure message."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self.seen: list[str] = []

    async def until(self, wanted: str, count: int = 1) -> int:
        """Read until ``count`` lines starting with ``wanted`` came after the call; returns the
        index of the first line read by this call."""
        first, found = len(self.seen), 0
        while found < count:
            raw = await self._stream.readline()
            if not raw:
                raise AssertionError(f"the informer ended before {wanted!r}: {self.seen}")
            self.seen.append(raw.decode().strip())
            found += self.seen[-1].startswith(wanted)
        return first


async def test_a_node_informer_lives_through_an_outage_and_sees_the_change_after_it(
    informer: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    async with edge_node(tmp_path, agents=("kubectl", "informer")) as edge:
        await _informer_through_outage(informer, edge)


async def _informer_through_outage(informer: pathlib.Path, edge: Edge) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(informer), "--server", edge.url, "--resource", "nodes",
        "--field-selector", f"metadata.name={NODE}", "--wait-for-label", MARK,
        "--report-watch", "--timeout", f"{TIMEOUT:.0f}s",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    lines = Lines(proc.stdout)
    async with asyncio.TaskGroup() as tg:
        stderr = tg.create_task(proc.stderr.read(), name="informer-stderr")
        try:
            async with asyncio.timeout(2 * TIMEOUT + 30):
                await lines.until("SYNCED ")
                assert lines.seen[-1] == "SYNCED 1", lines.seen
                await edge.flush()  # what the informer read is on disk: the hub answers it
                await edge.cut(partition.Mode.REFUSE)
                offline = await lines.until("BOOKMARK", BOOKMARKS + 1)
                # From its first bookmark the hub held the watch: nothing may end it in error
                # from there on, offline or after the heal.
                held = offline + lines.seen[offline:].index("BOOKMARK")
                await edge.heal()
                node = edge.sim.state.get("nodes", None, NODE)
                node["metadata"].setdefault("labels", {})[MARK] = "yes"
                node["metadata"].pop("resourceVersion", None)
                edge.sim.state.update(node)
                await lines.until("EVENT LABELED ")
                assert lines.seen[-1] == f"EVENT LABELED {NODE}", lines.seen
                errors = [line for line in lines.seen[held:] if line.startswith("WATCH-ERROR")]
                assert not errors, lines.seen
                rc = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    tail = "\n".join(stderr.result().decode(errors="replace").strip().splitlines()[-8:])
    assert rc == 0, f"{lines.seen}\n{tail}"
