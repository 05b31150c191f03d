"""``edgehub status``: one screen for an operator on the node.

Reads the hub's ``GET /v1/status`` on its serve port (``--server``, 127.0.0.1:10267) and the
discovery agent's ``GET /status`` on its metrics port (``--agent``: the first of
127.0.0.1:10270, the DaemonSet's, and 127.0.0.1:8080, Akri's ``METRICS_PORT`` default that a
hand-run ``edgehub agent`` keeps, that answers; skipped when the hub runs the agent itself with
``--enable-discovery``), and shows
each apiserver's health and last error, the cache's size and the age of each component's newest
list, the certificates and their expiry, the response filters (and those kept off, with why),
the pool leader, the outage going on and the last one, the discovery handlers and devices.
``-o json`` prints both documents as one JSON object.

``--history`` shows the hub's outage history instead (``GET /v1/outages``): a row per outage
(when, how long, cause, what was answered and refused locally, tokens issued, whether the
Node Event was posted) and the newest one in detail; ``-o json`` prints that document.

Exit status: 0 when the hub answered and is ready (``--history``: when it answered), 1 when it
is not ready or did not answer (the screen says why). Read-only: it only sends GETs to loopback
ports.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import click

from edgehub import cli, helpgroups, outagetext, statustext

TIMEOUT = 5.0


def _get(url: str) -> tuple[dict[str, Any] | None, str]:
    """(document, "") or (None, why not)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
            body = resp.read(16 << 20)
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            said = e.read(1024).decode("utf-8", "replace").strip()  # e.g. why a 403
        if e.code == 404:
            return None, "HTTP 404 (an edgehub older than this command, or not edgehub?)"
        return None, f"HTTP {e.code}: {said.splitlines()[0][:200]}" if said else f"HTTP {e.code}"
    except urllib.error.URLError as e:
        reason = e.reason
        text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
        return None, text[:1].lower() + text[1:]
    except (TimeoutError, OSError) as e:
        return None, f"no answer within {TIMEOUT:g} s" if isinstance(e, TimeoutError) else str(e)
    try:
        document = json.loads(body)
    except ValueError:
        return None, "the answer is not JSON"
    if not isinstance(document, dict):
        return None, "the answer is not a JSON object"
    return document, ""


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url if "://" in url else f"http://{url}"


def _first_agent(candidates: str) -> tuple[dict[str, Any] | None, str, str]:
    """(document, source, "") from the first of the comma-separated agent URLs that answers,
    else (None, source, each one's problem)."""
    urls = [_base(url) for url in candidates.split(",") if url.strip()]
    problems = []
    for url in urls:
        document, problem = _get(url + "/status")
        if document is not None:
            return document, f"agent {url}", ""
        problems.append(f"{url}: {problem}" if len(urls) > 1 else problem)
    return None, f"agent {' or '.join(urls)}", "; ".join(problems)


def collect(server: str, agent: str) -> dict[str, Any]:
    """Both documents (blocking: two GETs with a timeout each)."""
    hub_url = _base(server)
    hub, hub_problem = _get(hub_url + "/v1/status")
    agent_doc: dict[str, Any] | None = None
    agent_problem = ""
    if hub is not None and isinstance(hub.get("discovery"), dict):
        agent_doc, agent_source = hub["discovery"], "in the hub (--enable-discovery)"
    elif agent:
        agent_doc, agent_source, agent_problem = _first_agent(agent)
    else:
        agent_source = "not asked (--agent '')"
    return {
        "hub": hub,
        "hub_url": hub_url,
        "hub_problem": hub_problem,
        "agent": agent_doc,
        "agent_source": agent_source,
        "agent_problem": agent_problem,
    }


def screen(found: dict[str, Any]) -> str:
    return statustext.render(
        found["hub"],
        found["hub_url"],
        time.time(),
        hub_problem=found["hub_problem"],
        agent=found["agent"],
        agent_source=found["agent_source"],
        agent_problem=found["agent_problem"],
    )


def show_history(server: str, output: str) -> None:
    url = _base(server)
    document, problem = _get(url + "/v1/outages")
    if output == "json":
        shown = document if document is not None else {"error": problem, "url": url}
        click.echo(json.dumps(shown, indent=2))
    else:
        click.echo(outagetext.history(document, url, problem), nl=False)
    if document is None:
        raise SystemExit(1)


@click.command(cls=helpgroups.Command, topics="status", context_settings=cli.COMMAND_CONTEXT)
@click.option(
    "--server",
    default="http://127.0.0.1:10267",
    help="The hub's serve port (--bind-address:--serve-port of `edgehub hub`).",
)
@click.option(
    "--agent",
    default="http://127.0.0.1:10270,http://127.0.0.1:8080",
    help="The discovery agent's metrics port (its --metrics-address:--metrics-port): the first "
    "of these comma-separated URLs that answers (the DaemonSet's 10270, a hand-run agent's "
    "8080); '' skips it.",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option(
    "--history",
    is_flag=True,
    help="Show the hub's outage history (GET /v1/outages): when each outage began and ended, "
    "its cause, what the hub answered and refused locally per component and verb, the tokens "
    "it issued, whether the Node Event was posted.",
)
def command(server: str, agent: str, output: str, history: bool) -> None:
    """One screen for an operator on the node: apiservers, cache, certificates, pool, outages,
    devices."""
    if history:
        show_history(server, output)
        return
    found = collect(server, agent)
    hub = found["hub"]
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "hub": hub
                    if hub is not None
                    else {"error": found["hub_problem"], "url": found["hub_url"]},
                    "discovery": found["agent"]
                    if found["agent"] is not None
                    else {"error": found["agent_problem"] or found["agent_source"]},
                },
                indent=2,
            )
        )
    else:
        click.echo(screen(found), nl=False)
    if hub is None or not hub.get("ready"):
        raise SystemExit(1)
