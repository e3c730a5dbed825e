"""HTTP layer: thin FastAPI routes over the `pipeline` domain."""
