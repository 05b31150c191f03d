"""CDI: one spec file per Configuration, and the container edits an Allocate answer carries.

Pure part: ``build_spec`` turns a Configuration's devices into a CDI 0.6.0
spec (kind ``akri.sh/<config>``, one device per Instance named by its hash,
the Configuration's brokerProperties as the top-level ``containerEdits``
object — Akri kept that as a list, which no CDI runtime accepts, reference
§6 [quirk]); ``allocation`` builds the env/mounts/device specs kubelet injects.

I/O part: ``write_spec`` / ``remove_spec`` run in the default executor, write
atomically (temp file in the same directory, fsync, rename, fsync the
directory) so a container runtime never reads a half-written spec, and never
leave a stale temp file behind.

Secrets: a spec file is 0644 (container runtimes and ``cdi`` tools read it), so it
never carries a Secret's value. ``build_spec`` takes the values of the
Configuration's Secret-sourced discovery properties (``withheld``) and leaves out
every environment entry whose value contains one of them, or its base64 form; a
handler copying a password into a device property is the case. Nothing is lost:
Allocate answers (gRPC to kubelet, not on disk) still carry every variable.

Dangers: CDI names are stricter than Kubernetes names (a class must start
with a letter and contain no dots). A Configuration whose name is not a valid
CDI class gets no spec file (``valid_kind`` is False, the caller logs it); its
Allocate answers still carry env, mounts and device nodes. A spec with no
devices is invalid CDI, so the file is removed instead of written empty.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from discovery import devices
from discovery.agent import discovered, naming

CDI_VERSION = "0.6.0"

_CLASS_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
_DEVICE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


def valid_kind(configuration: str) -> bool:
    return _CLASS_RE.fullmatch(configuration) is not None


def spec_path(cdi_dir: Path, configuration: str) -> Path:
    return cdi_dir / f"{naming.AKRI_PREFIX}-{configuration}.json"


def secret_texts(values: Iterable[bytes]) -> tuple[str, ...]:
    """What a Secret's value may look like inside a property: as text and base64-encoded."""
    texts = set()
    for value in values:
        if value:
            texts.add(value.decode("utf-8", "replace"))
            texts.add(base64.b64encode(value).decode())
    return tuple(sorted(texts))


def _env(properties: Mapping[str, str], withheld: Collection[str] = ()) -> list[str]:
    return [
        f"{key}={value}"
        for key, value in sorted(properties.items())
        if not any(secret in value for secret in withheld)
    ]


def device_edits(device: devices.Device, withheld: Collection[str] = ()) -> dict[str, Any]:
    edits: dict[str, Any] = {}
    env = _env(device.properties, withheld)
    if env:
        edits["env"] = env
    if device.device_specs:
        edits["deviceNodes"] = [
            {"path": s.container_path, "hostPath": s.host_path, "permissions": s.permissions}
            for s in device.device_specs
        ]
    if device.mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro"] if m.read_only else [],
            }
            for m in device.mounts
        ]
    return edits


def build_spec(
    configuration: str,
    named: Iterable[discovered.NamedDevice],
    broker_properties: Mapping[str, str],
    withheld: Collection[str] = (),
) -> dict[str, Any] | None:
    """The CDI spec of one Configuration, or None when there is nothing valid to write.

    ``withheld``: texts (``secret_texts``) no environment value of the file may contain.
    """
    if not valid_kind(configuration):
        return None
    entries = [
        {"name": d.digest, "containerEdits": device_edits(d.device, withheld)}
        for d in sorted(named, key=lambda d: d.digest)
        if _DEVICE_RE.fullmatch(d.digest)
    ]
    if not entries:
        return None
    spec: dict[str, Any] = {
        "cdiVersion": CDI_VERSION,
        "kind": naming.cdi_kind(configuration),
        "devices": entries,
    }
    env = _env(broker_properties, withheld)
    if env:
        spec["containerEdits"] = {"env": env}
    return spec


@dataclasses.dataclass(frozen=True, slots=True)
class Allocation:
    """What one ContainerAllocateResponse carries for one device."""

    envs: dict[str, str]
    mounts: tuple[devices.Mount, ...]
    device_specs: tuple[devices.DeviceSpec, ...]
    cdi_name: str


def allocation(named: discovered.NamedDevice, broker_properties: Mapping[str, str]) -> Allocation:
    """Env is each property as ``K`` and ``K_<HASH>`` (Akri PR #710), device properties first,
    the Configuration's brokerProperties overriding them."""
    suffix = naming.env_suffix(named.digest)
    envs: dict[str, str] = {}
    for key, value in [*named.device.properties.items(), *broker_properties.items()]:
        envs[key] = value
        envs[f"{key}_{suffix}"] = value
    return Allocation(
        envs=envs,
        mounts=named.device.mounts,
        device_specs=tuple(
            devices.DeviceSpec(s.container_path, s.host_path or s.container_path, s.permissions)
            for s in named.device.device_specs
        ),
        cdi_name=named.cdi_name,
    )


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def encode(spec: Mapping[str, Any]) -> bytes:
    return (json.dumps(spec, indent=2, sort_keys=False) + "\n").encode()


async def write_spec(path: Path, spec: Mapping[str, Any]) -> bool:
    """Write ``spec`` unless the file already holds exactly it; True when written."""
    loop = asyncio.get_running_loop()
    data = encode(spec)
    if await loop.run_in_executor(None, _read, path) == data:
        return False
    await loop.run_in_executor(None, _write_atomically, path, data)
    return True


async def remove_spec(path: Path) -> None:
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: path.unlink(missing_ok=True))
