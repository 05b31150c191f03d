"""The built-in discovery handlers: ``debugEcho``, ``udev``, ``opcua``, ``onvif``.

Each module exposes ``create(options: sdk.HandlerOptions) -> sdk.Handler``, registered in the
``edgehub.discovery_handlers`` entry-point group (pyproject.toml). Modules are imported only
when their handler is used, so ``edgehub handler debugEcho`` never pays for asyncua or aiohttp.

:data:`BUILTIN` lists the same factories so that loading a built-in handler does not need
``importlib.metadata`` (about 2 MB of a handler process's 40 MB budget); keep it in sync with
the entry points in pyproject.toml.
"""

BUILTIN: dict[str, str] = {
    "debugEcho": "discovery.handlers.debug_echo:create",
    "onvif": "discovery.handlers.onvif:create",
    "opcua": "discovery.handlers.opcua:create",
    "udev": "discovery.handlers.udev:create",
}
