"""The hub: an offline-capable reverse proxy in front of kube-apiserver."""
