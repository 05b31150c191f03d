"""The node's ``Autonomy`` condition (reference §4.6): ``conditions`` decides it (pure),
``reporting`` writes it to the cloud when it changes."""
