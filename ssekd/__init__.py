"""ssekd: Kafka topics to browsers as Server-Sent Events, configured by Zilla's zilla.yaml."""

__version__ = "0.1.0"
