"""Metrics (Prometheus, through prometheus-client) and structured logs; the only importer of prometheus_client."""
