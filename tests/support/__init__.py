"""Helpers the tests share: plain modules a test imports by name.

Fixtures live in the `conftest.py` files and only there; a test never imports a conftest or
another test module. Modules: `daemon` (the real `twistd ssekd` process), `wait` (waiting for a
condition instead of sleeping), `broker` (topics and records on the test broker), `sse` (an SSE
client), `streamd` (the daemon with the streaming test config), `http` (curl and raw sockets),
`static_site` (a static site config), `pki` (throwaway keys and stores, tls configs),
`h2client` (an HTTP/2 SSE client), `kafka_records` (producing and reading records without
the code under test), `data` (the files of `tests/data/`), `browser` (headless Chromium over
CDP), `jwt` (keys, tokens, a JWKS server and guarded configs), `reliability` (the reliability
tests' daemon config and a raw HTTP/2 client), `http_fakes` (the http binding's site over a
`StringTransport`).
"""
