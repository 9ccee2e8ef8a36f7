"""The binding types, one module (or package) each, named after the type.

`api` is the contract every binding builds on and offers; `registry` finds the installed types
through the `ssekd.bindings` entry point group, so another package can add types too.
"""
