"""Telemetry: events (stdout exporter) now; metrics and the Prometheus exporter come later."""
