"""What the bindings composed from API specs (asyncapi, openapi, openapi-asyncapi) share: the
schema of their `options.specs` and routes, reading specs through catalogs, matching operations
to routes, and the tcp/tls/http shapes they compose. Each binding keeps what its spec format
says; the mechanics that are the same for both formats live here, once.
"""
