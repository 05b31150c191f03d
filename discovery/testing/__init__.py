"""Test toolkit for the discovery agent: a simulated kubelet (device-plugin registration,
ListAndWatch/Allocate client, pod-resources server). Real gRPC over Unix sockets; no mocks."""
