"""Text rules shared by the domain's validators and the OpenAPI document that states them."""

from __future__ import annotations

import unicodedata

# Unicode category Cc: C0 controls, DEL and C1 controls. NUL breaks PostgreSQL text; the rest
# break logs and user interfaces.
CONTROL_CHARACTERS = r"\x00-\x1F\x7F-\x9F"


def has_control_characters(value: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in value)


# The end of the text, in a form that ECMA-262 and Python `re` read alike: `$` in Python also
# matches before a final newline, so a generator reading `^x$` offers "x\n" as valid.
END = r"(?![\s\S])"
# Text without control characters, as a JSON Schema pattern.
NO_CONTROL_CHARACTERS = rf"^[^{CONTROL_CHARACTERS}]*{END}"
