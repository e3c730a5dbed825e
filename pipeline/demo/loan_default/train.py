"""The loan-default owner's training code: a gradient-boosted model of loan defaults.

What an owner's `train.py` looks like (docs/sandbox.md): `fit(train, target)` returns anything
with `.predict` and `.predict_proba`. It runs only in the marketplace's sandbox, on the owner's
base training rows (the benchmark file's `train` split), the accepted contributions and, while
a contribution is valued, its rows.

Deterministic: a fixed seed, no early stopping (scikit-learn turns it on by itself above 10,000
rows, with a validation split that would differ between the "with" and "without" fits), and
one thread (the sandbox sets OMP_NUM_THREADS=1).
"""

import pandas as pd
from sklearn.compose import make_column_transformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OrdinalEncoder


def fit(train: pd.DataFrame, target: str) -> object:
    features = train.drop(columns=[target])
    text = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    # Categories as codes first (the loan's purpose); an unseen one is treated as missing.
    codes = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=float("nan"))
    prepare = make_column_transformer((codes, text), remainder="passthrough")
    boosted = HistGradientBoostingClassifier(
        max_iter=200,
        learning_rate=0.05,
        max_leaf_nodes=15,
        categorical_features=list(range(len(text))),
        early_stopping=False,
        random_state=0,
    )
    return make_pipeline(prepare, boosted).fit(features, train[target])
