"""A model's paired fits: K fits per training frame, each on a keyed subsample of its rows.

An owner may define `paired_fits` K (1 to `MAX_PAIRED_FITS`) to trade K times the fits for a
pool that moves less with noise nobody controls (`pipeline.rewards.stability`). Fit k keeps a
row when the row's keyed draw for k (`pipeline.models.row_keys.keyed_uniform`) is below
`SUBSAMPLE`: the same row is kept or left out of fit k in "with", "without" and every
coalition, so paired fits differ only by the contributions' rows.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from pipeline.core.errors import InvalidInput

if TYPE_CHECKING:
    import numpy as np

DEFAULT_PAIRED_FITS = 1
MAX_PAIRED_FITS = 16
# Each fit keeps about this part of the rows (the expected game of issue 35 uses 90 %).
SUBSAMPLE = 0.9
# Fit k's salt of `keyed_uniform`: PAIRED_SALT + k. Fixed in the code, so anyone holding the
# rows can tell which fits a row was in; far from the small salts of a forest's trees and the
# surrogate's sample, so a fit's subsample is drawn independently of them.
PAIRED_SALT = 0x7061_6972_6564_0000  # "paired" in ASCII, then k


def paired_salt(fit: int) -> int:
    """The `keyed_uniform` salt of paired fit `fit` (0-based)."""
    return PAIRED_SALT + int(fit)


def paired_mask(keys: np.ndarray, fit: int) -> np.ndarray:
    """Which rows (by their `row_keys`) paired fit `fit` trains on: those whose keyed draw is
    below `SUBSAMPLE`. A row's draw is its own: another row changes nothing of it."""
    import numpy as np  # lazily: a model definition reads this module's constants

    from pipeline.models.row_keys import keyed_uniform

    return np.asarray(keyed_uniform(keys, paired_salt(fit)) < SUBSAMPLE)


def validate_paired_fits(fits: object) -> int:
    """`fits` as an int within 1 .. `MAX_PAIRED_FITS` (raises InvalidInput otherwise)."""
    try:
        if isinstance(fits, bool):
            raise TypeError
        count = operator.index(fits)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidInput(f"paired_fits must be an integer, not {fits!r}") from None
    if not 1 <= count <= MAX_PAIRED_FITS:
        raise InvalidInput(f"paired_fits must be 1 to {MAX_PAIRED_FITS}, not {count}")
    return count
