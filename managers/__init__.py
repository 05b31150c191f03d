"""Cloud-side controllers: hub-leader election and device brokers."""
