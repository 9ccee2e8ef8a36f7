"""The contract between ssekd's parts, apart from any of them: what a binding or guard type
registers and may use while built (`binding`), the connection layers' roles (`connection`),
authorization values (`guard`), the byte stream between a source and its response (`stream`),
composite kinds (`compose`), the channel between workers (`workers`), and how the installed
types are found (`plugins`).

It imports the config model and errors, the event log, the metrics, the health state and the
catalog protocol, and nothing that imports a binding, so the config loader, the engine, the
guards and every binding can build on it without an import circle.
"""
