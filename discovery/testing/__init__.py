"""Test toolkit for the discovery agent: a simulated kubelet (``kubelet``: device-plugin
registration, ListAndWatch/Allocate client, pod-resources server) and ``cluster`` (the real
kubectl and Akri Instances from async tests). Real gRPC over Unix sockets; no mocks."""
