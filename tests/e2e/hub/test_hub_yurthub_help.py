"""The real YurtHub v1.7.0 (``make yurthub-bin``): every flag its ``--help`` lists is in
``yurthubflags.json``, and ``edgehub hub`` accepts each one in the spelling YurtHub takes."""

from __future__ import annotations

import subprocess

import yurthub_support
from click import testing
from edgehub import hub, pflags, yurthubflags_generate


def test_every_flag_of_the_real_yurthub_is_in_the_table_and_accepted() -> None:
    binary = yurthub_support.path()
    text = subprocess.run(
        [str(binary), "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    listed = yurthubflags_generate.help_flags(text)
    assert {"server-addr", "node-name", "kubeconfig", "log-flush-frequency"} <= set(listed)
    table = pflags.load_table()["flags"]
    assert {name: table.get(name, {}).get("type") for name in listed} == listed
    samples = {"bool": "true", "int": "1", "duration": "1s", "stringSlice": "a"}
    refused = []
    for name, kind in sorted(listed.items()):
        if name in ("help", "version"):
            continue  # they end the command before parsing the rest
        args = [
            "--server-addr=https://127.0.0.1:6443",
            "--node-name=edge-1",
            "--kubeconfig=/nonexistent/kubeconfig",
            f"--{name}={samples.get(kind, 'x')}",
        ]
        result = testing.CliRunner().invoke(hub.command, args)
        # Accepted: parsing went on (a value edgehub finds wrong is another test's business).
        if result.exit_code == 2 and "No such option" in result.output:
            refused.append(name)
    assert refused == []
