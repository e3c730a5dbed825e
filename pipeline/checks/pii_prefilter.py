"""The PII pre-filter: Arrow regular expressions that pass every value Presidio could flag.

Presidio costs about a millisecond per value, far too much for every value of a large file, so each
text value first meets RE2 (`pyarrow.compute.match_substring_regex`, two passes of unions of the
patterns below, or one pass of a gate where candidates are rare), one pattern per entity type the
analyzer knows (`pipeline.checks.pii`). Each pattern is a *superset* of what its Presidio
recognizer reports: every substring the recognizer's regular expression (Python `regex`, Unicode,
mostly case-insensitive) can match contains a match of the pattern here, so a value this filter
drops cannot hold a finding. Only the values it passes ("candidates", usually a tiny share) are
confirmed by Presidio, with only the recognizers of the entity types whose pattern matched.

Python's `\\d` matches the decimal digits of every script; RE2's only ASCII. Patterns written
with Unicode classes repeated (`\\p{Nd}{3}`, `[^\\p{L}\\p{N}_]*`) cost 20 ms to compile, and
Arrow compiles a pattern on every call, i.e. for every batch: so the digit patterns are written
in ASCII, and any value holding a non-ASCII decimal digit is a candidate for them outright (such
values are rare). `tests/checks/test_pii_prefilter.py` checks each pattern against its recognizer.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ETHEREUM_ADDRESS = "ETHEREUM_ADDRESS"

# A decimal digit outside ASCII: Nd and not 0-9 (RE2 has no class subtraction; this negated
# class of "not Nd" and 0-9 is the same set, and compiles in a tenth of a millisecond).
OTHER_DIGIT = r"[^\P{Nd}0-9]"

# Between the groups of a card number: "-", " ", a full-width hyphen or an ideographic space.
_GAP = r"[- \x{FF0D}\x{3000}]?"

# Entity type -> RE2 pattern. Presidio's patterns, and why each line here covers them:
PATTERNS: dict[str, str] = {
    # Presidio: a local part, "@", then \w+ labels joined by "-" with at least one ".".
    "EMAIL_ADDRESS": r"[^\s@]@[^\s@]+\.[^\s@]",
    # Our LongPhoneRecognizer only looks at texts where 8 digits follow each other separated by
    # non-word characters only (its own gate, `\d(?:\W*\d){7}` in Python): with ASCII digits,
    # those separators are outside [A-Za-z0-9_].
    "PHONE_NUMBER": r"[0-9](?:[^A-Za-z0-9_]*[0-9]){7}|" + OTHER_DIGIT,
    # Presidio: a leading 1, 3, 4, 5 or 6, then blocks of 3 digits at least, separated by at
    # most one "-" or " " (Luhn then confirms); ours reads other digits as digits and a
    # full-width hyphen or an ideographic space as a separator (`pii.card_text`).
    "CREDIT_CARD": rf"[13456][0-9]{{3}}{_GAP}[0-9]{{3,4}}{_GAP}[0-9]{{3,4}}{_GAP}[0-9]{{3,5}}|"
    + OTHER_DIGIT,
    # Presidio (case-sensitive): 2 capitals, 2 digits, then at least two blocks of 4.
    "IBAN_CODE": r"[A-Z]{2}[0-9]{2}(?:[ -]?[A-Z0-9]{4}){2}",
    # IPv4 dotted quads; every IPv6 form either holds "::" or 8 colon-separated groups (the
    # IPv4-embedded forms hold "::" or a dotted quad).
    "IP_ADDRESS": r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|::"
    r"|(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]",
    # All five SSN patterns, weak ones included: 3, 2 and 4 digits, each gap one "-", " ", "."
    # or nothing.
    "US_SSN": r"[0-9]{3}[- .]?[0-9]{2}[- .]?[0-9]{4}",
    # Presidio: `[a-z0-9.\-]{1,253}[.]` then one of its TLDs, all of two ASCII letters or more.
    "URL": r"(?i)[a-z0-9.-]\.[a-z]{2}",
    # Presidio's Bitcoin pattern, case-insensitive: "bc1" or "1" or "3", then 25 to 59 of
    # [a-z0-9] (the checksum then confirms).
    "CRYPTO": r"(?i)(?:bc1|[13])[a-z0-9]{25}",
    # Ours (pipeline.checks.pii): "0x" and 40 hex digits.
    ETHEREUM_ADDRESS: r"(?i)0x[0-9a-f]{40}",
}

ENTITIES: tuple[str, ...] = tuple(PATTERNS)

# A UUID's shape (8-4-4-4-12 hex digits, any version, no bounds: a GUID inside a longer token
# too). Its digit groups hold valid phone numbers for some region ("06206166", "4940-8881") and
# now and then a Luhn-valid card number ("55797805-6403-4830"): about 14 of 10,000 random UUIDs.
# No phone, card or SSN is written inside one, so Presidio's findings of these types that
# overlap a UUID are dropped (`pii.confirm`), and their patterns here are matched with the
# UUIDs blanked out: a column of UUIDs then yields no candidate at all. Both use this one
# expression (Python `re` and RE2 find the same leftmost spans for it).
UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
NOT_IN_UUIDS = frozenset({"PHONE_NUMBER", "CREDIT_CARD", "US_SSN"})

# The candidates are found by two passes over every value, each the union of a group of patterns;
# the per-entity patterns then run on the candidates only. One union of all nine costs 5 µs a
# value instead of 0.5: the counted repeats of the wallet patterns ({25}, {40}) multiply with the
# card pattern's into more DFA states than RE2's memory budget, and RE2 falls back to its NFA.
_WALLETS = ("CRYPTO", ETHEREUM_ADDRESS)
PASSES: tuple[str, ...] = tuple(
    "|".join(
        f"(?:{pattern})" for entity, pattern in PATTERNS.items() if wallet == (entity in _WALLETS)
    )
    for wallet in (False, True)
)

# One pass over every value instead of two (`gated`): a superset of both unions, the first and
# any run of 26 characters of the wallet patterns' class (a Bitcoin address holds at least 26,
# an Ethereum one 42). On text with few candidates it costs what the first union alone does; the
# two exact unions then run on the values it passed only. On digit-heavy text its DFA outgrows
# RE2's budget and it costs up to five times a union: use it where candidates are rare.
GATE = f"{PASSES[0]}|(?:(?i)[a-z0-9]{{26}})"

# The gate first runs over runs of this many consecutive values, each run matched as one text
# (the values' bytes are contiguous in an Arrow array: a view, no copy), then value by value
# over the runs it passed only. A match inside a value is inside its run, so no value is lost;
# RE2's cost per value (about 40 ns, as much as 10 bytes of text) is paid once per run: the
# gate over free text costs less than half. Where candidates are less rare, the scanner asks
# for shorter runs (`gate_run_values`).
GATE_RUN_VALUES = 256


def text_values(column: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray | None]:
    """A text column as plain strings, with None; a dictionary column as the values its rows
    use, with how many rows use each."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    counts = None
    if pa.types.is_dictionary(column.type):
        # The dictionary may hold entries no row uses: scan only those the indices point to.
        indices = column.indices.drop_null().to_numpy(zero_copy_only=False)
        rows = np.bincount(indices, minlength=len(column.dictionary))
        used = np.flatnonzero(rows)
        column, counts = column.dictionary.take(pa.array(used)), rows[used]
    if pa.types.is_string_view(column.type):
        column = column.cast(pa.string())
    return column, counts


def gate_run_values(rate: float) -> int:
    """Values per run of the gate's first pass for a column where the gate passes about `rate`
    of the values: runs of which about a tenth pass at most, up to GATE_RUN_VALUES."""
    if rate <= 0:
        return GATE_RUN_VALUES
    return int(min(GATE_RUN_VALUES, max(1, 2 ** np.floor(np.log2(0.1 / rate)))))


def gate_mask(column: pa.Array | pa.ChunkedArray, run_values: int = GATE_RUN_VALUES) -> pa.Array:
    """Which values `GATE` matches (false for nulls): matched on runs of `run_values` values
    first, then value by value inside the runs it matched (see GATE_RUN_VALUES)."""
    if isinstance(column, pa.ChunkedArray):
        masks = [gate_mask(chunk, run_values) for chunk in column.chunks]
        return pa.concat_arrays(masks) if masks else pa.array([], pa.bool_())
    rows = len(column)
    data = column.buffers()[2] if column.type in (pa.string(), pa.large_string()) else None
    if run_values <= 1 or rows <= run_values or data is None:
        return pc.fill_null(pc.match_substring_regex(column, GATE), False)
    width = np.int64 if column.type == pa.large_string() else np.int32
    offsets = np.frombuffer(column.buffers()[1], dtype=width)[column.offset :][: rows + 1]
    bounds = np.append(offsets[:-1:run_values], offsets[-1])
    runs = pa.Array.from_buffers(column.type, len(bounds) - 1, [None, pa.py_buffer(bounds), data])
    run_hit = pc.match_substring_regex(runs, GATE).to_numpy(zero_copy_only=False)
    mask = np.zeros(rows, dtype=bool)
    if run_hit.any():
        inside = np.flatnonzero(np.repeat(run_hit, run_values)[:rows])
        matched = pc.fill_null(pc.match_substring_regex(column.take(inside), GATE), False)
        mask[inside] = matched.to_numpy(zero_copy_only=False)
    return pa.array(mask)


def candidates(
    column: pa.Array | pa.ChunkedArray,
    counts: pa.Array | None = None,
    *,
    gated: bool = False,
    run_values: int = GATE_RUN_VALUES,
) -> tuple[pa.Array, np.ndarray, int]:
    """Distinct candidate values of a text column (trimmed), a bit per entity for each, and
    the number of values (not distinct) the filter passed; `counts`: how often each value of
    `column` occurs (the column is then its distinct values). `gated`: through `GATE` first
    (the same results, faster where candidates are rare), in runs of `run_values` values.

    Bit i of the second result is set when `PATTERNS[ENTITIES[i]]` matches the value (for the
    `NOT_IN_UUIDS` types, the value with its UUIDs blanked out); a value with no bit set is
    dropped, though counted among the values passed.
    """
    if gated:
        gate = gate_mask(column, run_values)
        column = pc.filter(column, gate)
        counts = None if counts is None else pc.filter(counts, gate)
    hit = pc.or_(*(pc.match_substring_regex(column, union) for union in PASSES))
    found = pc.filter(column, hit)  # nulls in the mask drop the null values
    passed = len(found) if counts is None else int(pc.sum(pc.filter(counts, hit)).as_py() or 0)
    if len(found) == 0:
        return pa.array([], pa.string()), np.zeros(0, dtype=np.uint16), 0
    distinct = pc.unique(pc.utf8_trim_whitespace(found))
    blanked = pc.replace_substring_regex(distinct, UUID, " ")  # see UUID
    bits = np.zeros(len(distinct), dtype=np.uint16)
    for index, (entity, pattern) in enumerate(PATTERNS.items()):
        text = blanked if entity in NOT_IN_UUIDS else distinct
        matched = pc.match_substring_regex(text, pattern).to_numpy(zero_copy_only=False)
        bits |= matched.astype(np.uint16) << index
    keep = bits != 0
    if not keep.all():
        distinct = distinct.filter(pa.array(keep))
        bits = bits[keep]
    return distinct, bits, passed


def entities_of(bits: int) -> list[str]:
    return [entity for index, entity in enumerate(ENTITIES) if bits >> index & 1]
