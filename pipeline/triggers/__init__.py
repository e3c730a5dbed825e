"""What starts work (spec §2.7, §4.4–4.5, §6).

Dataset arrivals and their debounce, evaluation schedules, retiring settled versions.
"""
