"""The exact tier: L1 + L2 lookups by key, the Bloom filter, versions, TTLs."""
