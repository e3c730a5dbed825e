"""Which stored objects are dataset arrivals: the grammar of their keys (spec §6).

An arrival is a data object under `datasets/{model_id}/v{n}/{file}`, `file` having a data
extension (`pipeline.store.formats`: .csv, .parquet, .pq, .json, .jsonl or .ndjson). Other
keys are not arrivals: `manifest.json` (it describes the data beside it and is read with it, it
is not data), hidden files, unknown extensions, model ids beyond the id column's range, and
version segments other than `v` + a positive number without leading zeros (the form the service
allocates; ordering the versions of a model depends on it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.tables import INT32_MAX
from pipeline.rewards.manifests import MANIFEST_FILENAME
from pipeline.store.formats import format_of

KEY_PATTERN = re.compile(r"^datasets/([1-9][0-9]{0,9})/(v[1-9][0-9]{0,8})/([^/]+)$")


@dataclass(frozen=True)
class DatasetObjectKey:
    model_id: int
    version: str
    version_number: int
    filename: str
    file_format: str


def parse_dataset_key(key: str) -> DatasetObjectKey | None:
    """The data object a key names, or None when the key is not an arrival (see module doc)."""
    match = KEY_PATTERN.match(key)
    if match is None:
        return None
    model, version, filename = match.groups()
    if filename.startswith(".") or filename == MANIFEST_FILENAME:
        return None
    file_format = format_of(filename)
    if file_format is None or int(model) > INT32_MAX:
        return None
    return DatasetObjectKey(int(model), version, int(version[1:]), filename, file_format)


def version_number(version: str) -> int:
    """`v12` → 12; anything else sorts first."""
    return int(version[1:]) if version[1:].isdigit() else 0
