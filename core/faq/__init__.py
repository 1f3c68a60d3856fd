"""The curated FAQ fallback."""
