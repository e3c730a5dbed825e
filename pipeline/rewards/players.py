"""The players of a batch's valuation: one contribution each, with a fingerprint of its rows
by which copies are found (`pipeline.rewards.valuation` plays copies as one player)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Player:
    """One contribution of a batch: its key (job id) and the rows to value."""

    key: str
    frame: pd.DataFrame
    fingerprint: str = ""

    @property
    def rows(self) -> int:
        return len(self.frame)


def frame_fingerprint(frame: pd.DataFrame) -> str:
    """A hash of a frame's rows and columns: equal frames get equal fingerprints."""
    return frame_fingerprints([frame])[0]


def frame_fingerprints(frames: Sequence[pd.DataFrame]) -> list[str]:
    """`frame_fingerprint` of each frame. Frames of the same columns and types have their rows
    hashed in one call (a row's hash depends on its values only; pandas' cost is mostly per
    call and column), so each fingerprint is the one the frame alone would get. A frame with an
    object column is hashed alone: pandas factorises such a column first, and in one call 1
    and True of two frames would be one value."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, frame in enumerate(frames):
        types = tuple(frame.dtypes.tolist())  # pandas builds a Series per `dtypes`: once
        alone = any(pd.api.types.is_object_dtype(t) for t in types)
        groups.setdefault((i,) if alone else (tuple(frame.columns), types), []).append(i)
    result = [""] * len(frames)
    for members in groups.values():
        rows = pd.concat([frames[i] for i in members], ignore_index=True)
        hashes = pd.util.hash_pandas_object(rows, index=False).to_numpy()
        ends = np.cumsum([len(frames[i]) for i in members])
        for i, end in zip(members, ends, strict=True):
            digest = hashlib.sha256()
            digest.update("\x1f".join(map(str, frames[i].columns)).encode())
            digest.update(hashes[end - len(frames[i]) : end].tobytes())
            result[i] = digest.hexdigest()
    return result
