"""Node autonomy as the cluster writes it down: shared by the hub and the cloud controllers.

``marking`` reads a Node's autonomy annotations (OpenYurt's ``node.openyurt.io/autonomy-duration``
and the older ``node.beta.openyurt.io/autonomy``) into one answer both sides agree on;
``durations`` is Go's ``time.ParseDuration``, the syntax of the duration annotation.

Pure and dependency-free: it imports nothing of ours (``make lint`` enforces it), so the hub
(``yurthub``) and the managers, which may not import each other, both read a node the same way.
"""
