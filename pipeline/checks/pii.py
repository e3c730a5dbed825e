"""PII confirmation: one offline Presidio analyzer shared by the API and the pipeline.

The analyzer runs Presidio's pattern recognizers (e-mail, phone, credit card, IBAN, IP address,
US SSN, URL, Bitcoin address) plus one for Ethereum wallet addresses, on a blank spaCy pipeline:
no trained spaCy model exists on our machines and none may be downloaded, and pattern
recognizers only need the tokenizer. Nothing here touches the network: tldextract, which the
e-mail recognizer uses to check domains, is pointed at the public suffix list bundled with it.

Presidio only sees the values the Arrow pre-filter passes (`pipeline.checks.pii_prefilter`),
each with the recognizers of the entity types the pre-filter saw in it; the scan of whole
files is `pipeline.checks.pii_scan`.
"""

from __future__ import annotations

import atexit
import logging
import re
import shutil
import tempfile
import threading
import unicodedata
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.checks.pii_prefilter import ETHEREUM_ADDRESS, NOT_IN_UUIDS, UUID

if TYPE_CHECKING:
    from presidio_analyzer import AnalyzerEngine, RecognizerResult

logger = logging.getLogger(__name__)

LANGUAGE = "en"

# Pattern matches scoring below this are guesses (Presidio's "very weak" SSN patterns score
# 0.05 on any nine digits): 0.5 keeps plain words and numbers out of the findings.
SCORE_THRESHOLD = 0.5

# python-phonenumbers only reports numbers that are valid for a region, yet Presidio scores
# them 0.4 and relies on context words to lift them; a blank spaCy pipeline has no lemmas, so
# context never lifts anything and a 0.5 threshold would hide every phone number.
PHONE_SCORE_THRESHOLD = 0.4

# See _phone_recognizer.
PHONE_MIN_DIGITS = 8
_PHONE_CANDIDATE = re.compile(rf"\d(?:\W*\d){{{PHONE_MIN_DIGITS - 1}}}")

# phonenumbers' STRICT_GROUPING: digits must be grouped as the region writes numbers. Presidio's
# default (VALID) took every "ORD-2024-123456" order number for a German phone number; the
# usual ways of writing real numbers ("+1 (212) 555-0199", "030 901820", "0142685300") pass.
PHONE_LENIENCY = 2

# Presidio reads a long value in windows of this many characters, each overlapping the next by
# WINDOW_OVERLAP, so that one long free-text cell costs in proportion to its length and an
# entity cut by a window's end is whole in the next one.
MAX_VALUE_CHARS = 4096
WINDOW_OVERLAP = 512

_UUID = re.compile(UUID)


# What the card recognizer reads besides ASCII digits (`card_text`): a full-width hyphen and an
# ideographic space separate the groups of a card number as "-" and " " do.
CARD_SEPARATORS = {0xFF0D: "-", 0x3000: " "}


def card_text(text: str) -> str:
    """`text` with each decimal digit of another script (full-width "４", Arabic-Indic "٤", ...)
    as its ASCII digit and `CARD_SEPARATORS` as theirs: one character for one, so positions
    hold."""
    if text.isascii():
        return text
    table: dict[int, str] = {
        ord(c): str(unicodedata.decimal(c)) for c in set(text) if c.isdecimal() and not c.isascii()
    }
    return text.translate({**table, **CARD_SEPARATORS})


def confirm(
    values: Sequence[str], entities: Sequence[Sequence[str]], batch_size: int
) -> list[set[str]]:
    """The entity types Presidio finds in each value, looking only for `entities[i]` in value i."""
    found: list[set[str]] = [set() for _ in values]
    windows = [
        (index, start, window)
        for index, value in enumerate(values)
        for start, window in _windows(value)
        if entities[index]
    ]
    analyzer = _analyzer()
    for batch in _batches(windows, batch_size):
        texts = [window for _, _, window in batch]
        # spaCy's tokenizer cache and Presidio's lazy recognizer loading are not documented as
        # thread-safe; scans are CPU-bound under the GIL anyway, so serialising costs nothing.
        with _scan_lock:
            nlp = analyzer.nlp_engine.process_batch(texts, LANGUAGE, batch_size=len(texts))
            per_window = [
                analyzer.analyze(
                    text=text,
                    language=LANGUAGE,
                    entities=list(entities[index]),
                    nlp_artifacts=artifacts,
                )
                for (index, _, _), (text, artifacts) in zip(batch, nlp, strict=True)
            ]
        for (index, start, _), results in zip(batch, per_window, strict=True):
            kept = _outside_uuids(values[index], start, _drop_weaker_inside(results))
            found[index].update(r.entity_type for r in kept)
    return found


def confirm_cost(value: str, entities: Sequence[str]) -> int:
    """What confirming `value` costs, in candidates: each run of digits the phone recognizer
    parses (in every region it knows: about 2 ms a run) counts as one, any other value as one."""
    if "PHONE_NUMBER" not in entities:
        return 1
    return max(1, sum(1 for _ in _PHONE_CANDIDATE.finditer(value)))


def warm_up() -> None:
    """Load the analyzer now (one to two seconds) rather than during the first scan."""
    _analyzer()


def supported_entities() -> list[str]:
    """The entity types the analyzer reports (each has a pre-filter pattern)."""
    return sorted(_analyzer().get_supported_entities(LANGUAGE))


def _windows(value: str) -> Iterator[tuple[int, str]]:
    """The windows of `value` Presidio reads, each with where it starts in the value."""
    if len(value) <= MAX_VALUE_CHARS:
        yield 0, value
        return
    step = MAX_VALUE_CHARS - WINDOW_OVERLAP
    for start in range(0, len(value) - WINDOW_OVERLAP, step):
        yield start, value[start : start + MAX_VALUE_CHARS]


def without_uuids(text: str) -> str:
    """`text` with each UUID (`pii_prefilter.UUID`) as spaces, one for one: positions hold."""
    if "-" not in text:
        return text
    return _UUID.sub(lambda m: " " * len(m.group()), text)


def _outside_uuids(
    value: str, start: int, results: list[RecognizerResult]
) -> list[RecognizerResult]:
    """Drop the phone, card and SSN matches (of a window starting at `start` in `value`) that
    overlap a UUID of the whole value (`pii_prefilter.UUID`: a window may cut one)."""
    if not any(r.entity_type in NOT_IN_UUIDS for r in results):
        return results
    spans = [(m.start() - start, m.end() - start) for m in _UUID.finditer(value)]
    return [
        r
        for r in results
        if r.entity_type not in NOT_IN_UUIDS
        or not any(r.start < end and begin < r.end for begin, end in spans)
    ]


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _drop_weaker_inside(results: list[RecognizerResult]) -> list[RecognizerResult]:
    """Drop a match lying inside a longer, at least as confident one of another type.

    The URL recognizer matches the domain inside every e-mail address; counting it would
    report URLs in a column of e-mails. A strong match inside a weak one (a card number in a
    URL) is kept.
    """
    kept = []
    for result in results:
        inside = any(
            other is not result
            and other.entity_type != result.entity_type
            and other.start <= result.start
            and result.end <= other.end
            and other.end - other.start > result.end - result.start
            and other.score >= result.score
            for other in results
        )
        if not inside:
            kept.append(result)
    return kept


# The analyzer: built once per process.

_build_lock = threading.Lock()
_scan_lock = threading.Lock()
_engine: AnalyzerEngine | None = None


def _analyzer() -> AnalyzerEngine:
    global _engine
    if _engine is None:
        with _build_lock:
            if _engine is None:
                _engine = _build_analyzer()
    return _engine


def _build_analyzer() -> AnalyzerEngine:
    """Presidio on a blank spaCy pipeline with the recognizers we trust, fully offline."""
    _use_bundled_suffix_list()
    # presidio and spaCy (about 1.5 s) load with the first scan: the API's benchmark upload
    # imports this module.
    import spacy
    from presidio_analyzer import AnalyzerEngine, Pattern, PatternRecognizer, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NlpEngineProvider
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        CryptoRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UrlRecognizer,
        UsSsnRecognizer,
    )

    model_dir = _blank_model_dir(spacy)
    provider = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": LANGUAGE, "model_name": str(model_dir)}],
        }
    )
    # "0x" and 40 hex digits is the shape of nothing else common in data, hence a high score.
    ethereum = PatternRecognizer(
        supported_entity=ETHEREUM_ADDRESS,
        name="EthereumAddressRecognizer",
        patterns=[Pattern("Ethereum address", r"\b0x[0-9a-fA-F]{40}\b", 0.8)],
        context=["wallet", "address", "eth", "ethereum"],
    )
    recognizers = [
        EmailRecognizer(),
        _phone_recognizer(_uuids_blanked(PhoneRecognizer)),
        _card_recognizer(_uuids_blanked(CreditCardRecognizer)),
        IbanRecognizer(),
        IpRecognizer(),
        _uuids_blanked(UsSsnRecognizer)(),
        UrlRecognizer(),
        CryptoRecognizer(),
        ethereum,
    ]
    registry = RecognizerRegistry(recognizers=recognizers, supported_languages=[LANGUAGE])
    engine = AnalyzerEngine(
        registry=registry,
        nlp_engine=provider.create_engine(),
        supported_languages=[LANGUAGE],
        default_score_threshold=SCORE_THRESHOLD,
    )
    # Recognizers and the suffix list load lazily on first use; do it once, here.
    engine.analyze(text="warm up a@example.com 212-555-0199", language=LANGUAGE)
    return engine


def _uuids_blanked(recognizer_class: type) -> type:
    """A recognizer of a `NOT_IN_UUIDS` type that reads the text with its UUIDs blanked out.

    Dropping its findings that overlap a UUID (`_outside_uuids`) is not enough: its pattern
    may match digits of a UUID together with a number beside it ("…446655440000 4111 1111
    1111 1111": Luhn refuses that match, and the card after it, already consumed, is never
    tried). Blanked, the UUID's digits are matched with nothing.
    """

    class UuidsBlanked(recognizer_class):  # type: ignore[misc]
        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None) -> list[Any]:
            return list(super().analyze(without_uuids(text), entities, nlp_artifacts))

    UuidsBlanked.__name__ = recognizer_class.__name__
    return UuidsBlanked


def _phone_recognizer(phone_class: type) -> Any:
    """Presidio's phone recognizer, keeping only matches with at least PHONE_MIN_DIGITS digits.

    python-phonenumbers accepts short German service numbers and some 7-digit US numbers, so
    amounts such as "1681.45" would count as phone numbers; a subscriber number written with
    its area code has 8 digits or more. A number is digits and punctuation only, so a text
    without 8 digits separated by non-word characters is skipped: phonenumbers costs about
    90 µs per region and text, most of a scan's time.
    """

    class LongPhoneRecognizer(phone_class):  # type: ignore[misc]
        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None) -> list[Any]:
            if not _PHONE_CANDIDATE.search(text):
                return []
            results = super().analyze(text, entities, nlp_artifacts)
            return [r for r in results if _digit_count(text[r.start : r.end]) >= PHONE_MIN_DIGITS]

    recognizer = LongPhoneRecognizer(leniency=PHONE_LENIENCY)
    recognizer.score_thresholds = {"PHONE_NUMBER": PHONE_SCORE_THRESHOLD}
    return recognizer


def _card_recognizer(card_class: type) -> Any:
    """Presidio's card recognizer, reading digits of every script as ASCII digits.

    Its pattern names the leading digit (`4\\d{3}`), so a card written in full-width digits
    ("４１１１…", as East Asian input methods type them) was never matched, though Luhn would take
    it. The value is read through `card_text` first.
    """

    class AnyDigitCardRecognizer(card_class):  # type: ignore[misc]
        def analyze(self, text: str, entities: list[str], nlp_artifacts: Any = None) -> list[Any]:
            return list(super().analyze(card_text(text), entities, nlp_artifacts))

    return AnyDigitCardRecognizer()


def _digit_count(text: str) -> int:
    return sum(ch.isdigit() for ch in text)


def _use_bundled_suffix_list() -> None:
    """Point tldextract's module-level extractor at the suffix list shipped in its wheel.

    Presidio's EmailRecognizer calls `tldextract.extract`, which resolves the module global
    `TLD_EXTRACTOR` on every call; its default instance fetches the list from the internet
    at first use and caches it under the home directory.
    """
    # Presidio's dependency, loaded with it (see `_build_analyzer`).
    import tldextract
    import tldextract.tldextract as tld_module

    offline = getattr(tld_module.TLD_EXTRACTOR, "suffix_list_urls", None) == ()
    if not offline:
        tld_module.TLD_EXTRACTOR = tldextract.TLDExtract(
            suffix_list_urls=(), cache_dir=None, fallback_to_snapshot=True
        )


def _blank_model_dir(spacy: Any) -> str:
    """A blank English spaCy pipeline on disk, as Presidio loads models by name or path."""
    path = tempfile.mkdtemp(prefix="pii-spacy-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    model_dir = f"{path}/blank_en"
    spacy.blank(LANGUAGE).to_disk(model_dir)
    return model_dir
