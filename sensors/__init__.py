"""Dagster sensors: dataset arrivals and per-model evaluation schedules."""
