"""The preprocessing in front of every estimator, chosen from the training frame when fitted.

- numeric columns: median imputation, then standard scaling;
- text columns the recipe names (`preprocessing.text_columns`): joined into one document per row
  and turned into TF-IDF features (at most `text_max_features` terms, the most frequent kept);
- every other column (strings, booleans, categoricals): most-frequent imputation, then one-hot
  encoding that ignores categories unseen in training.

scikit-learn is imported when a preprocessor is built and pandas when one runs (see
`pipeline.models.estimators`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# One-hot columns per categorical feature are capped: an ID-like string column would otherwise
# add one column per row; the rarest categories share one "infrequent" column instead.
MAX_CATEGORIES = 50


class ColumnKind:
    """A column selector resolved against the frame passed to `fit` (and remembered).

    `numeric`: number columns; `categorical`: the others; `text`: the recipe's text columns
    present in the frame. Text columns are never numeric or categorical. A class rather than a
    closure, so that scikit-learn can clone and pickle the pipeline.
    """

    def __init__(self, kind: str, text_columns: Sequence[str]) -> None:
        self.kind = kind
        self.text_columns = tuple(text_columns)

    def __call__(self, frame: pd.DataFrame) -> list[str]:
        text = set(self.text_columns)
        if self.kind == "text":
            return [c for c in frame.columns if c in text]
        # "number" as make_column_selector understands it: booleans are not numbers here.
        numbers = set(frame.select_dtypes(include="number").columns)
        numeric = self.kind == "numeric"
        return [c for c in frame.columns if c not in text and (c in numbers) == numeric]


def build_preprocessor(
    text_columns: Sequence[str] = (), text_max_features: int = 1000, *, dense: bool = False
) -> Any:
    """A fresh ColumnTransformer; `dense` for estimators that refuse sparse input."""
    # sklearn lazily: see the module docstring.
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    from pipeline.models.one_hot import CappedOneHotEncoder

    numeric = Pipeline(
        [
            ("coerce", FunctionTransformer(as_floats)),
            ("impute", SimpleImputer(strategy="median")),
            ("scale", StandardScaler()),
        ]
    )
    categorical = Pipeline(
        [
            ("coerce", FunctionTransformer(_as_category_strings)),
            ("impute", SimpleImputer(strategy="most_frequent")),
            ("encode", CappedOneHotEncoder(handle_unknown="ignore", max_categories=MAX_CATEGORIES)),
        ]
    )
    transformers: list[tuple[str, Any, Any]] = [
        ("numeric", numeric, ColumnKind("numeric", text_columns)),
        ("categorical", categorical, ColumnKind("categorical", text_columns)),
    ]
    if text_columns:
        text = Pipeline(
            [
                ("join", FunctionTransformer(_as_documents)),
                ("tfidf", TfidfVectorizer(max_features=text_max_features)),
            ]
        )
        transformers.append(("text", text, ColumnKind("text", text_columns)))
    # Dense output when asked; otherwise scikit-learn's default (sparse when mostly zeros).
    return ColumnTransformer(transformers, sparse_threshold=0.0 if dense else 0.3)


def as_floats(frame: pd.DataFrame) -> pd.DataFrame:
    """Numeric columns as float64: nullable integers' NA and stray text become NaN."""
    import pandas as pd  # lazily: see the module docstring

    return pd.DataFrame(frame).apply(pd.to_numeric, errors="coerce").astype("float64")


def _missing(value: Any) -> bool:
    import pandas as pd  # lazily: see the module docstring

    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def _as_category_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns as text, missing values as NaN.

    Text keeps columns that mix value types (True and "yes", 1 and "1") sortable for the
    encoder, and turns pandas' NA variants into the NaN the imputer recognises.
    """
    import pandas as pd  # lazily: see the module docstring

    frame = pd.DataFrame(frame)
    columns = {}
    for i in range(frame.shape[1]):
        texts = _category_strings(frame.iloc[:, i])
        # Python strings as they are (object): the imputer and encoder take object arrays,
        # and pandas' own text type would be converted back cell by cell. A column with no
        # value left is float, as `Series.map` would type it.
        empty = len(texts) > 0 and bool(pd.isna(texts).all())
        columns[i] = pd.Series(texts, index=frame.index, dtype=float if empty else object)
    result = pd.DataFrame(columns, index=frame.index)
    result.columns = frame.columns
    return result


def _category_strings(column: pd.Series) -> np.ndarray:
    """One column as `str(value)` per cell, NaN where missing (`category_codes`)."""
    import numpy as np  # lazily: see the module docstring

    codes, texts = category_codes(column)
    result: np.ndarray = np.asarray([*texts.tolist(), math.nan], dtype=object)[codes]  # -1: NaN
    return result


def category_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """A categorical column as the texts the preprocessing gives its cells: each cell's index
    into the distinct texts (-1 where missing) and those texts (an object array); one `str`
    call per distinct value.

    Values of one type (a typed column, or an object column holding only text or only
    booleans) are factorised first; an object column of other values is converted cell by
    cell, since factorising would merge 1, 1.0 and True, whose texts differ. Distinct values
    with the same text (1 and "1" among a categorical's categories) are one text.
    """
    import numpy as np  # lazily: see the module docstring
    import pandas as pd

    typed = column.dtype != object
    if not typed and pd.api.types.infer_dtype(column, skipna=True) not in ("string", "boolean"):
        cells = [math.nan if _missing(v) else str(v) for v in column.tolist()]
        codes, uniques = pd.factorize(np.asarray(cells, dtype=object), use_na_sentinel=True)
        return np.asarray(codes, dtype=np.intp), np.asarray(uniques, dtype=object)
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    codes = np.asarray(codes, dtype=np.intp)
    texts = [str(v) for v in np.asarray(uniques, dtype=object).tolist()]
    if not typed:
        # pandas counts more as missing in an object column (Decimal NaN, numpy's NaT): as text.
        gaps = np.flatnonzero(codes < 0)
        for i, value in zip(gaps.tolist(), column.to_numpy()[gaps].tolist(), strict=True):
            if not _missing(value):
                codes[i] = len(texts)
                texts.append(str(value))
    if len(set(texts)) < len(texts):
        distinct, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        codes = np.where(codes >= 0, inverse[codes], -1)
        return codes, distinct
    return codes, np.asarray(texts, dtype=object)


def _as_documents(frame: pd.DataFrame) -> np.ndarray:
    """One document per row: the text columns' values joined by spaces (missing ones left out)."""
    import numpy as np  # lazily: see the module docstring
    import pandas as pd

    cells = pd.DataFrame(frame).astype(object).map(lambda v: "" if _missing(v) else str(v))
    return np.asarray([" ".join(row) for row in cells.itertuples(index=False, name=None)])
