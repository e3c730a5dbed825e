"""Data coming in (spec §2.2–2.6, §4.2–4.3).

Receiving uploads, benchmark uploads, row contributions, writing dataset versions.
"""
