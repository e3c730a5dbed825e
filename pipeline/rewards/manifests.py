"""Contributor manifests (spec §2.5): the `manifest.json` file name and the one reader of manifests.

A manifest says who provided a dataset, under which license, and who is paid for it. Every
manifest, wherever it comes from, passes the same two checks:

- its form (`decode_manifest`): at most MANIFEST_MAX_BYTES, JSON, an object;
- its content (`parse_manifest`): the fields of spec §2.5 (EIP-55 wallets, an SPDX license id or
  `LicenseRef-<name>`, contributor weights summing to 1), and a size that fits in a
  `manifest.json` once written (`encode_manifest`), so that a manifest accepted in a request
  body can always be read back from its file.

Every problem is reported at once (`InvalidManifest.problems`). The readers: the contribution
route and `PUT /api/contributors/me` (a parsed body), the arrival sensor and the payout
(`read_version_manifest`: the file beside a version's data), `marketplace contribute --manifest`
(`load_manifest_file`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from pipeline.core.errors import InvalidInput
from pipeline.core.text import END, MULTILINE_TEXT, NO_CONTROL_CHARACTERS, printable
from pipeline.rewards.formula import WALLET_SCHEMA, validate_wallet
from pipeline.store.objectstore import ObjectStore, dataset_key

# Weights are fractions written by people and tools; this absorbs their decimal rounding
# (three thirds written as 0.333333 each) without accepting shares that are really off.
WEIGHT_SUM_TOLERANCE = 1e-6

# The file a manifest travels in beside a version's data (`datasets/{model}/{version}/`), and
# the largest manifest accepted anywhere: as a file, in a request body or a stored profile.
MANIFEST_FILENAME = "manifest.json"
MANIFEST_MAX_BYTES = 1024 * 1024

# Common SPDX license identifiers for datasets and code (https://spdx.org/licenses/).
# A license not listed is named the way SPDX provides for that, `LicenseRef-<name>`
# (for example `LicenseRef-Proprietary`); SPDX expressions such as "MIT OR Apache-2.0" are
# not accepted: one identifier per manifest.
SPDX_LICENSES: tuple[str, ...] = (
    "CC0-1.0",
    "CC-BY-3.0",
    "CC-BY-4.0",
    "CC-BY-SA-3.0",
    "CC-BY-SA-4.0",
    "CC-BY-NC-4.0",
    "CC-BY-NC-SA-4.0",
    "CC-BY-ND-4.0",
    "CC-BY-NC-ND-4.0",
    "PDDL-1.0",
    "ODC-By-1.0",
    "ODbL-1.0",
    "CDLA-Permissive-1.0",
    "CDLA-Permissive-2.0",
    "CDLA-Sharing-1.0",
    "OGL-UK-3.0",
    "MIT",
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "MPL-2.0",
    "GPL-3.0-only",
    "GPL-3.0-or-later",
    "LGPL-3.0-only",
    "Unlicense",
)
# SPDX identifiers match case-insensitively; the canonical spelling is what gets stored.
_LICENSES_BY_KEY = {license.lower(): license for license in SPDX_LICENSES}
_LICENSE_REF = re.compile(r"LicenseRef-[A-Za-z0-9.\-]+", re.IGNORECASE)
LICENSE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "anyOf": [
        {"enum": list(SPDX_LICENSES)},
        {"pattern": rf"^LicenseRef-[A-Za-z0-9.\-]+{END}"},
    ],
    "description": "SPDX identifier (matched in any letter case) or LicenseRef-<name>",
}


WALLET_CHARS = 42  # 0x + 40 hex digits
LICENSE_MAX_CHARS = 200


def _schema(by: dict[str, Any]) -> Any:
    """A `json_schema_extra` that states a field's rule in place of pydantic's plain type."""

    def replace(schema: dict[str, Any]) -> None:
        schema.clear()
        schema.update(by)

    return replace


def _checked_wallet(address: str) -> str:
    try:
        return validate_wallet(address)
    except InvalidInput as exc:
        raise PydanticCustomError("wallet", exc.detail) from None


# --- the content ---------------------------------------------------------------------------


_WALLET_FIELD = _schema({**WALLET_SCHEMA, "maxLength": WALLET_CHARS})


class ContributorShare(BaseModel):
    """One contributor of a multi-contributor dataset and their share of its rewards."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(
        min_length=1, max_length=200, json_schema_extra={"pattern": NO_CONTROL_CHARACTERS}
    )
    wallet_address: str = Field(max_length=WALLET_CHARS, json_schema_extra=_WALLET_FIELD)
    # Strict: a boolean or a numeric string is a mistake in the file, not a weight.
    weight: float = Field(gt=0, le=1, strict=True, allow_inf_nan=False)

    @field_validator("wallet_address")
    @classmethod
    def _valid_wallet(cls, value: str) -> str:
        return _checked_wallet(value)

    @field_validator("id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        return printable(value, "id")


def _at_least_one(schema: dict[str, Any]) -> None:
    """The array branch of `contributors` (`list | None`) needs one entry when present."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") == "array":
            branch["minItems"] = 1


class ContributorManifest(BaseModel):
    """The contributor manifest of spec §2.5."""

    # Client tooling may add its own fields; they are kept in the stored JSON, ignored here.
    model_config = ConfigDict(extra="ignore")

    # Text fields refuse control characters (descriptions may hold tabs and line breaks).
    contributor_id: str = Field(
        min_length=1, max_length=200, json_schema_extra={"pattern": NO_CONTROL_CHARACTERS}
    )
    wallet_address: str = Field(max_length=WALLET_CHARS, json_schema_extra=_WALLET_FIELD)
    data_description: str = Field(
        min_length=1, max_length=10_000, json_schema_extra={"pattern": MULTILINE_TEXT}
    )
    data_source: str = Field(
        min_length=1, max_length=2_000, json_schema_extra={"pattern": MULTILINE_TEXT}
    )
    license: str = Field(
        max_length=LICENSE_MAX_CHARS,
        json_schema_extra=_schema({**LICENSE_SCHEMA, "maxLength": LICENSE_MAX_CHARS}),
    )
    # Weights must also sum to 1 and ids be distinct, which JSON Schema cannot state.
    contributors: list[ContributorShare] | None = Field(
        default=None,
        description="several contributors: distinct ids, weights summing to 1",
        json_schema_extra=_at_least_one,
    )

    @field_validator("wallet_address")
    @classmethod
    def _valid_wallet(cls, value: str) -> str:
        return _checked_wallet(value)

    @field_validator("contributor_id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        return printable(value, "contributor_id")

    @field_validator("data_description", "data_source")
    @classmethod
    def _printable_text(cls, value: str, info: ValidationInfo) -> str:
        return printable(value, str(info.field_name), multiline=True)

    @field_validator("license")
    @classmethod
    def _known_license(cls, value: str) -> str:
        canonical = _LICENSES_BY_KEY.get(value.lower())
        if canonical is not None:
            return canonical
        if _LICENSE_REF.fullmatch(value):
            return "LicenseRef-" + value[len("LicenseRef-") :]
        raise PydanticCustomError(
            "license",
            "unknown license identifier: use an SPDX identifier ({known}) "
            "or LicenseRef-<name> for another license",
            {"known": ", ".join(SPDX_LICENSES)},
        )

    @field_validator("contributors")
    @classmethod
    def _shares_add_up(cls, shares: list[ContributorShare] | None) -> list[ContributorShare] | None:
        # A field validator, not a model one: pydantic then reports these problems together
        # with those of the other fields instead of only once every field is valid.
        if shares is None:
            return shares
        if not shares:
            raise PydanticCustomError(
                "contributors", "contributors must list at least one contributor when present"
            )
        problems: list[str] = []
        ids = [share.id for share in shares]
        seen = Counter(ids)
        repeated = [i for i in dict.fromkeys(ids) if seen[i] > 1]  # in order of appearance
        problems.extend(f"contributor id '{i}' appears more than once" for i in repeated)
        total = math.fsum(share.weight for share in shares)
        if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
            problems.append(f"contributor weights must sum to 1 (they sum to {round(total, 9)})")
        if problems:
            raise PydanticCustomError("contributors", ", and ".join(problems))
        return shares


@dataclass(frozen=True)
class ManifestProblem:
    """One thing wrong with a manifest: where (`license`, `contributors[1].weight`; "" for the
    manifest as a whole) and what."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidManifest(InvalidInput):
    """A manifest that cannot be used; `detail` names every problem, `problems` lists them."""

    def __init__(self, problems: Sequence[ManifestProblem]) -> None:
        super().__init__("manifest: " + "; ".join(str(problem) for problem in problems))
        self.problems = list(problems)


def parse_manifest(data: Any) -> ContributorManifest:
    """Validate a contributor manifest (spec §2.5), the one check every reader uses.

    Every problem is found in one pass and raised together as InvalidManifest, so a person
    fixing a manifest sees all of them at once rather than one per try.
    """
    if not isinstance(data, dict):
        raise InvalidManifest([ManifestProblem("", "must be a JSON object")])
    problems = _size_problems(data)
    try:
        manifest = ContributorManifest.model_validate(data)
    except ValidationError as exc:
        problems += [
            ManifestProblem(_location(error["loc"]), error["msg"]) for error in exc.errors()
        ]
    if problems:
        raise InvalidManifest(problems)
    return manifest


def _size_problems(data: dict[str, Any]) -> list[ManifestProblem]:
    """The manifest as a whole too large for its file (client tools may add fields of their own)."""
    try:
        size = len(encode_manifest(data))
    except (TypeError, ValueError):
        return [ManifestProblem("", "must hold JSON values only")]
    if size > MANIFEST_MAX_BYTES:
        return [ManifestProblem("", f"the manifest is larger than {MANIFEST_MAX_BYTES} bytes")]
    return []


def _location(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


# --- the file ------------------------------------------------------------------------------


def manifest_key(model_id: int, version: str) -> str:
    """Where a version's `manifest.json` is stored: beside its data."""
    return dataset_key(model_id, version, MANIFEST_FILENAME)


def encode_manifest(data: dict[str, Any]) -> bytes:
    """The bytes of a `manifest.json` holding `data`, as the service writes it."""
    return json.dumps(data, indent=2).encode()


def decode_manifest(raw: bytes) -> dict[str, Any]:
    """The JSON object in the bytes of a `manifest.json`; InvalidManifest when there is none.

    Only the file's form is checked here; `parse_manifest` checks its content.
    """
    if len(raw) > MANIFEST_MAX_BYTES:
        raise InvalidManifest(
            [ManifestProblem("", f"the file is larger than {MANIFEST_MAX_BYTES} bytes")]
        )
    try:
        data = json.loads(raw)
    except ValueError:  # UnicodeDecodeError is a ValueError too
        raise InvalidManifest([ManifestProblem("", "the file is not valid JSON")]) from None
    if not isinstance(data, dict):
        raise InvalidManifest([ManifestProblem("", "the file is not a JSON object")])
    return data


def read_manifest_file(store: ObjectStore, key: str) -> dict[str, Any] | None:
    """The JSON object of the stored `manifest.json` at `key`; None when there is no such file.

    A file that exists but cannot be read or decoded raises InvalidManifest.
    """
    try:
        if not store.exists(key):
            return None
        with store.open(key) as fh:
            raw = fh.read(MANIFEST_MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidManifest(
            [ManifestProblem("", f"the file could not be read ({type(exc).__name__})")]
        ) from None
    return decode_manifest(raw)


def read_version_manifest(store: ObjectStore, model_id: int, version: str) -> dict[str, Any] | None:
    """The `manifest.json` beside a version's data: its object, None when there is none.

    Only its form is checked (InvalidManifest when unusable); `parse_manifest` checks its content.
    """
    return read_manifest_file(store, manifest_key(model_id, version))


def load_manifest_file(path: Path) -> dict[str, Any]:
    """A local manifest file, checked in form and content: the object it holds.

    InvalidManifest names every problem; FileNotFoundError when there is no such file.
    """
    with path.open("rb") as fh:
        raw = fh.read(MANIFEST_MAX_BYTES + 1)
    data = decode_manifest(raw)
    parse_manifest(data)
    return data


# --- who is paid ---------------------------------------------------------------------------


def recipients(manifest: ContributorManifest) -> list[tuple[str, float]]:
    """Who is paid for a contribution, with their weights (summing to 1).

    Without a contributors list the manifest's own wallet takes everything. A wallet listed
    for several contributors is paid once, with their weights added, under its first spelling,
    because the reward ledger holds one entry per wallet and evaluation.
    """
    if not manifest.contributors:
        return [(manifest.wallet_address, 1.0)]
    merged: dict[str, tuple[str, float]] = {}
    for share in manifest.contributors:
        key = share.wallet_address.lower()
        wallet, weight = merged.get(key, (share.wallet_address, 0.0))
        merged[key] = (wallet, weight + share.weight)
    return list(merged.values())
