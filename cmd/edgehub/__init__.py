"""The ``edgehub`` binary: a thin click CLI, one module per sub-command.

Each sub-command module builds its settings from flags (every flag also reads an
``EDGEHUB_*`` environment variable) and calls a programmatic ``run(settings)``
of the package that does the work, so tests can call the same entry points.
"""
