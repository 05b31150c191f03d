"""The hub's own identity: bootstrap, certificate signing requests, rotation (reference §7).

Pure decisions (``layout``, ``renewal``, ``csrs``, ``jws``, ``modes``, ``hubconfigs``) are
separate from the I/O that carries them out (``pemfiles``, ``apiclient``, ``bootstrapping``,
``signing``, ``manager``).
"""
