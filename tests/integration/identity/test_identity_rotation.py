"""Rotation: both certificates renewed again and again while requests flow through both
ports, with zero failed requests; and the pair files at every crash point of a rotation."""

from __future__ import annotations

import asyncio
import datetime
import os
import pathlib
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from identity_support import NODE, get, hub_settings, running, serving_serial, trusting, until

from yurthub import settings
from yurthub.certs import csrs, layout, pemfiles
from yurthub.testing import joining, simapiserver
from yurthub.testing.sim import pki


@pytest.mark.slow
async def test_rotation_under_traffic(tmp_path: pathlib.Path) -> None:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
        token = joining.new_token()
        await admin.create_bootstrap_token(token)
        # 600 s certificates (the least the apiserver signs, the simulated one too) renewed
        # 598.5 s before they expire: a rotation about every 1.5 s.
        s = hub_settings(
            (sim.url,),
            tmp_path / "root",
            token=token,
            pins=(joining.ca_pin(sim.ca_pem),),
            expiration_seconds=600,
            renew_before=598.5,
            # One loop answers for the simulated apiserver, the hub, the CSR approver and
            # three streams of traffic: on a loaded CI machine a renewal once went unanswered
            # for 1 s, the hub declared an outage and answered 502. What is under test is
            # rotation, not outage detection: three unanswered renewals of 3 s each.
            heartbeat=settings.HeartbeatSettings(
                interval=0.5, timeout=3.0, healthy_threshold=1, failed_retry=3
            ),
        )
        pod_token = sim.service_account_token("kube-system", "default")
        ca = trusting(sim.ca_pem)
        failures: list[str] = []
        serials: set[int] = set()
        # Per stream, the rotations done (both certificates) when each of its requests ended.
        under: dict[str, set[int]] = {
            "node": set(),
            "pod-new-connection": set(),
            "pod-keepalive": set(),
        }

        async def traffic(name: str, call: Callable[[], Any]) -> None:
            while True:
                try:
                    answer = await call()
                    if answer.status != 200:
                        failures.append(f"{name}: HTTP {answer.status} {answer.body}")
                except (aiohttp.ClientError, OSError) as e:
                    failures.append(f"{name}: {e!r}")
                assert hub.certs is not None
                under[name].add(sum(hub.certs.rotations.values()))
                await asyncio.sleep(0.02)

        async def watch_serials() -> None:
            while True:
                serials.add(await serving_serial(hub.secure_url, ca))
                await asyncio.sleep(0.1)

        async with joining.approving(admin, node_name=NODE), running(s) as hub:
            await until(lambda: hub.secure_url)
            assert hub.health is not None and hub.certs is not None and hub.upstream is not None
            await until(hub.health.any_healthy)
            pods = "/api/v1/namespaces/kube-system/pods"
            async with (
                aiohttp.ClientSession() as keepalive,
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh,
                asyncio.TaskGroup() as tg,
            ):
                tasks = [
                    tg.create_task(
                        traffic(
                            "node",
                            lambda: get(hub.proxy_url + pods, ua="kubelet/1.32", session=keepalive),
                        ),
                        name="node-traffic",
                    ),
                    tg.create_task(
                        traffic(
                            "pod-new-connection",
                            lambda: get(
                                hub.secure_url + pods, ctx=ca, token=pod_token, session=fresh
                            ),
                        ),
                        name="pod-traffic-fresh",
                    ),
                    tg.create_task(
                        traffic(
                            "pod-keepalive",
                            lambda: get(
                                hub.secure_url + pods, ctx=ca, token=pod_token, session=keepalive
                            ),
                        ),
                        name="pod-traffic-keepalive",
                    ),
                    tg.create_task(watch_serials(), name="serving-serials"),
                ]
                start = dict(hub.certs.rotations)
                try:
                    await until(
                        lambda: all(hub.certs.rotations[k] - start[k] >= 3 for k in start),  # type: ignore[union-attr]
                        timeout=30,
                        what="three rotations of each certificate",
                    )
                finally:
                    for task in tasks:
                        task.cancel()
            assert failures == []
            # Traffic ran across the rotations (at least 6 of them): each stream had requests
            # end under several different identities, however fast this machine is.
            assert all(len(seen) >= 4 for seen in under.values()), under
            assert len(serials) >= 3  # new connections saw the new serving certificates
            assert hub.upstream.reloads >= 3  # upstream requests went with the new client ones

            # Old files do not pile up. Rotations go on while we look: between writing a new
            # pair and pruning, one more file exists for a moment.
            def pruned() -> bool:
                names = os.listdir(tmp_path / "root" / "pki")
                return len(layout.stamped_of("yurthub", names)) <= 1 + layout.KEEP_PREVIOUS

            await until(pruned, timeout=5, what="old client pairs pruned")


class Crash(Exception):
    pass


def _pair(authority: pki.Authority, cn: str) -> bytes:
    key = csrs.new_key()
    shape = csrs.client_shape(cn)
    cert = authority.sign_request(csrs.request_pem(shape, key))
    return csrs.pair_pem(cert, key)


def test_a_crash_at_any_point_of_a_rotation_leaves_a_working_pair(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    authority = pki.Authority.create()
    old, new = _pair(authority, "old"), _pair(authority, "new")
    calls: list[str] = []
    crash_at: list[int] = [-1]
    patched = {
        "write": os.write,
        "fsync": os.fsync,
        "symlink": os.symlink,
        "replace": os.replace,
        "unlink": os.unlink,
    }

    def wrap(name: str) -> Callable[..., Any]:
        real = patched[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            if len(calls) - 1 == crash_at[0]:
                raise Crash(name)
            return real(*args, **kwargs)

        return call

    now = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
    step = 0
    while True:
        pki_dir = tmp_path / f"run{step}" / "pki"
        pemfiles.write_pair(pki_dir, "yurthub", old, now)
        for name in patched:
            monkeypatch.setattr(os, name, wrap(name))
        calls.clear()
        crash_at[0] = step
        try:
            pemfiles.write_pair(pki_dir, "yurthub", new, now + datetime.timedelta(seconds=1))
            crashed = False
        except Crash:
            crashed = True
        finally:
            monkeypatch.undo()
        current = pemfiles.load_pair(pki_dir / "yurthub-current.pem")
        assert current.common_name in ("system:node:old", "system:node:new"), step
        if not crashed:
            assert current.common_name == "system:node:new"
            break
        # After the crash, the next rotation works and cleans up.
        pemfiles.write_pair(pki_dir, "yurthub", new, now + datetime.timedelta(seconds=2))
        assert pemfiles.load_pair(pki_dir / "yurthub-current.pem").common_name == "system:node:new"
        step += 1
    assert step >= 5  # every step of the rotation was a crash point once
