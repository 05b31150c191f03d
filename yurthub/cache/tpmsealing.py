"""The cache's key-encrypting key sealed to the node's TPM 2.0 (``--cache-key-source tpm``).

BLOCKING: runs ``tpm2-tools`` (``tpm2_createprimary``, ``tpm2_create``, ``tpm2_load``,
``tpm2_unseal``, ``tpm2_flushcontext``) as subprocesses; call from the cache's open executor.
The tools come from the distribution (Debian's ``tpm2-tools``); no Python binding is needed.

A random 32-byte KEK is sealed as a keyed-hash data object under a primary key of the owner
hierarchy (ECC P-256, SHA-256, the tools' default template, so the same TPM derives the same
primary each time and nothing is kept persistent in the TPM). The object's public and private
blobs sit beside the cache (``cache.tpm.pub``, ``cache.tpm.priv``, 0600): the private part is
encrypted by the TPM and loads only on the TPM that made it. A cache directory copied to
another machine therefore carries nothing that opens there.

Invariants: the KEK passes only through pipes (stdin of ``tpm2_create``, stdout of
``tpm2_unseal``), never a file or an argument; context files live in a private temporary
directory removed afterwards; every transient object is flushed (a TPM without a resource
manager, as ``swtpm`` in the tests, holds only three).

Dangers: an owner hierarchy with a password set is not supported (the tools then fail: a clear
error). ``tpm2_flushcontext -t`` flushes every transient object of the connection: with the
kernel's resource manager (``/dev/tpmrm0``) that is only ours.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping

from yurthub import atomicfiles
from yurthub.cache import sealing

PUBLIC = "cache.tpm.pub"
PRIVATE = "cache.tpm.priv"
DEVICE = pathlib.Path("/dev/tpmrm0")
DEVICE_TCTI = f"device:{DEVICE}"
_TIMEOUT = 30.0


class TpmError(sealing.KeySourceError):
    """The TPM, or its tools, cannot be used."""


class TpmUnsealable(TpmError):
    """Sealed blobs exist but do not load or unseal on this TPM (another machine's)."""


def present(environ: Mapping[str, str]) -> str:
    """The TCTI ``auto`` would use: ``$TPM2TOOLS_TCTI`` or the kernel's resource manager when
    there is one and the tools are installed; "" otherwise."""
    if shutil.which("tpm2_unseal") is None:
        return ""
    if environ.get("TPM2TOOLS_TCTI"):
        return environ["TPM2TOOLS_TCTI"]
    return DEVICE_TCTI if DEVICE.exists() else ""


def has_blobs(directory: pathlib.Path) -> bool:
    return (directory / PUBLIC).exists() or (directory / PRIVATE).exists()


def kek(
    directory: pathlib.Path,
    tcti: str,
    random: Callable[[int], bytes],
    *,
    create: bool = True,
) -> bytes:
    """The KEK sealed by the TPM at ``tcti`` for the cache at ``directory``: unsealed from its
    blobs, or (``create``, no blobs yet) made, sealed and its blobs written. Raises
    ``TpmUnsealable`` for blobs this TPM does not open, ``TpmError`` for a TPM or tools that
    cannot be used."""
    tcti = tcti or DEVICE_TCTI
    with tempfile.TemporaryDirectory(prefix="edgehub-tpm-") as work:
        tools = _Tools(pathlib.Path(work), tcti)
        public, private = directory / PUBLIC, directory / PRIVATE
        if public.exists() and private.exists():
            tools.primary()
            try:
                tools.run("tpm2_load", "-Q", "-C", "primary.ctx", "-u", str(public), "-r",
                          str(private), "-c", "sealed.ctx")  # fmt: skip
                tools.flush()
                key = tools.run("tpm2_unseal", "-c", "sealed.ctx")
            except TpmError as e:
                raise TpmUnsealable(f"the TPM at {tcti} does not open {private}: {e}") from e
            finally:
                tools.flush()
            if len(key) != sealing.KEY_BYTES:
                raise TpmUnsealable(f"{private} unseals to {len(key)} bytes, not 32")
            return key
        if has_blobs(directory):
            raise TpmUnsealable(f"only one of {PUBLIC}, {PRIVATE} is in {directory}")
        if not create:
            raise TpmError(f"{directory} holds no TPM-sealed key")
        key = random(sealing.KEY_BYTES)
        tools.primary()
        try:
            tools.run("tpm2_create", "-Q", "-C", "primary.ctx", "-i", "-", "-u", "sealed.pub",
                      "-r", "sealed.priv", stdin=key)  # fmt: skip
        finally:
            tools.flush()
        for name, target in (("sealed.pub", public), ("sealed.priv", private)):
            atomicfiles.write(target, (pathlib.Path(work) / name).read_bytes())
        return key


def remove_blobs(directory: pathlib.Path, suffix: str) -> None:
    """Move the blobs aside with the database they seal the key of."""
    for name in (PUBLIC, PRIVATE):
        source = directory / name
        if source.exists():
            source.rename(directory / f"{name}{suffix}")


class _Tools:
    def __init__(self, work: pathlib.Path, tcti: str) -> None:
        self.work = work
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TPM2TOOLS_TCTI": tcti}

    def run(self, *argv: str, stdin: bytes | None = None) -> bytes:
        try:
            done = subprocess.run(
                argv, input=stdin, capture_output=True, cwd=self.work, env=self.env,
                timeout=_TIMEOUT, check=False,
            )  # fmt: skip
        except FileNotFoundError as e:
            raise TpmError(
                f"{argv[0]} is not installed (Debian: apt-get install tpm2-tools)"
            ) from e
        except subprocess.TimeoutExpired as e:
            raise TpmError(f"{argv[0]} did not answer within {_TIMEOUT:.0f} s") from e
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln]
            raise TpmError(f"{argv[0]} failed: {lines[-1] if lines else done.returncode}")
        return done.stdout

    def primary(self) -> None:
        self.flush()
        try:
            self.run("tpm2_createprimary", "-Q", "-C", "o", "-g", "sha256", "-G", "ecc",
                     "-c", "primary.ctx")  # fmt: skip
        finally:
            self.flush()

    def flush(self) -> None:
        self.run("tpm2_flushcontext", "-t")
