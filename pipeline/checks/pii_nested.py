"""The text held in nested and binary columns, for the PII scan.

The pipeline's scan of a pandas frame reads lists, dicts and bytes as their text
(`pii_tables.scan_frame`); Parquet keeps them as lists, large lists, structs, maps and binary
columns, and an e-mail in any of them is the same e-mail. Their text leaves (strings, and
binary values decoded as UTF-8 with invalid bytes replaced) are taken out batch by batch with
Arrow's own flattening, so they meet the pre-filter as one text array per batch, within the
scanner's usual budget. A number leaf is scanned as a number column is (`pii_numbers`): when a
name on its path, the column's or a struct field's, says it holds contact numbers
(`struct<phone: int64>`, `phones: list<int64>`), its long whole values as their digits; other
number leaves are left out, as other number columns are.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.checks.pii_numbers import holds_contact_numbers, is_number_type, long_numbers


def holds_nested_text(kind: pa.DataType, name: str = "") -> bool:
    """A binary type, or a nested type with a text or binary leaf, or with a number leaf under
    a contact name (the column's `name` or a struct field's); not plain text: that is
    `is_text_type`."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    contact = holds_contact_numbers(name)
    return _is_binary(kind) or (_children(kind) != [] and _has_text(kind, contact))


def nested_text(column: pa.Array | pa.ChunkedArray, name: str = "") -> pa.Array:
    """Every text leaf of `column` (called `name`), and the long numbers of its number leaves
    under a contact name as their digits, as one large_string array (nulls kept, scanned as
    none)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    contact = holds_contact_numbers(name)
    leaves = [leaf for chunk in chunks for leaf in _leaves(chunk, contact)]
    if not leaves:
        return pa.array([], pa.large_string())
    return leaves[0] if len(leaves) == 1 else pa.concat_arrays(leaves)


def is_text_type(kind: pa.DataType) -> bool:
    """Text, or a dictionary of text (Parquet's dictionary-encoded string columns)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _is_binary(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_binary_view(kind)
        or pa.types.is_fixed_size_binary(kind)
    )


def _is_list(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_fixed_size_list(kind)
        or pa.types.is_list_view(kind)
        or pa.types.is_large_list_view(kind)
    )


def _children(kind: pa.DataType) -> list[tuple[str, pa.DataType]]:
    """The child types, each with its name if it is a struct field's ("" otherwise: a map's
    keys and items are named by each row's key, not by the type)."""
    if pa.types.is_map(kind):
        return [("", kind.key_type), ("", kind.item_type)]
    if _is_list(kind):
        return [("", kind.value_type)]
    if pa.types.is_struct(kind):
        return [(kind.field(i).name, kind.field(i).type) for i in range(kind.num_fields)]
    return []


def _has_text(kind: pa.DataType, contact: bool) -> bool:
    """A text or binary leaf, or a number leaf under a contact name (`contact`: one above)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if is_text_type(kind) or _is_binary(kind) or (contact and is_number_type(kind)):
        return True
    return any(
        _has_text(child, contact or holds_contact_numbers(name)) for name, child in _children(kind)
    )


def _leaves(array: pa.Array, contact: bool) -> Iterator[pa.Array]:
    kind = array.type
    if pa.types.is_dictionary(kind):
        array = array.dictionary_decode()
        kind = array.type
    if not _has_text(kind, contact):
        return
    if is_text_type(kind):
        yield array.cast(pa.large_string())
    elif _is_binary(kind):
        yield _decoded(array)
    elif is_number_type(kind):  # under a contact name
        yield long_numbers(array).cast(pa.large_string())
    elif pa.types.is_map(kind):
        # MapArray.keys and .items ignore a slice's offset; as a list of entries they do not.
        entries = pa.list_(pa.struct([kind.key_field, kind.item_field]))
        yield from _leaves(pc.list_flatten(array.cast(entries)), contact)
    elif _is_list(kind):
        yield from _leaves(pc.list_flatten(array), contact)
    elif pa.types.is_struct(kind):
        fields = [kind.field(i).name for i in range(kind.num_fields)]
        for name, child in zip(fields, array.flatten(), strict=True):  # parent's nulls applied
            yield from _leaves(child, contact or holds_contact_numbers(name))


def _decoded(array: pa.Array) -> pa.Array:
    """Binary values as text: as they are when valid UTF-8 (no copy per value), else each value
    decoded with U+FFFD for its invalid bytes, so the text around them is still read."""
    if pa.types.is_fixed_size_binary(array.type):
        array = array.cast(pa.binary())
    try:
        return array.cast(pa.large_string())
    except pa.ArrowInvalid:
        values = [None if v is None else v.decode("utf-8", "replace") for v in array.to_pylist()]
        return pa.array(values, pa.large_string())
