"""Vector indexes: each process's replica of the store's points, a Qdrant server, or one index
in the Redis query engine shared by every process (``search.RedisSearchIndex``, imported from
there: it needs redis)."""
