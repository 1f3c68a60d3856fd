"""Vector indexes: each process's replica of the store's points, or a Qdrant server."""
