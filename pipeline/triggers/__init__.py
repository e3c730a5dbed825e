"""What starts work (spec §2.7, §3, §4.4–4.5, §6).

Dataset arrivals and their debounce, evaluation schedules and their states, retiring settled
versions.
"""
