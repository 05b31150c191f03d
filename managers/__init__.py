"""Cloud-side controllers, run by ``edgehub manager`` on the shared controller runtime
(``kubecontrol``): ``running`` assembles the process (API client, controllers, Lease leader
election, health and metrics), ``registry`` names the controllers, and one module per
controller carries out its pure decisions (``csrapprover`` <- ``csrapproving``; ``brokers`` <-
``brokerplanning`` <- ``brokerobjects``; ``nodewatcher`` <- ``nodeleaving``). The Configuration
webhook (``webhookserving`` <- ``configvalidating``) is served by every replica, leader or not.

Adding a controller: a module with ``NAME`` and ``build(context) -> kubecontrol.controlling
.Controller``, one line in ``registry.FACTORIES``, its RBAC in ``manifests/manager/``.
"""
