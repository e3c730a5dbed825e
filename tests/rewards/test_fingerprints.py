"""Fingerprints of a batch's contributions, computed together (`frame_fingerprints`), are the
ones each frame gets alone: copies are found, and only copies."""

from __future__ import annotations

import hashlib

import pandas as pd

from pipeline.demo.churn_data import churn_rows
from pipeline.rewards.players import frame_fingerprints


def _alone(frame: pd.DataFrame) -> str:
    """The fingerprint's definition: its columns and its rows' hashes, the frame alone."""
    digest = hashlib.sha256("\x1f".join(map(str, frame.columns)).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def test_fingerprints_in_bulk_are_each_frames_own() -> None:
    frames = [pd.DataFrame(churn_rows(30 + i, seed=i)) for i in range(4)]
    frames += [
        frames[0].copy(),  # a copy: the same fingerprint
        frames[0].astype({"tenure_months": "float64"}),  # same values, other type
        frames[1][["contract", "churned"]],  # other columns
        frames[2].iloc[:0],  # no row
        # Object columns: pandas factorises them, and 1 and True are one value in one call.
        pd.DataFrame({"a": [1, None, 2.5]}, dtype=object),
        pd.DataFrame({"a": [True, None, 2.5]}, dtype=object),
    ]
    together = frame_fingerprints(frames)
    assert together == [_alone(f) for f in frames]
    assert together[4] == together[0]
    assert len(set(together)) == len(frames) - 1
