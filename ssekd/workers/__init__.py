"""Worker supervision (`--workers N`): the parent that binds the listening sockets once and
supervises N worker processes that share them (`supervisor`), the sockets themselves
(`sockets`, which a single process uses too), the channel over which workers ask one another
(`siblings`), and the one metrics page summed from every worker's (`summed_metrics`).

This file imports nothing, so importing `ssekd.workers.sockets` does not load the supervisor.
"""
