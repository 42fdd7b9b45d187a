"""Keys of an HTTP batch request that a service reading keys loosely could confuse.

A service may read a key loosely: case-insensitively (``'ALICE'`` is ``'alice'``), trimmed
(``'x '`` is ``'x'``) or as a number (``'01'`` is ``'1'``), and answer with its own spelling of
the key. A batch answer's rows are matched to keys by their key columns as sent (a row of
another spelling could as well be a row of a key not asked for), so two keys of one loose form
asked in one batch would both land on the key spelt as the service spells it: a duplicated row
and a lost one. The keys of a batch are therefore sent in chunks in which no two keys share a
loose form (:func:`chunks_apart`); a key the service answers in another spelling misses, and
:func:`spelt_otherwise` finds such an answer for the connector's one warning.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Collection, Hashable, Sequence
from decimal import Decimal
from typing import Any

from asyncio_lookup.connectors.keys import key_text, number_text
from asyncio_lookup.lookup.functions import Key, Row

#: A JSON number written as text, which an answer's key value is read as (``"100.0"`` is the
#: DECIMAL key ``100.00``): JSON's syntax in ASCII digits (no ``'01'``, no ``'+1'``), with at
#: most 40 digits before and after the point and 3 in the exponent (``int(Decimal("1e999999"))``
#: would build a million-digit integer, and ``str()`` refuses one of over 4,300 digits).
NUMBER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]{0,39})(?:\.[0-9]{1,40})?(?:[eE][+-]?[0-9]{1,3})?")

NUMBERS = (int, float, Decimal)  # the key values matched by value (number_text)

#: Text some reader of numbers takes for a number: a sign, ``_`` between digits (Python's
#: ``int()``), a bare point (``'.5'``, ``'1.'``), leading zeros, any script's digits; bounded
#: as :data:`NUMBER_TEXT`.
_LOOSE_DIGITS = r"\d(?:_?\d){0,39}"
_LOOSE_NUMBER = re.compile(
    rf"[+-]?(?:{_LOOSE_DIGITS}(?:\.(?:{_LOOSE_DIGITS})?)?|\.{_LOOSE_DIGITS})(?:[eE][+-]?\d{{1,3}})?"
)


def loose_value(value: Any) -> str:
    """``value`` as a service reading keys loosely may: text in compatibility form, trimmed,
    in any case (``upper()`` then ``casefold()``: a dotless i is ``'i'`` as ``'ß'`` is ``'ss'``),
    numeric text and numbers by value (:func:`number_text`), anything else as its key text.
    Coarser than any one such reading: two keys of one form may only cost a request more."""
    if type(value) is str:
        text = unicodedata.normalize("NFKC", value).strip().upper().casefold()
        return number_text(Decimal(text)) if _LOOSE_NUMBER.fullmatch(text) else text
    if type(value) in NUMBERS:
        return number_text(value)
    return key_text(value)


def loose_form(key: Key) -> tuple[str, ...]:
    """A key's values as :func:`loose_value` reads them."""
    return tuple(map(loose_value, key))


def chunks_apart(keys: Sequence[Key], size: int) -> list[list[Key]]:
    """``keys`` (distinct) in chunks of at most ``size``, no two keys of a chunk of one loose
    form; in order, as plain slices when no two keys share one (the usual case)."""
    chunks: list[list[Key]] = []
    forms: list[set[Hashable]] = []
    for key in keys:
        form = loose_form(key)
        for chunk, seen in zip(chunks, forms, strict=True):
            if len(chunk) < size and form not in seen:
                chunk.append(key)
                seen.add(form)
                break
        else:
            chunks.append([key])
            forms.append({form})
    return chunks


def answer_number(value: Any) -> str:
    """An answer's key value as :func:`number_text`, a number written as text by value
    (``"100.0"`` is the DECIMAL key ``100.00``), but a float from 2**53 on as itself: it
    stands for several integers, none of which it may be matched to."""
    if type(value) is float and abs(value) >= 2**53 and math.isfinite(value):
        return repr(value)
    if type(value) is str and NUMBER_TEXT.fullmatch(value):
        return number_text(Decimal(value))
    return number_text(value)


def spelt_otherwise(
    columns: Sequence[str],
    keys: Sequence[Key],
    grouped: Sequence[Collection[Row]],
    rows: Sequence[Row],
) -> tuple[Key, list[Any]] | None:
    """A key of ``keys`` that ``grouped`` (each key's rows) left without a row, and the key
    values of a row of the answer ``rows`` that no key matched but that has its loose form:
    maybe the service's spelling of that key (which a batch cannot tell from a row of a key not
    asked for); None when there is none."""
    empty = {loose_form(key): key for key, found in zip(keys, grouped, strict=True) if not found}
    if not empty:
        return None
    asked = {key_match(key) for key in keys}
    masks = {number_columns(key) for key in keys}
    for row in rows:
        values = [row.get(c) for c in columns]
        if None in values or any(answer_match(values, mask) in asked for mask in masks):
            continue
        key = empty.get(tuple(map(loose_value, values)))
        if key is not None:
            return key, values
    return None


def number_columns(key: Key) -> tuple[bool, ...]:
    """Which of ``key``'s values are numbers, matched by value; the others by text."""
    return tuple(type(v) in NUMBERS for v in key)


def key_match(key: Key) -> tuple[str, ...]:
    """What an answer's key values are matched against: ``key``'s numbers by value
    (:func:`number_text`), its other values as text (:func:`key_text`)."""
    return tuple(number_text(v) if type(v) in NUMBERS else key_text(v) for v in key)


def answer_match(values: Sequence[Any], numbers: tuple[bool, ...]) -> tuple[str, ...]:
    """An answer row's key ``values`` as :func:`key_match` writes a key whose columns
    ``numbers`` (:func:`number_columns`) are numbers: those by value (:func:`answer_number`),
    the others as text, so ``"007"`` is never the text key ``'7'``."""
    return tuple(
        answer_number(v) if number else key_text(v)
        for v, number in zip(values, numbers, strict=True)
    )


def has_number(key: Key) -> bool:
    """Whether ``key`` holds a number (matched by value as well as by text)."""
    return any(type(v) in NUMBERS for v in key)


__all__ = [
    "NUMBERS",
    "NUMBER_TEXT",
    "answer_match",
    "answer_number",
    "chunks_apart",
    "has_number",
    "key_match",
    "loose_form",
    "loose_value",
    "number_columns",
    "spelt_otherwise",
]
