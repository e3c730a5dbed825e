"""Reward tokens: wallets (EIP-55), contributor manifests (spec §2.5), formula and split."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.errors import InvalidInput
from pipeline.rewards.formula import (
    QualityFactors,
    RewardBreakdown,
    compute_reward,
    split_reward,
    to_checksum_address,
    validate_wallet,
    volume_factor,
)
from pipeline.rewards.manifests import (
    MANIFEST_MAX_BYTES,
    ContributorManifest,
    InvalidManifest,
    ManifestProblem,
    decode_manifest,
    load_manifest_file,
    parse_manifest,
    read_manifest_file,
    recipients,
)
from pipeline.store.objectstore import LocalObjectStore

# The checksummed examples published with EIP-55.
EIP55_EXAMPLES = [
    "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
    "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
    "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
    "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
]
WALLET_A = EIP55_EXAMPLES[0]
WALLET_B = EIP55_EXAMPLES[1]


# --- wallets -------------------------------------------------------------------------------


@pytest.mark.parametrize("address", EIP55_EXAMPLES)
def test_checksum_matches_the_eip55_examples(address: str) -> None:
    assert to_checksum_address(address.lower()) == address
    assert to_checksum_address(address.upper().replace("0X", "0x")) == address


@pytest.mark.parametrize("address", EIP55_EXAMPLES)
def test_valid_checksummed_wallet_is_returned_as_given(address: str) -> None:
    assert validate_wallet(address) == address


def test_single_case_wallets_carry_no_checksum_and_are_accepted() -> None:
    lower = WALLET_A.lower()
    upper = "0x" + WALLET_A[2:].upper()
    assert validate_wallet(lower) == lower
    assert validate_wallet(upper) == upper


def test_wallet_with_one_letter_case_flipped_fails_the_checksum() -> None:
    corrupted = WALLET_A[:-1] + WALLET_A[-1].upper()  # ...BeAed -> ...BeAeD
    with pytest.raises(InvalidInput, match="EIP-55 checksum"):
        validate_wallet(corrupted)


@pytest.mark.parametrize(
    "address",
    [
        "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",  # no 0x
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAe",  # 39 hex digits
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAedd",  # 41 hex digits
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeg",  # not hex
        " 0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "",
    ],
)
def test_malformed_wallet_is_invalid_input(address: str) -> None:
    with pytest.raises(InvalidInput, match="0x followed by 40 hexadecimal"):
        validate_wallet(address)


# --- manifests -----------------------------------------------------------------------------


def _manifest(**changes: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "contributor_id": "supplier-17",
        "wallet_address": WALLET_A,
        "data_description": "Telecom accounts observed at month end",
        "data_source": "CRM export, 2024",
        "license": "CC-BY-4.0",
    }
    manifest.update(changes)
    return manifest


def _shares(*weights: float) -> list[dict[str, Any]]:
    return [
        {"id": f"c{i}", "wallet_address": EIP55_EXAMPLES[i], "weight": w}
        for i, w in enumerate(weights)
    ]


def test_single_contributor_manifest_pays_its_wallet_everything() -> None:
    manifest = parse_manifest(_manifest())
    assert isinstance(manifest, ContributorManifest)
    assert recipients(manifest) == [(WALLET_A, 1.0)]


def test_multi_contributor_manifest_pays_by_weight() -> None:
    manifest = parse_manifest(_manifest(contributors=_shares(0.6, 0.4)))
    assert recipients(manifest) == [(WALLET_A, 0.6), (WALLET_B, 0.4)]


def test_weights_within_the_tolerance_of_one_are_accepted() -> None:
    manifest = parse_manifest(_manifest(contributors=_shares(0.333333, 0.333333, 0.333334)))
    assert len(recipients(manifest)) == 3


@pytest.mark.parametrize("weights", [(0.6, 0.3), (0.6, 0.5), (0.5, 0.499998)])
def test_weights_not_summing_to_one_are_invalid_input(weights: tuple[float, ...]) -> None:
    with pytest.raises(InvalidInput, match="weights must sum to 1"):
        parse_manifest(_manifest(contributors=_shares(*weights)))


@pytest.mark.parametrize("weight", [0, -0.5, 1.5, "0.5", True, float("nan")])
def test_weight_must_be_a_positive_fraction(weight: Any) -> None:
    shares = _shares(0.5, 0.5)
    shares[1]["weight"] = weight
    with pytest.raises(InvalidInput, match=r"manifest: contributors\[1\]\.weight: "):
        parse_manifest(_manifest(contributors=shares))


def test_contributor_with_a_bad_wallet_is_named_in_the_error() -> None:
    shares = _shares(0.5, 0.5)
    shares[0]["wallet_address"] = WALLET_B[:-1] + "D"
    with pytest.raises(InvalidInput, match=r"contributors\[0\]\.wallet_address: .*checksum"):
        parse_manifest(_manifest(contributors=shares))


def test_duplicate_contributor_ids_are_invalid_input() -> None:
    shares = _shares(0.5, 0.5)
    shares[1]["id"] = "c0"
    with pytest.raises(InvalidInput, match="'c0' appears more than once"):
        parse_manifest(_manifest(contributors=shares))


def test_empty_contributors_list_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="at least one contributor"):
        parse_manifest(_manifest(contributors=[]))


def test_contributors_sharing_a_wallet_are_paid_once() -> None:
    shares = _shares(0.5, 0.25, 0.25)
    shares[2]["wallet_address"] = WALLET_A.lower()
    assert recipients(parse_manifest(_manifest(contributors=shares))) == [
        (WALLET_A, 0.75),
        (WALLET_B, 0.25),
    ]


@pytest.mark.parametrize(
    "field", ["contributor_id", "wallet_address", "data_description", "data_source", "license"]
)
def test_every_top_level_field_is_required(field: str) -> None:
    data = _manifest()
    del data[field]
    with pytest.raises(InvalidInput, match=f"manifest: {field}: Field required"):
        parse_manifest(data)


def test_manifest_must_be_an_object() -> None:
    with pytest.raises(InvalidInput, match="JSON object"):
        parse_manifest([_manifest()])  # type: ignore[arg-type]


def test_license_is_matched_case_insensitively_and_stored_canonically() -> None:
    assert parse_manifest(_manifest(license="cc0-1.0")).license == "CC0-1.0"
    assert parse_manifest(_manifest(license="odbl-1.0")).license == "ODbL-1.0"


def test_licenses_off_the_list_use_a_licenseref() -> None:
    manifest = parse_manifest(_manifest(license="LicenseRef-Proprietary"))
    assert manifest.license == "LicenseRef-Proprietary"


@pytest.mark.parametrize("license", ["proprietary", "CC-BY", "MIT OR Apache-2.0", "LicenseRef-"])
def test_unknown_license_is_invalid_input(license: str) -> None:
    with pytest.raises(InvalidInput, match="manifest: license: unknown license identifier"):
        parse_manifest(_manifest(license=license))


def test_extra_manifest_fields_are_ignored() -> None:
    assert parse_manifest(_manifest(tool_version="1.2")).contributor_id == "supplier-17"


def test_every_manifest_problem_is_named_in_one_error() -> None:
    shares = _shares(0.5, 0.3)
    shares[1]["id"] = "c0"
    incomplete = {"wallet_address": "0x1234", "license": "WTFPL-9", "contributors": shares}
    with pytest.raises(InvalidManifest) as caught:
        parse_manifest(incomplete)

    problems = caught.value.problems
    assert [p.field for p in problems] == [
        "contributor_id",
        "wallet_address",
        "data_description",
        "data_source",
        "license",
        "contributors",
    ]
    assert problems[0] == ManifestProblem("contributor_id", "Field required")
    assert "'c0' appears more than once" in problems[-1].message
    assert "weights must sum to 1 (they sum to 0.8)" in problems[-1].message
    # The one-line detail names each problem, in order, for callers that show text only.
    assert caught.value.detail == "manifest: " + "; ".join(str(p) for p in problems)


def test_problems_inside_the_contributors_list_are_reported_with_the_others() -> None:
    shares = _shares(0.5, 0.5)
    shares[0]["weight"] = "half"
    with pytest.raises(InvalidManifest) as caught:
        parse_manifest(_manifest(license="nope", contributors=shares))
    assert [p.field for p in caught.value.problems] == ["license", "contributors[0].weight"]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"{not json", "the file is not valid JSON"),
        (b"\xff\xfe", "the file is not valid JSON"),
        (b"[1, 2]", "the file is not a JSON object"),
        (b" " * (MANIFEST_MAX_BYTES + 1), f"the file is larger than {MANIFEST_MAX_BYTES} bytes"),
    ],
)
def test_manifest_file_must_hold_one_json_object(raw: bytes, problem: str) -> None:
    with pytest.raises(InvalidManifest) as caught:
        decode_manifest(raw)
    assert caught.value.problems == [ManifestProblem("", problem)]


def test_stored_manifest_file_is_read_with_the_same_reader(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert read_manifest_file(store, "datasets/1/v1/manifest.json") is None
    store.put_bytes("datasets/1/v1/manifest.json", b'{"contributor_id": "c1"}')
    assert read_manifest_file(store, "datasets/1/v1/manifest.json") == {"contributor_id": "c1"}
    store.put_bytes("datasets/1/v2/manifest.json", b"[]")
    with pytest.raises(InvalidManifest, match="not a JSON object"):
        read_manifest_file(store, "datasets/1/v2/manifest.json")


def test_a_manifest_too_large_for_its_file_is_refused_wherever_it_comes_from() -> None:
    # A request body or a stored profile is held to the size its manifest.json may have.
    big = _manifest(tool_notes="x" * MANIFEST_MAX_BYTES, license="nope")
    with pytest.raises(InvalidManifest) as caught:
        parse_manifest(big)
    assert caught.value.problems == [
        ManifestProblem("", f"the manifest is larger than {MANIFEST_MAX_BYTES} bytes"),
        ManifestProblem("license", caught.value.problems[1].message),
    ]
    assert parse_manifest(_manifest(tool_notes="x" * 1000)).contributor_id == "supplier-17"


def test_local_manifest_file_is_checked_in_form_and_content(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_manifest()), encoding="utf-8")
    assert load_manifest_file(path) == _manifest()
    path.write_bytes(b" " * (MANIFEST_MAX_BYTES + 5))
    with pytest.raises(InvalidManifest, match="larger than"):
        load_manifest_file(path)
    path.write_text(json.dumps(_manifest(license="nope")), encoding="utf-8")
    with pytest.raises(InvalidManifest, match="license"):
        load_manifest_file(path)
    with pytest.raises(FileNotFoundError):
        load_manifest_file(tmp_path / "absent.json")


# --- reward formula ------------------------------------------------------------------------


def test_module_docstring_worked_example() -> None:
    # 1,000 rows, 98 % complete, 90 % unique, accuracy 0.80 -> 0.90 (12.5 %).
    reward = compute_reward(12.5, QualityFactors(0.98, 0.9, 1000, passed=True))
    assert reward == RewardBreakdown(
        base_tokens=12.5,
        quality_factor=0.98,
        volume_factor=0.75,
        uniqueness_factor=0.9,
        total_tokens=8.26875,
    )
    assert split_reward(reward.total_tokens, [(WALLET_A, 0.6), (WALLET_B, 0.4)]) == [
        (WALLET_A, 4.96125),
        (WALLET_B, 3.3075),
    ]


def test_perfect_large_dataset_earns_one_token_per_percent() -> None:
    reward = compute_reward(7.25, QualityFactors(1.0, 1.0, 50_000, passed=True))
    assert reward.total_tokens == 7.25


@pytest.mark.parametrize(
    ("rows", "factor"), [(0, 0.0), (1, 0.0), (100, 0.5), (1000, 0.75), (10_000, 1.0), (10**6, 1.0)]
)
def test_volume_factor_saturates_at_ten_thousand_rows(rows: int, factor: float) -> None:
    assert volume_factor(rows) == pytest.approx(factor)


def test_volume_factor_grows_with_rows() -> None:
    factors = [volume_factor(n) for n in (100, 200, 500, 2000, 5000)]
    assert factors == sorted(factors)
    assert all(0 < f < 1 for f in factors)


def test_no_tokens_without_improvement() -> None:
    quality = QualityFactors(1.0, 1.0, 10_000, passed=True)
    assert compute_reward(0.0, quality).total_tokens == 0.0
    worse = compute_reward(-4.0, quality)
    assert worse.total_tokens == 0.0
    assert worse.base_tokens == 0.0


def test_no_tokens_when_quality_checks_failed() -> None:
    reward = compute_reward(12.5, QualityFactors(0.9, 0.9, 1000, passed=False))
    assert reward.total_tokens == 0.0
    # The measured terms are still reported, so the contributor sees why.
    assert reward.base_tokens == 12.5
    assert reward.quality_factor == 0.9


def test_total_is_rounded_to_six_decimals() -> None:
    reward = compute_reward(10.0, QualityFactors(1 / 3, 1.0, 10_000, passed=True))
    assert reward.total_tokens == 3.333333


@pytest.mark.parametrize(
    "changes",
    [
        {"completeness": 1.2},
        {"uniqueness": -0.1},
        {"row_count": -1},
        {"row_count": 10.5},
        {"completeness": float("nan")},
    ],
)
def test_quality_factors_out_of_range_are_invalid_input(changes: dict[str, Any]) -> None:
    values: dict[str, Any] = {
        "completeness": 1.0,
        "uniqueness": 1.0,
        "row_count": 100,
        "passed": True,
    }
    values.update(changes)
    with pytest.raises(InvalidInput):
        QualityFactors(**values)


def test_non_finite_improvement_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        compute_reward(math.inf, QualityFactors(1.0, 1.0, 100, passed=True))


# --- split ---------------------------------------------------------------------------------


def _units(tokens: float) -> int:
    return round(tokens * 1_000_000)


@pytest.mark.parametrize(
    ("total", "weights"),
    [
        (1.0, (1, 1, 1)),
        (8.26875, (0.6, 0.4)),
        (0.000001, (0.5, 0.5)),
        (123.456789, (0.1, 0.2, 0.3, 0.4)),
        (10.0, (0.333333, 0.333333, 0.333334)),
        (7.0, (0.7,)),
    ],
)
def test_split_adds_up_to_the_total_in_millionths(total: float, weights: tuple[float, ...]) -> None:
    shares = [(EIP55_EXAMPLES[i], w) for i, w in enumerate(weights)]
    parts = split_reward(total, shares)
    assert [wallet for wallet, _ in parts] == [wallet for wallet, _ in shares]
    assert sum(_units(tokens) for _, tokens in parts) == _units(total)
    assert round(math.fsum(tokens for _, tokens in parts), 6) == total


def test_split_remainder_goes_to_the_largest_remainder_then_the_first_listed() -> None:
    thirds = [(EIP55_EXAMPLES[i], 1.0) for i in range(3)]
    assert [t for _, t in split_reward(1.0, thirds)] == [0.333334, 0.333333, 0.333333]
    # 0.000002 tokens by weights 0.2 / 0.4 / 0.4: exact shares 0.4, 0.8, 0.8 millionths.
    weighted = [(EIP55_EXAMPLES[0], 0.2), (EIP55_EXAMPLES[1], 0.4), (EIP55_EXAMPLES[2], 0.4)]
    assert [t for _, t in split_reward(0.000002, weighted)] == [0.0, 0.000001, 0.000001]


def test_split_is_deterministic() -> None:
    shares = [(EIP55_EXAMPLES[i], w) for i, w in enumerate((0.15, 0.35, 0.5))]
    assert split_reward(9.87654, shares) == split_reward(9.87654, shares)


def test_zero_total_splits_into_zeros() -> None:
    assert split_reward(0.0, [(WALLET_A, 0.5), (WALLET_B, 0.5)]) == [
        (WALLET_A, 0.0),
        (WALLET_B, 0.0),
    ]


@pytest.mark.parametrize(
    "shares",
    [
        [],
        [(WALLET_A, 0.0)],
        [(WALLET_A, 0.5), (WALLET_A.lower(), 0.5)],
        [("0x123", 1.0)],
    ],
)
def test_split_refuses_bad_recipients(shares: list[tuple[str, float]]) -> None:
    with pytest.raises(InvalidInput):
        split_reward(1.0, shares)


def test_split_refuses_a_negative_total() -> None:
    with pytest.raises(InvalidInput):
        split_reward(-1.0, [(WALLET_A, 1.0)])
