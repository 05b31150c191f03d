"""``edgehub rollout``: where a YurtStaticSet rollout stands per pool, and the operator's levers
(undo, resume, pause, history). Cloud side: it talks to the apiserver with a kubeconfig.

* ``status``: per YurtStaticSet and pool, the nodes total/upgraded/ready/pending/offline/
  failed, the current template hash and whether the rollout is halted and why
  (``managers.staticsetsummaries``); ``-o json`` for scripts. Totals match ``kubectl get yss``.
* ``undo``: writes an earlier template (``--to-revision N``, else the newest other one; the
  ControllerRevisions the controller records) back into ``spec.template``; the controller
  rolls it out by the same strategy. A halt of the current template no longer applies.
* ``resume``: removes the halt annotation (the controller deletes the workers that halted it
  and goes on). ``pause``: writes one (no worker is started until resumed).
* ``history``: the recorded revisions.

A YurtStaticSet is named (``NAME``, ``-n`` when the name is in several namespaces) or found by
pool (``--pool``: labelled ``apps.openyurt.io/nodepool=<pool>``, as the chart labels its
per-pool YurtStaticSets). Writes are conditional (``resourceVersion``): a concurrent change
is a clear error, never overwritten. Bad input or an unreachable apiserver exits 3 with one
line; a refused write exits 1.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import click

from edgehub import cli, helpgroups
from kubecontrol import kubeapi
from managers import staticsethalts, staticsetplanning, staticsetrevisions, staticsetsummaries

EXIT_REFUSED = 1
USER_AGENT = "edgehub-rollout"
YSS = staticsetplanning.YURT_STATIC_SETS


class Refused(Exception):
    """The apiserver refused a write (or there was nothing to do that the user asked for)."""


def _fail(message: str, code: int = cli.EXIT_STARTUP_FAILURE) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


def _default_kubeconfig() -> Path | None:
    home = Path.home() / ".kube" / "config"
    return home if home.is_file() else None


def _run(kubeconfig: Path | None, work: Any) -> Any:
    """Run ``work(api)`` against the apiserver of ``kubeconfig``; errors become one line."""
    if kubeconfig is None:
        kubeconfig = _default_kubeconfig()
    if kubeconfig is None or not kubeconfig.is_file():
        _fail("no kubeconfig: give --kubeconfig (or set KUBECONFIG)")

    async def main() -> Any:
        client = await kubeapi.connect(None, kubeconfig, USER_AGENT)
        try:
            return await work(kubeapi.KubeApi(client))
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except Refused as e:
        _fail(str(e), EXIT_REFUSED)
    except kubeapi.Conflict as e:
        _fail(f"{e} (changed meanwhile: run it again)", EXIT_REFUSED)
    except kubeapi.KubeError as e:
        _fail(str(e))


async def _select(
    api: kubeapi.KubeApi, name: str | None, namespace: str | None, pool: str | None
) -> list[dict[str, Any]]:
    """The YurtStaticSets named, or of the pool; Refused when none (or several by name)."""
    if (name is None) == (pool is None):
        raise Refused("name a YurtStaticSet or give --pool (one of them)")
    if name is not None:
        if namespace:
            found = await api.get_or_none(YSS, namespace, name)
            if found is None:
                raise Refused(f"no YurtStaticSet {namespace}/{name}")
            return [found]
        items = (await api.list(YSS, field_selector=f"metadata.name={name}")).items
        if not items:
            raise Refused(f"no YurtStaticSet named {name} in any namespace")
        if len(items) > 1:
            where = ", ".join(str(i["metadata"].get("namespace")) for i in items)
            raise Refused(f"YurtStaticSet {name} is in several namespaces ({where}): give -n")
        return items
    label = f"{staticsetsummaries.POOL_LABEL}={pool}"
    items = (await api.list(YSS, namespace or None, label_selector=label)).items
    if not items:
        raise Refused(
            f"no YurtStaticSet labelled {label}: name it (edgehub rollout ... NAME -n NAMESPACE)"
        )
    return sorted(items, key=lambda i: (i["metadata"].get("namespace"), i["metadata"]["name"]))


def _typed(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {**obj, "apiVersion": YSS.api_version, "kind": staticsetplanning.KIND}


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _selection(func: Any) -> Any:
    for option in reversed(
        (
            click.argument("name", required=False),
            click.option("-n", "--namespace", default=None, help="The YurtStaticSet's namespace."),
            click.option(
                "--pool",
                default=None,
                help="Every YurtStaticSet labelled apps.openyurt.io/nodepool=<pool>.",
            ),
            click.option(
                "--kubeconfig",
                type=click.Path(dir_okay=False, path_type=Path),
                default=None,
                envvar=["EDGEHUB_KUBECONFIG", "KUBECONFIG"],
                help="The cluster's kubeconfig (default: ~/.kube/config).",
            ),
        )
    ):
        func = option(func)
    return func


@click.group(
    "rollout", cls=helpgroups.Group, topics="rollout", context_settings=cli.COMMAND_CONTEXT
)
def command() -> None:
    """Where YurtStaticSet rollouts stand per pool; undo, resume, pause (docs/rollout.md)."""


@command.command(
    "status", cls=helpgroups.Command, topics="rollout status", context_settings=cli.COMMAND_CONTEXT
)
@click.option("--pool", default=None, help="Only this pool's rows.")
@click.option(
    "-n", "--namespace", default=None, help="Only this namespace (default: all namespaces)."
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", help="Format."
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar=["EDGEHUB_KUBECONFIG", "KUBECONFIG"],
    help="The cluster's kubeconfig (default: ~/.kube/config).",
)
def status(pool: str | None, namespace: str | None, output: str, kubeconfig: Path | None) -> None:
    """Per YurtStaticSet and pool: nodes total/upgraded/ready/pending/offline/failed, the
    current template hash, and whether the rollout is halted and why."""

    async def work(api: kubeapi.KubeApi) -> list[staticsetsummaries.Row]:
        sets = (await api.list(YSS, namespace or None)).items
        nodes = {n["metadata"]["name"]: n for n in (await api.list(kubeapi.NODES)).items}
        rows: list[staticsetsummaries.Row] = []
        pods_of: dict[str, list[dict[str, Any]]] = {}
        for obj in sorted(sets, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
            ns = obj["metadata"]["namespace"]
            if ns not in pods_of:
                pods_of[ns] = (await api.list(kubeapi.PODS, ns)).items
            rows += staticsetsummaries.summarize(obj, pods_of[ns], nodes.get)
        return [r for r in rows if pool is None or r.pool == pool]

    rows: list[staticsetsummaries.Row] = _run(kubeconfig, work)
    if output == "json":
        click.echo(json.dumps({"items": [r.as_json() for r in rows]}, indent=2))
        return
    if not rows:
        click.echo("No YurtStaticSets found.")
        return
    header = ("NAMESPACE", "YURTSTATICSET", "POOL", "TOTAL", "UPGRADED", "READY", "PENDING",
              "OFFLINE", "FAILED", "HASH", "STATE")  # fmt: skip
    table = [header] + [
        (r.namespace, r.name, r.pool or "-", str(r.total), str(r.upgraded), str(r.ready),
         str(r.pending), str(r.offline), str(r.failed), r.hash or "-", r.state)
        for r in rows
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        click.echo("   ".join([*cells, row[-1]]))


@command.command(
    "history",
    cls=helpgroups.Command,
    topics="rollout history",
    context_settings=cli.COMMAND_CONTEXT,
)
@_selection
def history(
    name: str | None, namespace: str | None, pool: str | None, kubeconfig: Path | None
) -> None:
    """The templates recorded for a YurtStaticSet (what ``undo`` can go back to)."""

    async def work(api: kubeapi.KubeApi) -> list[tuple[dict[str, Any], list[Any]]]:
        out = []
        for obj in await _select(api, name, namespace, pool):
            out.append((obj, await _revisions(api, obj)))
        return out

    for obj, revisions in _run(kubeconfig, work):
        current = staticsetplanning.template_hash((obj.get("spec") or {}).get("template") or {})
        click.echo(f"{_where(obj)}:")
        click.echo("  REVISION   HASH         CURRENT   IMAGES")
        for r in revisions:
            mark = "*" if r.hash == current else ""
            click.echo(
                f"  {r.number:<10} {r.hash:<12} {mark:<9} {staticsetrevisions.images(r.template)}"
            )
        if not revisions:
            click.echo("  (none recorded yet: the controller records each template it rolls out)")


async def _revisions(
    api: kubeapi.KubeApi, obj: Mapping[str, Any]
) -> list[staticsetrevisions.Revision]:
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    listed = await api.list(
        staticsetrevisions.CONTROLLER_REVISIONS,
        str(meta.get("namespace") or ""),
        label_selector=f"{staticsetrevisions.UID_LABEL}={uid}",
    )
    return staticsetrevisions.owned(listed.items, uid)


@command.command(
    "undo", cls=helpgroups.Command, topics="rollout undo", context_settings=cli.COMMAND_CONTEXT
)
@_selection
@click.option(
    "--to-revision",
    type=click.IntRange(min=1),
    default=None,
    help="The revision to go back to (edgehub rollout history); default: the newest other one.",
)
def undo(
    name: str | None,
    namespace: str | None,
    pool: str | None,
    kubeconfig: Path | None,
    to_revision: int | None,
) -> None:
    """Roll a YurtStaticSet (every one of a pool with --pool) back to an earlier template: it
    is written into spec.template and rolled out by the same strategy."""

    async def work(api: kubeapi.KubeApi) -> list[str]:
        said = []
        chosen = await _select(api, name, namespace, pool)
        targets = []
        for obj in chosen:  # every one checked before any is written
            current = staticsetplanning.template_hash((obj.get("spec") or {}).get("template") or {})
            picked = staticsetrevisions.previous(await _revisions(api, obj), current, to_revision)
            if isinstance(picked, str):
                raise Refused(f"{_where(obj)}: {picked}")
            targets.append((obj, picked))
        for obj, picked in targets:
            meta = obj["metadata"]
            body = _typed({**obj, "spec": {**obj["spec"], "template": dict(picked.template)}})
            await api.replace(YSS, meta["namespace"], meta["name"], body)
            said.append(
                f"{_where(obj)}: rolling back to revision {picked.number} (hash {picked.hash}, "
                f"{staticsetrevisions.images(picked.template) or 'no image'})"
            )
        return said

    for line in _run(kubeconfig, work):
        click.echo(line)


@command.command(
    "resume", cls=helpgroups.Command, topics="rollout resume", context_settings=cli.COMMAND_CONTEXT
)
@_selection
def resume(
    name: str | None, namespace: str | None, pool: str | None, kubeconfig: Path | None
) -> None:
    """Let a halted rollout go on: the halt annotation is removed; the controller deletes the
    workers that halted it (a failed node is tried again) and starts the next nodes."""

    async def work(api: kubeapi.KubeApi) -> list[str]:
        said = []
        for obj in await _select(api, name, namespace, pool):
            halt = staticsethalts.read((obj.get("metadata") or {}).get("annotations"))
            if halt is None:
                said.append(f"{_where(obj)}: not halted")
                continue
            meta = obj["metadata"]
            await api.replace(
                YSS, meta["namespace"], meta["name"], _typed(staticsethalts.with_halt(obj, None))
            )
            said.append(f"{_where(obj)}: resumed (was halted: {halt.reason})")
        return said

    for line in _run(kubeconfig, work):
        click.echo(line)


@command.command(
    "pause", cls=helpgroups.Command, topics="rollout pause", context_settings=cli.COMMAND_CONTEXT
)
@_selection
@click.option("--reason", default="paused by edgehub rollout pause", help="Why (shown in status).")
def pause(
    name: str | None, namespace: str | None, pool: str | None, kubeconfig: Path | None, reason: str
) -> None:
    """Start no new node until resumed (workers already running finish)."""

    async def work(api: kubeapi.KubeApi) -> list[str]:
        said = []
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        halt = staticsethalts.Halt(
            hash=staticsethalts.ANY_HASH,
            reason=staticsethalts.PAUSED,
            message=reason[: staticsethalts.MAX_MESSAGE],
            since=now,
        )
        for obj in await _select(api, name, namespace, pool):
            meta = obj["metadata"]
            if staticsethalts.read(meta.get("annotations")) is not None:
                said.append(f"{_where(obj)}: halted already")
                continue
            await api.replace(
                YSS, meta["namespace"], meta["name"], _typed(staticsethalts.with_halt(obj, halt))
            )
            said.append(f"{_where(obj)}: paused")
        return said

    for line in _run(kubeconfig, work):
        click.echo(line)
