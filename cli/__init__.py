"""The `marketplace` command: operator, contributor, demo-data and partition subcommands.

Operators: serve, dev, db, models, token (operate.py, devmode.py, processes.py), orgs (orgs.py).
Contributors, over HTTP: spec, validate, contribute, upload, keys (spec.py, validate.py,
contribute.py, upload.py, keys.py, registered by contributor.py; connection.py, client.py,
datafiles.py and terminal.py are what they share). Also `demo-data` (demo.py) and
`partitions retire` (partitions.py). main.py is the entry point.
"""
