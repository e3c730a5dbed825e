"""Foundations every domain shares.

The one settings object, the database, its tables and migrations, domain errors, temp files.
"""
