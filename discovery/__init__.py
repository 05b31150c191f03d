"""Akri-compatible device discovery: gRPC protocol, handlers and the node agent."""
