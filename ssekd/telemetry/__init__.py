"""Telemetry: events (the stdout exporter), metrics, and the Prometheus exporter."""
