"""Text rules shared by the domain's validators and the OpenAPI document that states them."""

from __future__ import annotations

import unicodedata

# Unicode category Cc: C0 controls, DEL and C1 controls. NUL breaks PostgreSQL text; the rest
# break logs and user interfaces.
CONTROL_CHARACTERS = r"\x00-\x1F\x7F-\x9F"


LINE_BREAKS = frozenset("\t\n\r")


def has_control_characters(value: str, *, multiline: bool = False) -> bool:
    """Whether `value` holds a control character (tab, LF and CR allowed when `multiline`)."""
    return any(
        unicodedata.category(ch) == "Cc" and not (multiline and ch in LINE_BREAKS) for ch in value
    )


def printable(value: str, what: str, *, multiline: bool = False) -> str:
    """`value`, or ValueError (a pydantic validator's refusal) if it holds control characters."""
    if has_control_characters(value, multiline=multiline):
        raise ValueError(f"{what} must not contain control characters")
    return value


# The end of the text, in a form that ECMA-262 and Python `re` read alike: `$` in Python also
# matches before a final newline, so a generator reading `^x$` offers "x\n" as valid.
END = r"(?![\s\S])"
# Text without control characters, as a JSON Schema pattern.
NO_CONTROL_CHARACTERS = rf"^[^{CONTROL_CHARACTERS}]*{END}"
# The same, but tab, LF and CR allowed: free text such as a description.
MULTILINE_TEXT = r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*" + END
