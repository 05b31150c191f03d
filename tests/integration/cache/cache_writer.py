"""A cache writer for the kill -9 test: list replacements and watch events, as fast as it can.

``python cache_writer.py <cache dir> <pods>``: opens the store and loops forever. Generation N
replaces list ``kubelet/pods.v1.core?fieldSelector=spec.nodeName=n1`` with ``pods`` pods all
labelled ``gen=N`` (every other generation drops a few and adds a few), then applies watch
MODIFIED events that keep the label. It prints ``ready`` once the first generation is on disk,
and resumes from what an earlier (killed) run left.
A list seen after a crash must therefore be one generation, whole.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
from typing import Any

import orjson

from yurthub.cache import keys, store

SCOPE = keys.Scope("kubelet", "pods", "v1")
LIST = keys.list_key(SCOPE, "", "", "spec.nodeName=n1")


def pod(name: str, gen: int, rv: int, note: str = "") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": "default",
            "resourceVersion": str(rv),
            "labels": {"gen": str(gen)},
            "annotations": {"note": note},
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x" * 200}]},
    }


async def main(path: pathlib.Path, count: int) -> None:
    s = await store.Store.open(path)
    # Resume after the last crash: newer versions and a new generation, like a relist would.
    record = s.list_record(LIST)
    rv = record.rv + 1 if record is not None else 1
    gen = max((int((e.labels or {}).get("gen", 0)) for _, e in s.objects(SCOPE)), default=0)
    ready = False
    while True:
        gen += 1
        shift = gen % 2 * 5
        items = []
        for i in range(shift, count + shift):
            rv += 1
            items.append(pod(f"p{i:05}", gen, rv))
        body = orjson.dumps(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            }
        )
        s.submit(store.PutList(LIST, body))
        for i in range(0, count, 7):
            rv += 1
            line = orjson.dumps(
                {"type": "MODIFIED", "object": pod(f"p{i + shift:05}", gen, rv, "w")}
            )
            s.submit(store.WatchLines(LIST, (line,)))
        await s.flush()
        if not ready:
            ready = True
            print("ready", flush=True)


if __name__ == "__main__":
    asyncio.run(main(pathlib.Path(sys.argv[1]), int(sys.argv[2])))
