"""Who is calling the hub, and which cache partition they may read (docs/identity.md,
THREAT_MODEL.md).

Pure decisions (``jwts``, ``callers``, ``tokengranting``: which offline TokenRequests are
granted) apart from the I/O that feeds them (``issuers``: the ServiceAccount issuer's public
keys, fetched online and kept for offline use; ``verifying``: the per-request verifier with
its bounded memo).
"""
