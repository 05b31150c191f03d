"""The installed ``edgehub hub`` started with an OpenYurt node's YurtHub static Pod arguments
(what ``yurtadm join`` writes), plus every other YurtHub option and klog's, in pflag spelling
(``yurthub-behaviour.md`` §1.2): it joins with the bootstrap file, serves, and names the options
it does not build in one warning; none is silently ignored, none is refused."""

from __future__ import annotations

import asyncio
import base64
import pathlib
import sys

import aiohttp
import pytest

from yurthub.testing import joining, processes, simapiserver

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "edge-1"
pytestmark = pytest.mark.slow

# What an OpenYurt node's /etc/kubernetes/manifests/yurthub.yaml runs (yurtadm join's template,
# the values filled in), paths and all.
STATIC_POD = [
    "--v=2",
    "--bind-address=127.0.0.1",
    "--server-addr={server}",
    "--node-name=" + NODE,
    "--bootstrap-file={root}/bootstrap-hub.conf",
    "--working-mode=edge",
    "--namespace=kube-system",
    "--enable-dummy-if=false",  # true on a node; the interface needs NET_ADMIN (own test)
    "--enable-node-pool=true",
    "--nodepool-name=hangzhou",
]
# Every other option of `yurthub` (and the klog flags it registers), as an operator may have
# added them; ports 0 so the test can run anywhere.
EVERY_OTHER = [
    "--serve-port=0",
    "--bind-proxy-address=127.0.0.1",
    "--proxy-port=0",
    "--proxy-secure-port=0",
    "--multiplexer-port=10269",
    "--hub-cert-organizations=",
    "--gc-frequency=120",
    "--node-ip=127.0.0.1",
    "--lb-mode=rr",
    "--heartbeat-failed-retry=3",
    "--heartbeat-healthy-threshold=2",
    "--heartbeat-timeout-seconds=2",
    "--heartbeat-interval-seconds=1",
    "--max-requests-in-flight=250",
    "--bootstrap-mode=token",
    "--root-dir={root}",
    "--profiling=true",
    "--enable-iptables=false",
    "--dummy-if-ip=169.254.2.1",
    "--dummy-if-name=hub-dummy0",
    "--disk-cache-path={cache}",
    "--enable-resource-filter=true",
    "--disabled-resource-filters=",
    "--kubelet-health-grace-period=40s",
    "--enable-pool-service-topology=false",
    "--min-request-timeout=1800s",
    "--discovery-token-unsafe-skip-ca-verification=false",
    "--host-control-plane-address=",
    "--pool-scope-resources=/v1/services,discovery.k8s.io/v1/endpointslices",
    "--logtostderr=true",
    "--alsologtostderr=false",
    "--log-dir=",
    "--log-file=",
    "--log-file-max-size=1800",
    "--log-flush-frequency=5s",
    "--stderrthreshold=2",
    "--vmodule=",
    "--add-dir-header=false",
    "--skip-headers=false",
    "--skip-log-headers=false",
    "--one-output=false",
]
NOT_BUILT = (
    "--gc-frequency, --profiling, --enable-iptables, "
    "--host-control-plane-address, --logtostderr, --alsologtostderr, "
    "--log-dir, --log-file, --log-file-max-size, --log-flush-frequency, --stderrthreshold, "
    "--vmodule, --add-dir-header, --skip-headers, --skip-log-headers, --one-output"
)


def _bootstrap_file(path: pathlib.Path, sim: simapiserver.SimApiserver, token: str) -> None:
    ca = base64.b64encode(sim.ca_pem).decode()
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{sim.url}',"
        f" certificate-authority-data: {ca}}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: bootstrap}}]\ncurrent-context: c\n"
        f"users: [{{name: bootstrap, user: {{token: '{token}'}}}}]\n"
    )
    path.chmod(0o600)


async def test_an_openyurt_static_pods_arguments_start_the_hub(tmp_path: pathlib.Path) -> None:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
        token = joining.new_token()
        await admin.create_bootstrap_token(token)
        root = tmp_path / "yurthub"
        root.mkdir()
        _bootstrap_file(root / "bootstrap-hub.conf", sim, token)
        values = {"server": sim.url, "root": str(root), "cache": str(tmp_path / "cache")}
        args = [a.format(**values) for a in STATIC_POD + EVERY_OTHER]
        log = tmp_path / "hub.log"
        async with joining.approving(admin, node_name=NODE):
            with log.open("wb") as err:
                proc = await asyncio.create_subprocess_exec(
                    EDGEHUB, "hub", *args, stdout=asyncio.subprocess.PIPE, stderr=err
                )
            try:
                assert proc.stdout is not None
                try:
                    fields = await processes.read_announcement(
                        proc.stdout, "EDGEHUB_HUB_LISTENING", 30
                    )
                except (TimeoutError, processes.ProcessError) as e:
                    raise AssertionError(log.read_text()[-3000:]) from e
                async with aiohttp.ClientSession() as s, asyncio.timeout(30):
                    while True:  # the client certificate is requested, approved, signed
                        async with s.get(fields["server"] + "/v1/readyz") as r:
                            if r.status == 200:
                                break
                        await asyncio.sleep(0.2)
                    async with s.get(
                        fields["proxy"] + "/api/v1/namespaces/kube-system/configmaps",
                        headers={"User-Agent": "kubelet/v1.37"},
                    ) as r:
                        assert r.status == 200, (await r.text()) + log.read_text()[-3000:]
                    async with s.get(fields["server"] + "/v1/status") as r:
                        status = await r.json()
            finally:
                proc.terminate()
                await proc.wait()
        assert proc.returncode == 0
        text = log.read_text()
        assert f"ignoring YurtHub flags this hub does not implement: {NOT_BUILT}" in text
        assert text.count("does not implement") == 1
        assert "Traceback" not in text and "No such option" not in text
        # The flags took effect: YurtHub's files under --root-dir, the pool, the identity.
        assert (root / "pki" / "yurthub-current.pem").exists()
        assert status["pool"]["nodePool"] == "hangzhou"
        client = next(c for c in status["certificates"] if c["name"] == "client")
        assert client["subject"].startswith(f"CN=system:node:{NODE}")
