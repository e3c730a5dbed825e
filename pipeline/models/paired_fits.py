"""A model's paired fits: K fits per training frame, each leaving out one keyed fold of its rows.

An owner may define `paired_fits` K (1 to `MAX_PAIRED_FITS`) to trade K times the fits for a
pool that moves less with noise nobody controls (`pipeline.rewards.stability`). Each row falls
in one of `folds(K)` folds (at least `MIN_FOLDS`) by its keyed draw
(`pipeline.models.row_keys.keyed_uniform`); fit k trains on every row but those of fold k. The
same row is kept or left out of fit k in "with", "without" and every coalition, so paired fits
differ only by the contributions' rows.

Each fit also draws its own seed (`fit_seed`) for an estimator that has one: a forest's K fits
would otherwise draw the same features and the same keyed bootstrap for each tree, so that
their errors move together, the band understates the spread, and another catalog seed moves
the pool by several bands at once. With a seed per fit, the K fits average the seed's noise
too, as the expected game's fits do.

Why folds and not a draw per fit: the keys are public, so a supplier can search a row's last
digits for any draw it likes. With independent draws a row could be ground out of all K fits:
never valued, yet accepted and paid for by volume. A fold leaves a row out of one fit at most,
and a row in no left-out fold weighs at most folds/(folds - 1) of another.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from pipeline.core.errors import InvalidInput

if TYPE_CHECKING:
    import numpy as np

DEFAULT_PAIRED_FITS = 1
# Room for what a forest needs to meet issue 35's stability goals (the payout bench prints
# `fits_for_goals`; docs/benchmarks.md); a cap, since every fit is the service's compute.
MAX_PAIRED_FITS = 128
# Each fit leaves out one fold: with 10 folds it keeps about 90 % of the rows (the expected
# game of issue 35 uses 90 % subsamples); a K above 10 uses K folds.
MIN_FOLDS = 10
# The salt of the folds' `keyed_uniform` draw. Fixed in the code, so anyone holding the rows can
# tell which fit left a row out; far from the small salts of a forest's trees and the
# surrogate's sample, so the folds are drawn independently of them.
PAIRED_SALT = 0x7061_6972_6564_0000  # "paired" in ASCII
# How paired fits draw their rows and seeds; part of a stored "without"'s recipe digest
# (`pipeline.evaluation.without_cache`), so one made by another scheme is a miss.
PAIRED_SCHEME = "keyed folds, a seed per fit"


def folds(fits: int) -> int:
    """How many folds the rows of a model with `fits` paired fits fall in."""
    return max(int(fits), MIN_FOLDS)


def fit_seed(seed: int, fit: int) -> int:
    """The seed of paired fit `fit` of an estimator whose catalog seed is `seed`: drawn from
    both, so that the fits' seeds are independent and another catalog seed gives other seeds
    for every fit (not the same seeds shifted by one)."""
    import numpy as np  # lazily, as in paired_mask

    state = np.random.SeedSequence([int(seed), PAIRED_SALT, int(fit)]).generate_state(1)
    return int(state[0])


def paired_mask(keys: np.ndarray, fit: int, fits: int) -> np.ndarray:
    """Which rows (by their `row_keys`) paired fit `fit` of `fits` trains on: all but those of
    fold `fit`. A row's fold is its own: another row changes nothing of it."""
    import numpy as np  # lazily: a model definition reads this module's constants

    from pipeline.models.row_keys import keyed_uniform

    fold = np.floor(keyed_uniform(keys, PAIRED_SALT) * folds(fits)).astype(np.int64)
    return np.asarray(fold != int(fit))


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
