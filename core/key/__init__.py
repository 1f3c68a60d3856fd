"""The request and its key: what an LLM call is, normalized; the stored entry."""
