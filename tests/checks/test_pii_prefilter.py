"""The Arrow pre-filter never drops a value Presidio would flag (pipeline/checks/pii_prefilter.py).

Presidio with every recognizer is the reference: for each value, the entity types it finds must
all be among those whose pre-filter pattern matched. Checked on known PII in many spellings and
on random strings built from the characters these patterns care about.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.checks import pii
from pipeline.checks.pii_prefilter import ENTITIES, GATE, candidates, entities_of, gate_mask

KNOWN = [
    "alice@example.com",
    "Mail: ALICE.Smith+tag@Mail.Example.CO.UK!",
    "reach me at j_o-e@sub-domain.example.org, thanks",
    "+1 212-555-0199",
    "(415) 555-2671",
    "+44 20 7946 0958",
    "+44 (0)20 7946 0958",
    "tel. 030 901820",
    "0142685300",
    "+49 30 901820",
    "call +1 212 555 0199 after 5pm",
    "4111 1111 1111 1111",
    "5500-0000-0000-0004",
    "378282246310005",
    "3714-496353-98431",
    "my card is 4111111111111111.",
    "４１１１　１１１１　１１１１　１１１１",
    "カード ５５００－００００－００００－０００４",
    "4111－1111－1111－1111",
    "id 55797805-6403-4830-893e-5ee7dc49c108, tel 06206166",
    "DE89 3704 0044 0532 0130 00",
    "GB82WEST12345698765432",
    "FR1420041010050500013M02606",
    "iban: GB82-WEST-1234-5698-7654-32",
    "536-22-1234",
    "078 05 1120",
    "ssn 401.12.3456",
    "192.168.1.20",
    "10.0.0.1/24",
    "2001:db8::1",
    "fe80::1%eth0",
    "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "::ffff:192.0.2.128",
    "::1",
    "https://www.example.org/x?q=1",
    "HTTPS://Example.COM/Path",
    "www.foo.com",
    "see shop.example.net or 'http://data.example.net/a'",
    "1BoatSLRHtKNngkdXEeobR76b53LETtpyT",
    "3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy",
    "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq",
    "0x52908400098527886E0F7030069857D2E4169EE7",
    "wallet 0xde0B295669a9FD93d5F28D9Ec85E40f4cb697BAe.",
]

ALPHABET = "0123456789" * 4 + "abcxyzDEFGHK" + "@.-: /+()" + "éß٣" + "   "
FRAGMENTS = [
    "@example.com",
    ".org",
    "www.",
    "http://",
    "::",
    "+1 ",
    "4111",
    "DE89",
    "0x",
    "bc1",
    "192.168.",
    "-555-",
]


def random_values(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    values = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.3:
                parts.append(rng.choice(FRAGMENTS))
            else:
                parts.append("".join(rng.choices(ALPHABET, k=rng.randint(1, 12))))
        values.append("".join(parts))
    return values


@pytest.fixture(scope="module", autouse=True)
def analyzer_loaded() -> None:
    pii.warm_up()


def prefilter_entities(values: list[str]) -> dict[str, set[str]]:
    found, bits, _ = candidates(pa.array(values, pa.string()))
    return {
        value: set(entities_of(mask))
        for value, mask in zip(found.to_pylist(), bits.tolist(), strict=True)
    }


def presidio_entities(values: list[str]) -> list[set[str]]:
    return pii.confirm(values, [list(ENTITIES)] * len(values), batch_size=256)


def test_every_entity_the_analyzer_reports_has_a_pattern() -> None:
    assert sorted(ENTITIES) == pii.supported_entities()


@pytest.mark.parametrize(
    "values", [KNOWN, random_values(1500, seed=7)], ids=["known PII", "random strings"]
)
def test_what_presidio_finds_the_prefilter_passes(values: list[str]) -> None:
    passed = prefilter_entities(values)
    flagged = 0
    for value, found in zip(values, presidio_entities(values), strict=True):
        if found:
            flagged += 1
            assert found <= passed.get(value.strip(), set()), value
    assert flagged >= min(len(values) // 20, len(KNOWN) - 2)  # the corpus does hold PII


def test_ordinary_text_is_not_a_candidate() -> None:
    # (Dates and long order numbers are phone candidates: Presidio clears them.)
    values = [
        "Upgraded to fiber optic after 7 months",
        "Month-to-month",
        "Bank transfer (automatic)",
        "7590-VHVEG",
        "order 123456 shipped to Lyon, ref ORD-17",
        "1681.45",
        "v2.1 build 20",
        "",
    ]
    assert prefilter_entities(values) == {}


@pytest.mark.parametrize("with_counts", [False, True], ids=["rows", "distinct values"])
def test_the_one_pass_gate_passes_exactly_what_the_two_unions_pass(with_counts: bool) -> None:
    # Long runs of letters and digits pass the gate without being wallets: they must not count.
    values = [
        *KNOWN,
        *random_values(500, seed=11),
        "token ABCDEFGHJKLMNPQRSTUVWXYZabcdefgh",
        "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        None,
    ]
    column = pa.array(values, pa.string())
    counts = pa.array([index % 3 + 1 for index in range(len(values))], pa.int64())
    given = counts if with_counts else None
    plain = candidates(column, given)
    gated = candidates(column, given, gated=True)
    assert gated[0].to_pylist() == plain[0].to_pylist()
    assert gated[1].tolist() == plain[1].tolist()
    assert gated[2] == plain[2] > 0


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
@pytest.mark.parametrize("run_values", [2, 7, 256])
def test_the_gate_over_runs_of_values_passes_exactly_the_values_it_matches(
    kind: pa.DataType, run_values: int
) -> None:
    # Rare candidates among plain text, some at the edges of a run; a slice starts mid-buffer.
    values: list[str | None] = [
        f"ticket {index}, {random_values(1, seed=index)[0]}" for index in range(2_000)
    ]
    for row in (0, 1, 255, 256, 257, 1_023, 1_999):
        values[row] = f"call {row} at 030 901820 or mail a@b.example"
    values[600] = None
    column = pa.array(values, kind).slice(1, 1_998)
    expected = pc.fill_null(pc.match_substring_regex(column, GATE), False).to_pylist()
    assert gate_mask(column, run_values).to_pylist() == expected
    assert sum(expected) >= 6
    chunked = pa.chunked_array([column.slice(0, 700), column.slice(700)])
    assert gate_mask(chunked, run_values).to_pylist() == expected
