"""A trainer whose requirements.txt names a version of a package that does not exist."""

import inflection


def fit(train, target):  # type: ignore[no-untyped-def]
    return inflection
