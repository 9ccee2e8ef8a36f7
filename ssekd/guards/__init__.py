"""The guard types, one module each, named after the type (`jwt`); they are found through the
`ssekd.guards` entry point group (`ssekd.spi.plugins.discover_guards`), so the engine builds a
guard by its `type` without naming it, and another package can add types too.
"""
