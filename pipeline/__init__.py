"""Domain core of the data-contribution marketplace: nothing here knows HTTP or Dagster."""
