"""The outage record: what the hub saw and did while no apiserver was usable (docs/outages.md)."""
