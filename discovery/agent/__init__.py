"""The Akri-compatible discovery agent: Configurations in, Instances, device plugins and CDI out.

Pure decisions live in ``naming``, ``slots``, ``reconciling`` (the ``decide_*``
functions) and ``cdi`` (spec building); everything that talks to the
apiserver, kubelet or the disk carries those decisions out. ``running.Agent``
assembles the pieces.
"""
