"""Data coming in (spec §2.2–2.4, §2.6, §4.2–4.3).

Receiving uploads into temporary files and profiling them, benchmark uploads, row contributions
and their JSON bodies (jsonrows), writing new dataset versions, the catalog view of a version,
and where a version stands in the pipeline (standing).
"""
