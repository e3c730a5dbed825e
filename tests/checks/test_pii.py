"""PII scanning (spec §4.3 allow_pii, §8 pipeline settings): what is found, where, how fast."""

from __future__ import annotations

import ipaddress
import random
import socket
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from pipeline.checks import pii, pii_numbers, pii_scan, pii_tables
from pipeline.core.config import Settings

PII_COLUMNS: dict[str, tuple[str, list[str]]] = {
    "email": ("EMAIL_ADDRESS", ["alice@example.com", "bob.smith@mail.co.uk", "c+n@example.org"]),
    "phone": ("PHONE_NUMBER", ["+1 212-555-0199", "(415) 555-2671", "+44 20 7946 0958"]),
    "card": ("CREDIT_CARD", ["4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005"]),
    "iban": (
        "IBAN_CODE",
        ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "FR1420041010050500013M02606"],
    ),
    "ssn": ("US_SSN", ["536-22-1234", "212-67-4321", "401-12-3456"]),
    "ip": ("IP_ADDRESS", ["192.168.1.20", "10.0.0.1", "2001:db8::1"]),
    "wallet": (
        "ETHEREUM_ADDRESS",
        [
            "0x52908400098527886E0F7030069857D2E4169EE7",
            "0xde0B295669a9FD93d5F28D9Ec85E40f4cb697BAe",
            "0x0000000000000000000000000000000000000001",
        ],
    ),
    "website": ("URL", ["https://www.example.org/x", "www.foo.com", "http://data.example.net/a"]),
}


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(marketplace_data_dir=tmp_path_factory.mktemp("pii"))


@pytest.fixture(scope="module", autouse=True)
def analyzer_loaded() -> None:
    pii.warm_up()


def clean_frame(rows: int = 300) -> pd.DataFrame:
    """Columns like a churn dataset's: categories, ids, amounts as text, dates, sentences."""
    contracts = ["Month-to-month", "One year", "Two year"]
    payments = ["Electronic check", "Mailed check", "Bank transfer (automatic)"]
    return pd.DataFrame(
        {
            "customerID": [f"{7000 + i}-VHV{chr(65 + i % 26)}G" for i in range(rows)],
            "order": [f"ORD-2024-{i * 3217 % 1000000:06d}" for i in range(rows)],
            "Contract": [contracts[i % 3] for i in range(rows)],
            "PaymentMethod": [payments[i % 3] for i in range(rows)],
            "TotalCharges": [f"{20 + i * 7.31:.2f}" for i in range(rows)],
            "signup": [f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(rows)],
            "note": [f"Upgraded to fiber optic after {i % 9 + 1} months" for i in range(rows)],
            "tenure": list(range(rows)),
            "monthly": [20.5 + i for i in range(rows)],
        }
    )


def test_each_entity_is_found_in_its_own_column(settings: Settings) -> None:
    df = pd.DataFrame({name: values for name, (_, values) in PII_COLUMNS.items()})

    report = pii_tables.scan_frame(df, settings)

    expected = {name: {entity: len(values)} for name, (entity, values) in PII_COLUMNS.items()}
    assert report.findings == expected
    assert report.found


def test_pii_inside_free_text_is_found(settings: Settings) -> None:
    df = pd.DataFrame(
        {
            "comment": [
                "contact me at dave@example.com",
                "my card is 4111111111111111",
                "call +1 212 555 0199 after 5pm",
                "all good, thanks",
            ]
        }
    )

    report = pii_tables.scan_frame(df, settings)

    assert report.findings == {"comment": {"CREDIT_CARD": 1, "EMAIL_ADDRESS": 1, "PHONE_NUMBER": 1}}


def test_email_domain_is_not_also_counted_as_url(settings: Settings) -> None:
    assert pii_tables.scan_values(["john.doe@example.com"], settings) == {"EMAIL_ADDRESS": 1}


def test_ordinary_categories_ids_numbers_and_dates_find_nothing(settings: Settings) -> None:
    report = pii_tables.scan_frame(clean_frame(), settings)

    assert report.findings == {}
    assert not report.found
    assert report.summary().startswith("no PII found")


def test_decimal_amounts_are_not_phone_numbers(settings: Settings) -> None:
    # python-phonenumbers accepts "1681.45" as a German number; the scanner must not.
    amounts = [f"{1000 + i * 0.37:.2f}" for i in range(1000)] + ["1681.45", "3326.95"]

    assert pii_tables.scan_values(amounts, settings) == {}


# UUIDs whose digit groups Presidio took for phone numbers ("06206166", "4940-8881",
# "919148838429") and a Luhn-valid card ("55797805-6403-4830"): 14 of 10,000 seeded ones.
FALSE_POSITIVE_UUIDS = [
    "06206166-b9a5-4ab3-a78b-8a76de383e51",
    "2ebd3ebe-870d-4940-8881-bf5a7212b3ad",
    "cc10b612-24bd-4fe6-9bdd-919148838429",
    "55797805-6403-4830-893e-5ee7dc49c108",
]
DIGIT_ENTITIES = ["PHONE_NUMBER", "CREDIT_CARD", "US_SSN"]


def test_digit_groups_of_uuids_are_not_phone_or_card_numbers(settings: Settings) -> None:
    rng = random.Random(33)
    uuids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(10_000)]
    assert set(FALSE_POSITIVE_UUIDS) <= set(uuids)
    # Presidio itself, asked for them: a match inside a UUID is dropped ...
    upper = [value.upper() for value in FALSE_POSITIVE_UUIDS]
    assert pii.confirm(upper, [DIGIT_ENTITIES] * 4, batch_size=8) == [set()] * 4
    # ... also where a long value's window cuts the UUID after its phone-like group.
    cut = "lorem ipsum " * 400
    cut = cut[: pii.MAX_VALUE_CHARS - 23] + FALSE_POSITIVE_UUIDS[1] + " dolor" * 200
    assert pii.confirm([cut], [DIGIT_ENTITIES], batch_size=8) == [set()]

    report = pii_scan.PiiScanner(settings, ["id"])
    report.add("id", pa.array(uuids))

    assert report.report().findings == {}
    # The pre-filter matches the digit patterns with UUIDs blanked out: nothing to confirm.
    assert report.report().confirmed_values == 0


def test_pii_beside_a_uuid_is_still_found(settings: Settings) -> None:
    values = [
        f"ticket {FALSE_POSITIVE_UUIDS[0]}: call +1 212-555-0199",
        f"{FALSE_POSITIVE_UUIDS[1]} paid with 4111 1111 1111 1111",
        f"ref {FALSE_POSITIVE_UUIDS[2]}, ssn 536-22-1234",
    ]

    assert pii_tables.scan_values(values, settings) == {
        "CREDIT_CARD": 1,
        "PHONE_NUMBER": 1,
        "US_SSN": 1,
    }


def test_pii_right_against_a_uuid_is_found(settings: Settings) -> None:
    # Presidio's card pattern took the UUID's last digits and the card's first group as one
    # number, Luhn refused it, and the card was never tried: the UUID is read as blank.
    uuid_ = "550e8400-e29b-41d4-a716-446655440000"
    cards = [
        f"{uuid_} 4111 1111 1111 1111",
        f"{uuid_}4111111111111111",
        f"{uuid_}-4111-1111-1111-1111",
    ]
    phones = [f"+14155552671{uuid_}", f"4155552671{uuid_}"]

    assert pii_tables.scan_values(cards, settings) == {"CREDIT_CARD": 3}
    assert pii_tables.scan_values(phones, settings) == {"PHONE_NUMBER": 2}
    assert pii_tables.scan_values([uuid_, uuid_.upper()], settings) == {}
    assert pii.without_uuids(f"a {uuid_}-1") == "a " + " " * 36 + "-1"


def test_card_numbers_in_full_width_and_other_digits_are_found(settings: Settings) -> None:
    cards = [
        "４１１１１１１１１１１１１１１１",
        "５５００－００００－００００－０００４",
        "３７８２　８２２４６３　１０００５",
        "٤١١١ ١١١١ ١١١١ ١١١١",  # Arabic-Indic digits
    ]
    not_cards = ["４１１１１１１１１１１１１１１２", "注文番号 ２０２４０１０１"]  # no Luhn; a date

    assert pii_tables.scan_values(cards, settings) == {"CREDIT_CARD": 4}
    assert pii_tables.scan_values(not_cards, settings) == {}
    assert pii.card_text("tel ４１５５５５０１２３") == "tel 4155550123"


def test_number_columns_are_scanned_only_when_named_for_contact_numbers(
    settings: Settings,
) -> None:
    # 85 % of epoch seconds are valid phone numbers somewhere: a "created_at" column must not
    # refuse a clean file, while a "phone" column of integers is what it says.
    df = pd.DataFrame(
        {
            "amount": [4111111111111111, 5500000000000004, 1],
            "created_at": [1732579200, 1732579261, 1732579322],
            "email": ["a@example.com", None, None],
            "customerPhone": [4155550123, 3065551234, 7],
            "card_number": [4111111111111111.0, float("nan"), 12.5],
        }
    )

    report = pii_tables.scan_frame(df, settings)

    assert report.scanned_columns == ("email", "customerPhone", "card_number")
    assert report.findings == {
        "email": {"EMAIL_ADDRESS": 1},
        "customerPhone": {"PHONE_NUMBER": 2},
        "card_number": {"CREDIT_CARD": 1},
    }
    # Numbers under 8 digits, NaN and 12.5 cannot hold PII: not scanned.
    assert report.scanned_values == 1 + 2 + 1


def test_whole_decimals_of_a_contact_column_are_scanned_as_their_digits(
    settings: Settings,
) -> None:
    # A decimal's own text keeps its scale ("4155550123.00"); the scan reads the digits, and
    # fractions (an amount, not a number to call) stay out.
    table = pa.table(
        {
            "phone": pa.array(
                [Decimal("4155550123.00"), Decimal("3065551234.50"), None, Decimal("12.00")],
                pa.decimal128(12, 2),
            ),
            "balance": pa.array([Decimal("4155550123.00")], pa.decimal128(12, 2)).take([0] * 4),
        }
    )

    report = pii_tables.scan_table(table, settings)

    assert report.scanned_columns == ("phone",)
    assert report.findings == {"phone": {"PHONE_NUMBER": 1}}
    assert report.scanned_values == 1


@pytest.mark.parametrize(
    ("name", "scanned"),
    [
        ("phone", True),
        ("PhoneNumber", True),
        ("mobile_no", True),
        ("Cell Phone", True),
        ("fax", True),
        ("creditCardNumber", True),
        ("contact_number", True),
        ("Contact No", True),
        ("contact_id", False),
        ("ssn", True),
        ("ClassName", False),
        ("hotel", False),
        ("cancellation", False),
        ("discard", False),
        ("customer_id", False),
        ("account_id", False),
        ("created_at", False),
    ],
)
def test_which_number_columns_hold_contact_numbers(name: str, scanned: bool) -> None:
    assert pii_numbers.holds_contact_numbers(name) is scanned


def test_columns_argument_limits_the_scan(settings: Settings) -> None:
    df = pd.DataFrame({"email": ["a@example.com"], "other": ["b@example.com"]})

    report = pii_tables.scan_frame(df, settings, columns=["other"])

    assert report.findings == {"other": {"EMAIL_ADDRESS": 1}}
    with pytest.raises(ValueError, match="missing"):
        pii_tables.scan_frame(df, settings, columns=["missing"])


def test_categorical_and_nested_json_values_are_scanned(settings: Settings) -> None:
    df = pd.DataFrame(
        {
            "category": pd.Categorical(["x@example.com", "plain"]),
            "nested": [{"contact": "y@example.com"}, ["z"]],
        }
    )

    report = pii_tables.scan_frame(df, settings)

    assert report.findings == {
        "category": {"EMAIL_ADDRESS": 1},
        "nested": {"EMAIL_ADDRESS": 1},
    }


def test_summary_names_columns_and_types_but_never_values(settings: Settings) -> None:
    df = pd.DataFrame({"contact": ["alice@example.com", "4111 1111 1111 1111"]})

    report = pii_tables.scan_frame(df, settings)

    text = report.summary() + repr(report.to_dict())
    assert "contact" in text
    assert "EMAIL_ADDRESS" in text
    assert "CREDIT_CARD" in text
    assert "alice" not in text
    assert "4111" not in text


def test_disabled_detection_skips_without_loading_presidio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail() -> None:
        raise AssertionError("Presidio must not be used when ENABLE_PII_DETECTION is false")

    monkeypatch.setattr(pii, "_analyzer", fail)
    settings = Settings(marketplace_data_dir=tmp_path, enable_pii_detection=False)
    df = pd.DataFrame({"email": ["alice@example.com"]})

    report = pii_tables.scan_frame(df, settings)

    assert report.skipped
    assert not report.found
    assert report.scanned_values == 0
    assert pii_tables.scan_values(["alice@example.com"], settings) == {}


def test_confirmed_candidates_are_bounded_and_shared_fairly_between_columns(
    tmp_path: Path,
) -> None:
    settings = Settings(marketplace_data_dir=tmp_path, max_sample_size=500, batch_size=64)
    rows = 2000
    df = pd.DataFrame(
        {
            "few": [f"level {i % 10}" for i in range(rows)],
            "some": [f"user{i % 40}@example.com" for i in range(rows)],
            "many_a": [f"a{i}@example.com" for i in range(rows)],
            "many_b": [f"b{i}@example.org" for i in range(rows)],
        }
    )

    report = pii_tables.scan_frame(df, settings)

    # Every value met the pre-filter; 40 + 2000 + 2000 distinct candidates, of which 500 are
    # confirmed: the 40 of "some", the 460 left split between the two big columns.
    assert report.scanned_values == 4 * rows
    assert report.candidate_values == 3 * rows
    assert report.confirmed_values == 500 and report.sampled
    assert report.findings == {
        "some": {"EMAIL_ADDRESS": 40},
        "many_a": {"EMAIL_ADDRESS": 230},
        "many_b": {"EMAIL_ADDRESS": 230},
    }
    assert report.scanned_columns == ("few", "some", "many_a", "many_b")


def test_a_text_full_of_digit_runs_counts_each_run_against_the_bound(tmp_path: Path) -> None:
    # Each run is a phone candidate Presidio parses in every region it knows (about 2 ms): 100
    # runs in one cell cost what 100 short values do, so a small file of such cells cannot
    # hold the analyzer for minutes.
    settings = Settings(marketplace_data_dir=tmp_path, max_sample_size=250, batch_size=8)
    cells = [" ".join(f"n{cell:02d}{run:08d}" for run in range(100)) for cell in range(6)]
    assert all(pii.confirm_cost(cell, ["PHONE_NUMBER"]) == 100 for cell in cells)
    assert pii.confirm_cost(cells[0], ["EMAIL_ADDRESS"]) == 1

    report = pii_tables.scan_frame(
        pd.DataFrame({"log": cells, "mail": ["a@example.com"] * 6}), settings
    )

    assert report.candidate_values == 6 + 6
    assert report.confirmed_values == 1 + 2  # the address, and two cells of 100 runs
    assert report.sampled
    assert report.findings["mail"] == {"EMAIL_ADDRESS": 1}


def test_sample_is_deterministic_and_bounded_for_scan_values(tmp_path: Path) -> None:
    settings = Settings(marketplace_data_dir=tmp_path, max_sample_size=100, batch_size=7)
    emails = [f"user{i}@example.com" for i in range(1000)]
    df = pd.DataFrame({"email": emails, "constant": ["same"] * 1000})

    first = pii_tables.scan_frame(df, settings)
    second = pii_tables.scan_frame(df, settings)

    assert first.findings == second.findings == {"email": {"EMAIL_ADDRESS": 100}}
    assert first.scanned_values == 2000 and first.confirmed_values == 100
    assert pii_tables.scan_values(iter(emails), settings) == {"EMAIL_ADDRESS": 100}


def test_beyond_the_bound_the_sample_is_uniform_over_the_file_not_its_head(tmp_path: Path) -> None:
    settings = Settings(marketplace_data_dir=tmp_path, max_sample_size=500)
    # 9,000 candidates Presidio clears (no such top-level domain), then 1,000 real addresses.
    values = [f"x{i}@y.zzz" for i in range(9_000)] + [f"user{i}@example.com" for i in range(1_000)]
    shuffled = values[500:] + values[:500]

    report = pii_tables.scan_frame(pd.DataFrame({"contact": values}), settings)
    again = pii_tables.scan_frame(pd.DataFrame({"contact": shuffled}), settings)

    assert report.sampled and report.confirmed_values == 500
    found = report.findings["contact"]["EMAIL_ADDRESS"]
    assert 25 <= found <= 80  # about 500 x 1,000 / 10,000; a head sample would find none
    assert again.findings == report.findings  # the sample depends on the values, not the order


def test_duplicates_are_confirmed_once(settings: Settings) -> None:
    df = pd.DataFrame({"email": ["alice@example.com"] * 500 + [None] * 5 + [""] * 5})

    report = pii_tables.scan_frame(df, settings)

    assert report.scanned_values == 505
    assert report.confirmed_values == 1
    assert report.findings == {"email": {"EMAIL_ADDRESS": 1}}


def test_text_read_as_dictionaries_gives_the_same_report_as_plain_text(
    settings: Settings,
) -> None:
    # An upload's checks read the fingerprinted text columns as dictionaries, batch by batch.
    values = ["card", "mail a@b.example", None, "call 030 901820", "", "card"] * 300
    batches = [values[start : start + 250] for start in range(0, len(values), 250)]
    plain = pii_scan.PiiScanner(settings, ["c"])
    encoded = pii_scan.PiiScanner(settings, ["c"])
    for batch in batches:
        plain.add("c", pa.array(batch, pa.string()))
        encoded.add("c", pa.array(batch, pa.string()).dictionary_encode())

    expected, report = plain.report(), encoded.report()

    assert (report.scanned_values, report.candidate_values, report.findings) == (
        expected.scanned_values,
        expected.candidate_values,
        expected.findings,
    )
    assert report.candidate_values == 2 * 300 and report.findings["c"]


# Network: the scanner must work offline and never try to reach anything.


def _is_loopback(host: Any) -> bool:
    if isinstance(host, str) and host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Fail every non-loopback DNS lookup or connect, and record it (callers may swallow it)."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, bytes):
            host = host.decode()
        if isinstance(host, str) and not host.startswith("/") and not _is_loopback(host):
            attempts.append(address)
            raise OSError(f"test forbids network access to {address!r}")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None:
            check((host, None))
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts


def test_network_guard_sees_tldextract_default_download(network_attempts: list[Any]) -> None:
    """The guard is meaningful: tldextract's default set-up does try to fetch the suffix list."""
    import tldextract

    result = tldextract.TLDExtract(cache_dir=None)("mail.example.com")

    assert result.domain == "example"  # it falls back to its snapshot after the failure
    assert network_attempts


def test_scanning_emails_and_urls_never_touches_the_network(
    network_attempts: list[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tldextract
    import tldextract.tldextract as tld_module

    # As in a fresh process: no analyzer yet, tldextract's online default extractor unused.
    monkeypatch.setattr(pii, "_engine", None)
    monkeypatch.setattr(tld_module, "TLD_EXTRACTOR", tldextract.TLDExtract(cache_dir=None))
    settings = Settings(marketplace_data_dir=tmp_path)
    df = pd.DataFrame(
        {
            "email": ["alice@example.com", "bob@mail.example.co.uk"],
            "site": ["https://www.example.org/path", "shop.example.net"],
        }
    )

    report = pii_tables.scan_frame(df, settings)

    assert report.findings == {"email": {"EMAIL_ADDRESS": 2}, "site": {"URL": 2}}
    assert network_attempts == []
