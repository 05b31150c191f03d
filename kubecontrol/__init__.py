"""The controller runtime shared by the discovery agent and the managers.

``kubeapi`` (JSON-in/JSON-out REST over one kubernetes_asyncio ApiClient, a small error
hierarchy), ``credentials`` (a Pod's ServiceAccount), ``watching`` (Reflector: list+watch into
a store, relist on 410), ``queueing`` (keyed work queue with delays), ``backoff`` (per-key
capped exponential back-off), ``controlling`` (Controller: reflectors + queue + workers +
resync), ``leases`` (pure Lease leader-election decisions), ``electing`` (the election loop),
``events`` (Kubernetes Events with repeat suppression), ``timestamps`` (pure: RFC 3339 times
read back).

Nothing here imports anything else of ours but the pure ``inputbounds``; discovery and the
managers build on it (the hub does not use it: it speaks to the apiserver through its own proxy
path).
"""
