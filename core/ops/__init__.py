"""Operating the cache: metrics, Prometheus exposition, the circuit breaker."""
