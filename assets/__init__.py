"""Dagster assets: thin wrappers over `pipeline` functions."""
