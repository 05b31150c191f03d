"""Reading scrapes and docs/metrics.md's tables: {family: (type, label names)}, families named as
on their TYPE line (what a Prometheus query names)."""

from __future__ import annotations

import pathlib
import re

from prometheus_client import parser

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "metrics.md"

Families = dict[str, tuple[str, tuple[str, ...]]]


def _section(heading: str) -> str:
    return DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def doc_table(heading: str) -> Families:
    """The rows ``| `name` | type | `label`, ... |`` under ``## heading``."""
    rows: Families = {}
    for m in re.finditer(r"^\| `([a-z_:]+)` \| (\w+) \| ([^|]*)\|", _section(heading), re.M):
        rows[m[1]] = (m[2], tuple(sorted(re.findall(r"`(\w+)`", m[3]))))
    return rows


def doc_patterns(heading: str) -> list[str]:
    """The shell patterns of the rows ``| `go_*` | ... |`` under ``## heading``."""
    return re.findall(r"^\| `([a-z_:*]+)` \|", _section(heading), re.M)


def families(text: str) -> Families:
    """{exported family name: (type, label names)} of a scrape."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    labels: dict[str, set[str]] = {name: set() for name in types}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            owner = next(
                (n for n in (family.name, f"{family.name}_total", sample.name) if n in types), None
            )
            if owner is not None:
                labels[owner].update(k for k in sample.labels if k not in ("le", "quantile"))
    return {name: (kind, tuple(sorted(labels[name]))) for name, kind in types.items()}
