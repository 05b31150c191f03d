"""Appends to an offline Event journal until killed (test_cache_event_journal's kill -9).

Usage: ``python event_journal_writer.py DIR``; prints ``wrote`` after each append or fold.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys

from yurthub.cache import eventfolding, eventjournal


async def main(directory: pathlib.Path) -> None:
    journal = await eventjournal.open_journal(
        directory, eventfolding.Bounds(events=50), clock=lambda: 0.0
    )
    i = 0
    while True:
        name = f"e{i}"
        await journal.create(
            eventfolding.CORE,
            "default",
            {
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": f"p{i % 70}"},
                "reason": "R",
                "message": "x" * (i % 500),
                "count": 1,
            },
        )
        await journal.patch(eventfolding.CORE, "default", name, {"count": 2})
        i += 1
        sys.stdout.write("wrote\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(pathlib.Path(sys.argv[1])))
