"""The binding types, one module (or package) each, named after the type.

Each builds on the contract in `ssekd.spi` and is found through the `ssekd.bindings` entry point
group (`ssekd.spi.plugins`), so another package can add types too. A package offers the roles
its runtimes play as protocol classes of its own (`kafka.roles`, `http.roles`, `sse.roles`).
"""
