"""A model's paired fits: K fits per training frame, each on a keyed subsample of its rows.

An owner may define `paired_fits` K (1 to `MAX_PAIRED_FITS`) to trade K times the fits for a
pool that moves less with noise nobody controls (`pipeline.rewards.stability`). Fit k keeps a
row when the row's keyed draw for k (`pipeline.models.row_keys.keyed_uniform`) is below
`SUBSAMPLE`: the same row is kept or left out of fit k in "with", "without" and every
coalition, so paired fits differ only by the contributions' rows.
"""

from __future__ import annotations

DEFAULT_PAIRED_FITS = 1
MAX_PAIRED_FITS = 16
# Each fit keeps about this part of the rows (the expected game of issue 35 uses 90 %).
SUBSAMPLE = 0.9
