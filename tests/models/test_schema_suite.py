"""The official JSON-Schema-Test-Suite against the three places that judge a row (issue 33).

The API (the contributions endpoint's domain call, on the body as it parses it), the
pipeline's Arrow compliance check (on the rows as a table typed by their values) and the web
form's Ajv (api/static/rowcheck.js under Node) must each give the suite's verdict; every row
the API accepts is stored, read back as the pipeline reads it, must pass its check and hold
what was sent. The only exceptions are the deviations listed below, each with its reason
(docs/validation.md lists them for users). A deviation that no longer happens fails the test
too, so the list stays true.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.schema_suite import (
    NODE,
    SUITE,
    SpecCase,
    ajv_verdicts,
    api_verdicts,
    arrow_verdicts,
    spec_cases,
    stored_problems,
)

# The draft 2020-12 groups whose schema can be a data-spec property or a data-spec (the
# suite's remote-reference and vocabulary groups need a server and meta-schemas we never
# fetch), and the optional groups of formats and numbers the service asserts.
GROUPS = [
    *[
        "additionalProperties",
        "allOf",
        "anchor",
        "anyOf",
        "boolean_schema",
        "const",
        "contains",
        "content",
        "default",
        "defs",
        "dependentRequired",
        "dependentSchemas",
        "dynamicRef",
        "enum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "format",
        "if-then-else",
        "infinite-loop-detection",
        "items",
        "maxContains",
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "minContains",
        "minItems",
        "minLength",
        "minProperties",
        "minimum",
        "multipleOf",
        "not",
        "oneOf",
        "pattern",
        "patternProperties",
        "prefixItems",
        "properties",
        "propertyNames",
        "ref",
        "required",
        "type",
        "unevaluatedItems",
        "unevaluatedProperties",
        "uniqueItems",
    ],
    *(f"optional/{n}" for n in ["bignum", "ecmascript-regex", "non-bmp-regex", "float-overflow"]),
    *(
        f"optional/format/{n}"
        for n in [
            "date-time",
            "date",
            "time",
            "duration",
            "email",
            "hostname",
            "ipv4",
            "ipv6",
            "uri",
            "uri-reference",
            "uri-template",
            "uuid",
            "json-pointer",
            "relative-json-pointer",
            "regex",
        ]
    ),
]

FORMATS_ASSERTED = (
    "formats are asserted, in all three places: a data-spec's `format` is a promise about "
    "the data (format.json expects an annotation only, by default)"
)
REMOTE = "a `$ref` to a URL is never fetched: the data-spec is refused at registration"
CONTROL = (
    "a member name with a control character that the data-spec does not declare is refused "
    "(it would become a stored column's name, as CSV and Parquet headers)"
)
BIG = (
    "integers beyond 64 bits are read as 64-bit floats (orjson, and JavaScript in the form), "
    "and an integer column is stored as int64"
)
AJV_DYNAMIC = "Ajv 8 implements `$dynamicRef` only to a `#fragment` and within one resource"
AJV_UNEVALUATED = "Ajv 8 misses annotations from some `contains`/`if` for `unevaluated*`"
AJV_ID_REF = (
    "Ajv 8 overflows its stack compiling a subschema with both `$id` and `$ref` (and some "
    "relative `$id`s): the form says it cannot compile the data-spec; the API still judges"
)
AJV_PROTO = "Ajv 8 reads `__proto__`/`constructor`/`toString` members through the prototype"
AJV_FORMATS = "ajv-formats 3 checks some formats less strictly than jsonschema-rs"
EMPTY_ENUM = "an empty `enum` admits no value (Ajv refuses to compile it): refused at registration"

# "<file>|<case>|<mode>" -> (the places that deviate, why). Modes: "property" (the schema as
# the property `v`), "root" (the schema as the data-spec). "registration": refused there.
DEVIATIONS: dict[str, tuple[frozenset[str], str]] = {}


def _deviate(places: str, reason: str, *keys: str) -> None:
    for key in keys:
        DEVIATIONS[key] = (frozenset(places.split()), reason)


_deviate(
    "api arrow ajv",
    FORMATS_ASSERTED,
    *(
        f"format|{name} format|property"
        for name in [
            "date",
            "date-time",
            "duration",
            "email",
            "hostname",
            "ipv4",
            "ipv6",
            "json-pointer",
            "regex",
            "relative-json-pointer",
            "time",
            "uri",
            "uri-reference",
            "uri-template",
            "uuid",
        ]
    ),
)
_deviate(
    "api arrow",
    FORMATS_ASSERTED + "; ajv-formats does not know idn-email, idn-hostname, iri, iri-reference",
    *(
        f"format|{name} format|property"
        for name in ["idn-email", "idn-hostname", "iri", "iri-reference"]
    ),
)
_deviate(
    "registration",
    REMOTE,
    *(
        f"dynamicRef|{case}|{mode}"
        for case in (
            "$ref and $dynamicAnchor are independent of order - $defs first",
            "$ref and $dynamicAnchor are independent of order - $ref first",
            "strict-tree schema, guards against misspelled properties",
            "tests for implementation dynamic anchor and reference link",
        )
        for mode in ("property", "root")
    ),
    "dynamicRef|$ref to $dynamicRef finds detached $dynamicAnchor|property",
)
_deviate(
    "api",
    CONTROL,
    "dependentRequired|dependencies with escaped characters|root",
    "dependentSchemas|dependencies with escaped characters|root",
    "required|required with escaped characters|root",
)
_deviate("registration", EMPTY_ENUM, "enum|empty enum|property", "enum|empty enum|root")
_deviate("api", BIG, "optional/bignum|integer|property")
_deviate("api arrow", BIG, "optional/bignum|minimum integer comparison|property")
_deviate(
    "api ajv",
    BIG + "; 1e308 is no int64 (the API) and JavaScript's `%` overflows (the form)",
    "optional/float-overflow|all integers are multiples of 0.5, if overflow is handled|property",
)
_deviate(
    "ajv",
    AJV_DYNAMIC,
    *(
        f"dynamicRef|{case}|property"
        for case in (
            "$dynamicRef avoids the root of each schema, but scopes are still registered",
            "A $dynamicRef resolves to the first $dynamicAnchor still in scope that is "
            "encountered when the schema is evaluated",
            "A $dynamicRef to a $dynamicAnchor in the same schema resource behaves like a "
            "normal $ref to an $anchor",
            "A $dynamicRef to an $anchor in the same schema resource behaves like a normal $ref "
            "to an $anchor",
            "A $dynamicRef with a non-matching $dynamicAnchor in the same schema resource "
            "behaves like a normal $ref to $anchor",
            "A $dynamicRef with intermediate scopes that don't include a matching "
            "$dynamicAnchor does not affect dynamic scope resolution",
            "A $dynamicRef without a matching $dynamicAnchor in the same schema resource "
            "behaves like a normal $ref to $anchor",
            "A $dynamicRef without anchor in fragment behaves identical to $ref",
            "An $anchor with the same name as a $dynamicAnchor is not used for dynamic scope "
            "resolution",
            "after leaving a dynamic scope, it is not used by a $dynamicRef",
        )
    ),
    *(
        f"dynamicRef|{case}|{mode}"
        for case in (
            "$dynamicRef points to a boolean schema",
            "$dynamicRef skips over intermediate resources - direct reference",
            "A $dynamicRef that initially resolves to a schema with a matching $dynamicAnchor "
            "resolves to the first $dynamicAnchor in the dynamic scope",
            "A $dynamicRef that initially resolves to a schema without a matching "
            "$dynamicAnchor behaves like a normal $ref to $anchor",
            "multiple dynamic paths to the $dynamicRef keyword",
        )
        for mode in ("property", "root")
    ),
)
_deviate(
    "ajv",
    AJV_UNEVALUATED,
    *(
        f"unevaluatedItems|{case}|property"
        for case in (
            "unevaluatedItems and contains interact to control item dependency relationship",
            "unevaluatedItems can see annotations from if without then and else",
            "unevaluatedItems depends on adjacent contains",
            "unevaluatedItems depends on multiple nested contains",
            "unevaluatedItems with $dynamicRef",
            "unevaluatedItems with minContains = 0",
            "unevaluatedItems with nested items",
        )
    ),
    *(
        f"unevaluatedProperties|{case}|{mode}"
        for case in (
            "unevaluatedProperties can see annotations from if without then and else",
            "unevaluatedProperties with $dynamicRef",
            "unevaluatedProperties with if/then/else, then not defined",
        )
        for mode in ("property", "root")
    ),
)
_deviate(
    "ajv",
    AJV_ID_REF,
    "ref|$id with file URI still resolves pointers - *nix|property",
    "ref|$id with file URI still resolves pointers - windows|property",
    "ref|$ref to boolean schema false|property",
    "ref|$ref to boolean schema true|property",
    "ref|URN ref with nested pointer ref|property",
    "ref|nested refs|property",
    "ref|refs with relative uris and defs|property",
    "ref|refs with relative uris and defs|root",
    "ref|relative refs with absolute uris and defs|property",
    "ref|relative refs with absolute uris and defs|root",
)
_deviate(
    "ajv",
    AJV_PROTO,
    *(
        f"{group}|{case} whose names are Javascript object property names|{mode}"
        for group, case in (("properties", "properties"), ("required", "required properties"))
        for mode in ("property", "root")
    ),
)
_deviate(
    "ajv",
    AJV_FORMATS,
    *(
        f"optional/format/{name}|{case}|property"
        for name, case in (
            ("date-time", "validation of date-time strings"),
            ("duration", "validation of duration strings"),
            ("email", "validation of e-mail addresses"),
            ("hostname", "validation of A-label (punycode) host names"),
            ("hostname", "validation of host names"),
            ("uri-reference", "validation of URI References"),
            ("uri-template", "format: uri-template"),
            ("uri", "validation of URIs"),
            ("uuid", "uuid format"),
        )
    ),
)


def _mismatches(place: str, case: SpecCase, verdicts: list[bool] | str) -> list[str]:
    if isinstance(verdicts, str):
        return [f"{place}: {verdicts}"]
    return [
        f"{place}: {test!r} judged {'valid' if got else 'invalid'}"
        for test, expected, got in zip(case.tests, case.expected, verdicts, strict=True)
        if got != expected
    ]


@pytest.fixture(scope="module")
def cases() -> list[SpecCase]:
    return spec_cases("draft2020-12", GROUPS)


@pytest.fixture(scope="module")
def form_verdicts(cases: list[SpecCase]) -> list[list[bool] | str]:
    if shutil.which(NODE) is None:
        pytest.skip(f"no Node.js at {NODE}")
    return ajv_verdicts(cases)


def test_the_vendored_suite_is_whole() -> None:
    assert (SUITE / "LICENSE").read_text().startswith("Copyright (c) 2012 Julian Berman")
    for group in GROUPS:
        assert (SUITE / "draft2020-12" / f"{group}.json").is_file(), group


def test_api_pipeline_and_form_give_the_suites_verdicts(
    cases: list[SpecCase], form_verdicts: list[list[bool] | str]
) -> None:
    found: dict[str, set[str]] = {}
    problems: list[str] = []
    for number, (case, form) in enumerate(zip(cases, form_verdicts, strict=True)):
        places: dict[str, list[str]] = {}
        api = api_verdicts(case, model_id=10_000 + number)
        if isinstance(api, str):
            places["registration"] = [api]
        else:
            places["api"] = _mismatches("api", case, api)
            accepted = [row for row, valid in zip(case.rows, api, strict=True) if valid]
            places["stored"] = stored_problems(case, 10_000 + number, accepted)
            places["arrow"] = _mismatches("arrow", case, arrow_verdicts(case))
            places["ajv"] = _mismatches("ajv", case, form)
        deviating = {place for place, found_there in places.items() if found_there}
        if deviating:
            found[case.key] = deviating
        allowed = DEVIATIONS.get(case.key, (frozenset(), ""))[0]
        for place in deviating - allowed:
            problems.extend(f"{case.key}: {line}" for line in places[place])
    stale = sorted(
        f"{key}: {sorted(places - found.get(key, set()))} no longer deviate"
        for key, (places, _) in DEVIATIONS.items()
        if places - found.get(key, set())
    )
    assert problems == [], "\n".join(problems)
    assert stale == [], "\n".join(stale)


def test_every_deviation_is_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "validation.md").read_text()
    text = " ".join(text.split())
    missing = sorted({reason for _, reason in DEVIATIONS.values() if reason not in text})
    assert missing == [], "docs/validation.md does not give these reasons:\n" + "\n".join(missing)
