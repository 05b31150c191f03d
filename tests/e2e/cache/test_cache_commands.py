"""The installed ``edgehub cache`` and ``edgehub partition`` commands."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import pathlib
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import aiohttp
import diskcache
import orjson
import pytest

from tests.integration.identity import identity_keys
from yurthub.cache import keys, keysealing, sealing, store
from yurthub.certs import layout, pemfiles, sealedkeys
from yurthub.testing import ports

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
POD = keys.Scope("kubelet", "pods", "v1")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EDGEHUB, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
async def cache_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "cache"
    s = await store.Store.open(path)
    items = [
        {
            "metadata": {"name": name, "namespace": "default", "resourceVersion": str(i + 1)},
            "spec": {"nodeName": "n1"},
        }
        for i, name in enumerate(["web-1", "a/b", "ünï"])
    ]
    body = orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "9"},
            "items": items,
        }
    )
    s.submit(store.PutList(keys.list_key(POD, "", "", "spec.nodeName=n1"), body))
    s.submit(
        store.PutDocument(keys.nonresource_key("/version"), "application/json", b'{"major":"1"}')
    )
    assert await s.flush(5)
    await s.close()
    return path


def test_ls_get_stats_verify(cache_dir: pathlib.Path) -> None:
    listed = run("cache", "ls", "--disk-cache-path", str(cache_dir))
    assert listed.returncode == 0, listed.stderr
    assert "kubelet/pods.v1.core/default/web-1 rv=1 owners=1" in listed.stdout
    assert "kubelet/pods.v1.core/default/a%2Fb" in listed.stdout
    assert "kubelet/pods.v1.core?fieldSelector=spec.nodeName%3Dn1 rv=9 members=3" in listed.stdout
    only = run("cache", "ls", "--disk-cache-path", str(cache_dir), "/")
    assert only.stdout.split() == ["document", only.stdout.split()[1], "/version"]

    got = run(
        "cache", "get", "--disk-cache-path", str(cache_dir), "kubelet/pods.v1.core/default/a%2Fb"
    )
    assert got.returncode == 0 and orjson.loads(got.stdout)["metadata"]["name"] == "a/b"
    got = run("cache", "get", "--disk-cache-path", str(cache_dir), "/version")
    assert orjson.loads(got.stdout) == {"major": "1"}
    record = run(
        "cache",
        "get",
        "--disk-cache-path",
        str(cache_dir),
        "kubelet/pods.v1.core?fieldSelector=spec.nodeName%3Dn1",
    )
    assert orjson.loads(record.stdout)["members"] == 3

    stats = run("cache", "stats", "--disk-cache-path", str(cache_dir))
    assert "objects:   3" in stats.stdout and "kubelet/pods.v1.core" in stats.stdout

    verified = run("cache", "verify", "--disk-cache-path", str(cache_dir))
    assert verified.returncode == 0 and verified.stdout.startswith(
        "ok: 3 objects, 1 lists, 1 documents"
    )


def test_verify_reports_problems_and_exits_1(cache_dir: pathlib.Path) -> None:
    raw = diskcache.Cache(str(cache_dir))
    raw.set("kubelet/pods.v1.core/default/web-1", b"EHC1garbage")
    raw.close()
    done = run("cache", "verify", "--disk-cache-path", str(cache_dir))
    assert done.returncode == 1
    assert "PROBLEM kubelet/pods.v1.core/default/web-1" in done.stdout
    assert "members" in done.stdout  # the list record no longer matches its objects
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("cache", "verify", "--disk-cache-path", "/nonexistent/cache"), 3, "holds no cache"),
        (("cache", "get", "KEY-NOT-THERE"), None, "no entry"),
        (("partition", "--upstream", "10.0.0.1:443"), 3, "not a loopback address"),
        (("partition", "--upstream", "nonsense"), 3, "is not HOST:PORT"),
    ],
)
def test_bad_input_is_one_clear_line(
    cache_dir: pathlib.Path, args: tuple[str, ...], code: int | None, message: str
) -> None:
    if args[1] == "get":
        args = (*args[:2], "--disk-cache-path", str(cache_dir), *args[2:])
    done = run(*args)
    assert done.returncode == (code if code is not None else 1)
    assert message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("which", ["--listen", "--control"])
def test_a_taken_port_names_the_listener_and_the_address(which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        free = ports.free_port()
        args = {"--listen": f"127.0.0.1:{free}", "--control": f"127.0.0.1:{free}"}
        args[which] = f"127.0.0.1:{port}"
        done = run(
            "partition", "--upstream", "127.0.0.1:1", *(a for kv in args.items() for a in kv)
        )
    what = {"--listen": "the link", "--control": "the control port"}[which]
    assert done.returncode == 3
    assert f"{what} cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [("ls",), ("stats",), ("verify",), ("get", "/version")])
def test_a_damaged_database_is_one_clear_line(
    tmp_path: pathlib.Path, args: tuple[str, ...]
) -> None:
    (tmp_path / store.DB_FILES[0]).write_bytes(b"not a database, " * 512)
    done = run("cache", *args, "--disk-cache-path", str(tmp_path))
    assert done.returncode == 1
    assert "is damaged" in done.stderr and "Traceback" not in done.stderr


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_partition_command_switches_modes(tmp_path: pathlib.Path) -> None:
    async with echo_server() as port:
        proc = await asyncio.create_subprocess_exec(
            EDGEHUB,
            "partition",
            "--upstream",
            f"127.0.0.1:{port}",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stdin is not None
        try:
            async with asyncio.timeout(20):
                line = (await proc.stdout.readline()).decode()
            assert line.startswith("partition listening=")
            listen = line.split("listening=")[1].split()[0]
            control = line.split("control=")[1].split()[0]
            host, lport = listen.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(lport))
            writer.write(b"ping")
            async with asyncio.timeout(2):
                assert await reader.readexactly(4) == b"ping"
            writer.close()
            async with aiohttp.ClientSession() as session:
                async with session.put(f"{control}/mode", params={"mode": "refuse"}) as resp:
                    assert resp.status == 200 and (await resp.json())["mode"] == "refuse"
                with pytest.raises(ConnectionRefusedError):
                    await asyncio.open_connection(host, int(lport))
                async with session.put(f"{control}/mode", params={"mode": "sideways"}) as resp:
                    assert resp.status == 400
                bad = {"mode": "flap", "interval": "0"}
                async with session.put(f"{control}/mode", params=bad) as resp:
                    assert resp.status == 400 and "interval" in await resp.text()
                proc.stdin.write(b"flap 0\nlatency 0.3\n")  # the bad line changes nothing
                await proc.stdin.drain()
                async with asyncio.timeout(5):
                    state = orjson.loads(await proc.stdout.readline())
                assert state["mode"] == "latency" and state["latency"] == 0.3
                async with session.get(f"{control}/mode") as resp:
                    assert (await resp.json())["mode"] == "latency"
                # A GET only reads: asked to switch, it says how, and switches nothing.
                async with session.get(f"{control}/mode", params={"mode": "pass"}) as resp:
                    assert resp.status == 405 and "PUT" in await resp.text()
                async with session.get(f"{control}/mode") as resp:
                    assert (await resp.json())["mode"] == "latency"
                # The demo's words: cut (blackhole) and heal (pass), on the port and on stdin.
                async with session.put(f"{control}/cut") as resp:
                    assert (await resp.json())["mode"] == "blackhole"
                async with session.put(f"{control}/heal") as resp:
                    assert (await resp.json())["mode"] == "pass"
                async with session.put(f"{control}/mode", params={"mode": "CUT"}) as resp:
                    assert (await resp.json())["mode"] == "blackhole"
                proc.stdin.write(b"heal\nwobble\n")
                await proc.stdin.drain()
                async with asyncio.timeout(5):
                    assert orjson.loads(await proc.stdout.readline())["mode"] == "pass"
                assert proc.stderr is not None
                async with asyncio.timeout(5):
                    while "wobble" not in (complaint := (await proc.stderr.readline()).decode()):
                        pass
                assert "unknown mode 'wobble'" in complaint and "cut, heal" in complaint
        finally:
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                await proc.wait()
            proc.stdin.close()
    assert proc.returncode == 0


async def test_sealed_cache_commands_need_the_key_and_report_tampering(
    tmp_path: pathlib.Path,
) -> None:
    kek = tmp_path / "kek"
    kek.write_bytes(bytes(range(32)))
    kek.chmod(0o600)
    source = sealing.Source(sealing.Kind.KEYFILE, kek)
    path = tmp_path / "cache"
    s = await store.Store.open(path, key_source=source)
    items = [{"metadata": {"name": "web-1", "namespace": "default", "resourceVersion": "1"}}]
    body = orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
    s.submit(store.PutList(keys.list_key(POD, "", "", ""), body))
    assert await s.flush(5)
    await s.close()
    key = "kubelet/pods.v1.core/default/web-1"
    flags = ("--disk-cache-path", str(path), "--cache-key-file", str(kek))

    refused = run("cache", "get", "--disk-cache-path", str(path), key)
    assert refused.returncode == 3 and "is sealed" in refused.stderr, refused
    got = run("cache", "get", *flags, key)
    assert got.returncode == 0 and orjson.loads(got.stdout)["metadata"]["name"] == "web-1"
    verified = run("cache", "verify", *flags)
    assert verified.returncode == 0 and verified.stdout.startswith("ok: 1 objects, 1 lists")

    rotated = run("cache", "rotate-key", *flags)
    assert rotated.returncode == 0 and "data key 2 is current" in rotated.stdout, rotated
    assert run("cache", "verify", *flags).returncode == 0  # key 1 still opens its entries

    # One flipped byte inside the sealed value: authentication fails, verify names the entry.
    with diskcache.Cache(str(path)) as raw:
        value = bytearray(raw._sql("SELECT value FROM Cache WHERE key = ?", (key,)).fetchone()[0])
        value[-1] ^= 0x01
        raw._sql("UPDATE Cache SET value = ? WHERE key = ?", (bytes(value), key))
    verified = run("cache", "verify", *flags)
    assert verified.returncode == 1
    assert f"PROBLEM {key}: sealed entry fails authentication" in verified.stdout, verified


async def test_unseal_identity_writes_the_keys_back_plain_for_yurthub(
    tmp_path: pathlib.Path,
) -> None:
    """Rolling back to YurtHub on a shared --root-dir: the hub's sealed keys written back as
    the plain PEM YurtHub reads, with the same key source the hub used."""
    kek = tmp_path / "kek"
    kek.write_bytes(bytes(range(32)))
    kek.chmod(0o600)
    path = tmp_path / "cache"
    await (
        await store.Store.open(path, key_source=sealing.Source(sealing.Kind.KEYFILE, kek))
    ).close()
    sealer = keysealing.read_sealer(path, sealing.Source(sealing.Kind.KEYFILE, kek), {})
    seal = sealedkeys.from_data_keys(sealer.keys, sealer.current)
    root = tmp_path / "root"
    chain, key = identity_keys.pair(5)
    now = datetime.datetime.now(datetime.UTC)
    pemfiles.write_pair(
        layout.Layout(root).pki, layout.CLIENT_PREFIX, sealedkeys.pair_pem(chain, key, seal), now
    )
    flags = ("--disk-cache-path", str(path), "--root-dir", str(root))

    refused = run("cache", "unseal-identity", *flags)
    assert refused.returncode == 3 and "is sealed" in refused.stderr, refused
    done = run("cache", "unseal-identity", *flags, "--cache-key-file", str(kek))
    assert done.returncode == 0, done
    assert "yurthub-current.pem: now plain PEM" in done.stdout
    assert "yurthub-server-current.pem: none" in done.stdout
    pair = pemfiles.load_pair(layout.Layout(root).client_pair)  # no key needed any more
    assert not pair.sealed and pair.certificate.serial_number == 5
    again = run("cache", "unseal-identity", *flags, "--cache-key-file", str(kek))
    assert "yurthub-current.pem: already plain PEM" in again.stdout
