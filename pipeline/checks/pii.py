"""PII scanning of tabular data: one offline Presidio analyzer shared by the API and the pipeline.

The analyzer runs Presidio's pattern recognizers (e-mail, phone, credit card, IBAN, IP address,
US SSN, URL, Bitcoin address) plus one for Ethereum wallet addresses, on a blank spaCy pipeline:
no trained spaCy model exists on our machines and none may be downloaded, and pattern
recognizers only need the tokenizer. Nothing here touches the network: tldextract, which the
e-mail recognizer uses to check domains, is pointed at the public suffix list bundled with it.

A scan reads only text columns, de-duplicates each column, and samples at most
MAX_SAMPLE_SIZE values shared fairly between the columns, so its cost is bounded whatever the
file size. Reports name columns and entity types with counts, never the values themselves.
"""

from __future__ import annotations

import atexit
import logging
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pipeline.core.config import Settings

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

# A sample bounds the number of values, this bounds their length: one free-text cell must
# not cost as much as thousands of short ones.
MAX_VALUE_CHARS = 4096

# Fixed so that the same file always yields the same sample and the same report.
SAMPLE_SEED = 0

ETHEREUM_ADDRESS = "ETHEREUM_ADDRESS"


@dataclass(frozen=True)
class PiiReport:
    """What a scan found: per column, per entity type, the number of sampled values holding it."""

    findings: dict[str, dict[str, int]] = field(default_factory=dict)  # only columns with hits
    scanned_columns: tuple[str, ...] = ()
    scanned_values: int = 0
    seconds: float = 0.0
    skipped: bool = False  # ENABLE_PII_DETECTION was off: nothing was looked at

    @property
    def found(self) -> bool:
        return any(self.findings.values())

    @property
    def entity_types(self) -> list[str]:
        return sorted({entity for counts in self.findings.values() for entity in counts})

    def summary(self) -> str:
        """A sentence safe for responses and logs: column names and entity types, no values."""
        if self.skipped:
            return "PII detection is disabled"
        if not self.found:
            return f"no PII found in {self.scanned_values} sampled values"
        parts = []
        for column, counts in self.findings.items():
            kinds = ", ".join(f"{entity} ({n})" for entity, n in counts.items())
            parts.append(f"{column}: {kinds}")
        return f"PII found in {len(parts)} column(s): " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "findings": {column: dict(counts) for column, counts in self.findings.items()},
            "scanned_columns": list(self.scanned_columns),
            "scanned_values": self.scanned_values,
            "seconds": round(self.seconds, 3),
            "skipped": self.skipped,
        }


def scan_frame(
    df: pd.DataFrame, settings: Settings, columns: Sequence[str] | None = None
) -> PiiReport:
    """Scan the text columns of `df` (or those of `columns` that hold text) for PII."""
    if not settings.enable_pii_detection:
        return PiiReport(skipped=True)
    started = time.perf_counter()
    if columns is not None:
        missing = [name for name in columns if name not in df.columns]
        if missing:
            raise ValueError(f"columns not in the frame: {', '.join(map(str, missing))}")
    wanted = set(columns) if columns is not None else None
    distinct: dict[str, list[str]] = {}
    # By position: labels may repeat (a CSV header can), and df[label] would be a frame then.
    for position, name in enumerate(df.columns):
        series = df.iloc[:, position]
        if (wanted is None or name in wanted) and _is_text(series):
            distinct.setdefault(str(name), []).extend(_distinct_text(series))
    quotas = _fair_quotas([len(values) for values in distinct.values()], settings.max_sample_size)
    findings: dict[str, dict[str, int]] = {}
    scanned = 0
    for (name, values), quota in zip(distinct.items(), quotas, strict=True):
        sample = _deterministic_sample(values, quota)
        counts = _scan(sample, settings.batch_size)
        if counts:
            findings[name] = counts
        scanned += len(sample)
    report = PiiReport(
        findings=findings,
        scanned_columns=tuple(distinct),
        scanned_values=scanned,
        seconds=time.perf_counter() - started,
    )
    logger.info("%s (%d values, %.2f s)", report.summary(), scanned, report.seconds)
    return report


def scan_values(values: Iterable[Any], settings: Settings) -> dict[str, int]:
    """Entity type -> number of distinct values holding it, over at most MAX_SAMPLE_SIZE values.

    The first MAX_SAMPLE_SIZE distinct non-empty values are scanned, so an iterator of any
    length is read only that far.
    """
    if not settings.enable_pii_detection:
        return {}
    distinct: dict[str, None] = {}
    for value in values:
        text = _as_text(value)
        if text:
            distinct[text] = None
            if len(distinct) >= settings.max_sample_size:
                break
    return _scan(list(distinct), settings.batch_size)


def warm_up() -> None:
    """Load the analyzer now (one to two seconds) rather than during the first scan."""
    _analyzer()


# Column selection and sampling.


def _is_text(series: pd.Series) -> bool:
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        # Parquet dictionary columns arrive as categoricals; their categories are the values.
        dtype = dtype.categories.dtype
    # Object columns also carry JSON's nested lists and dicts, which can hide e-mails as well.
    return bool(pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype))


def _as_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    text = value if isinstance(value, str) else str(value)
    return text.strip()[:MAX_VALUE_CHARS]


def _distinct_text(series: pd.Series) -> list[str]:
    """Distinct non-empty values in first-seen order, so a sample does not depend on hashing."""
    present = series.dropna()
    try:
        values: Iterable[Any] = pd.unique(present)
    except TypeError:  # lists and dicts from JSON are unhashable
        values = present.map(_as_text)
    distinct: dict[str, None] = {}
    for value in values:
        text = _as_text(value)
        if text:
            distinct[text] = None
    return list(distinct)


def _fair_quotas(sizes: Sequence[int], budget: int) -> list[int]:
    """Share `budget` between columns: none gets more than it has, the rest go to bigger ones."""
    quotas = [0] * len(sizes)
    remaining = budget
    left = len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        quotas[index] = min(sizes[index], remaining // left)
        remaining -= quotas[index]
        left -= 1
    return quotas


def _deterministic_sample(values: list[str], size: int) -> list[str]:
    if size >= len(values):
        return values
    rng = np.random.default_rng(SAMPLE_SEED)
    picked = np.sort(rng.choice(len(values), size=size, replace=False))
    return [values[i] for i in picked]


# Scanning.


def _batches(values: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _scan(values: list[str], batch_size: int) -> dict[str, int]:
    if not values:
        return {}
    analyzer = _analyzer()
    counts: dict[str, int] = {}
    for batch in _batches(values, batch_size):
        # spaCy's tokenizer cache and Presidio's lazy recognizer loading are not documented as
        # thread-safe; scans are CPU-bound under the GIL anyway, so serialising costs nothing.
        with _scan_lock:
            nlp = analyzer.nlp_engine.process_batch(batch, LANGUAGE, batch_size=len(batch))
            per_value = [
                analyzer.analyze(text=text, language=LANGUAGE, nlp_artifacts=artifacts)
                for text, artifacts in nlp
            ]
        for results in per_value:
            for entity in {r.entity_type for r in _drop_weaker_inside(results)}:
                counts[entity] = counts.get(entity, 0) + 1
    return dict(sorted(counts.items()))


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
        _phone_recognizer(PhoneRecognizer),
        CreditCardRecognizer(),
        IbanRecognizer(),
        IpRecognizer(),
        UsSsnRecognizer(),
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
