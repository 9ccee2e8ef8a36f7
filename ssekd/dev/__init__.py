"""Development helpers: what `make run` starts around the daemon on a developer's machine, and
what tests and benchmarks start the same way. None of it runs on a server.

- `launcher`: `python -m ssekd.dev` (what `make run` runs): TLS stores, the broker, the demo
  producer and the token service a config needs, then the daemon in the foreground;
- `broker`: the development Kafka-protocol broker (tansu) on a free port;
- `certs`: a development CA and TLS store (`python -m ssekd.dev.certs`);
- `token_service`: a development JWKS and token endpoint (`python -m ssekd.dev.token_service`);
- `demo_producer`: the demo's records (`ssekd produce`).

This file imports nothing, so a test that only needs the broker does not load the launcher.
"""
