"""The built-in discovery handlers: ``debugEcho``, ``udev``, ``opcua``, ``onvif``.

Each module exposes ``create(options: sdk.HandlerOptions) -> sdk.Handler``, registered in the
``edgehub.discovery_handlers`` entry-point group (pyproject.toml). Modules are imported only
when their handler is used, so ``edgehub handler debugEcho`` never pays for asyncua or aiohttp.
"""
