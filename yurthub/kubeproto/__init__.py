"""Kubernetes protobuf bodies read through descriptors generated from the pinned API's
``generated.proto`` files (``make proto``)."""
