"""The `marketplace` command: operator commands (serve, dev, db, models, token, orgs)."""
