"""Key templates (``"customer:{id}"``, ``"http://host/c/{id}"``) and key-tuple helpers."""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from asyncio_lookup.errors import ConfigurationError, DataFormatError
from asyncio_lookup.lookup.functions import Key
from asyncio_lookup.masking import mask_url


def has_null(key: Key) -> bool:
    """A key with a NULL never equals a stored key: it is a miss without a call."""
    return any(v is None for v in key)


_NONE: Mapping[str, str] = {}


class KeyTemplate:
    """A template whose ``{field}`` placeholders are key columns.

    Only plain named fields are allowed (no ``{0}``, ``{id!r}`` or ``{id:>5}``), so formatting
    cannot run user-chosen conversions. Two placeholders need a non-empty literal between them
    (``{a}{b}`` is refused), and a formatted key is unambiguous: with several placeholders, each
    value but the last one's must not contain the first character of the literal after its
    placeholder (its *separator*), else :meth:`format` raises :class:`DataFormatError`. A value
    then ends at its separator's first occurrence, so two different keys never format to the
    same string and :meth:`parser` reads every formatted key back.
    """

    def __init__(self, template: str, option: str) -> None:
        if not isinstance(template, str):
            raise ConfigurationError(option, template, "a text with {column} placeholders")
        self.template = template
        self.option = option
        self.literals: list[str] = []
        self.fields: list[str] = []
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as error:
            raise ConfigurationError(
                option, template, "a template with {column} placeholders", str(error)
            ) from None
        for literal, field, spec, conversion in parsed:
            if len(self.literals) > len(self.fields):  # an escaped brace ('{{') split the text
                self.literals[-1] += literal
            else:
                self.literals.append(literal)
            if field is None:
                continue
            if not field.isidentifier() or spec or conversion:
                raise ConfigurationError(
                    option,
                    template,
                    "placeholders of the form {column_name}",
                    f"placeholder {{{field}{'!' + conversion if conversion else ''}"
                    f"{':' + spec if spec else ''}}} is not a plain column name",
                )
            self.fields.append(field)
        if len(self.literals) == len(self.fields):
            self.literals.append("")
        for before, after, literal in zip(
            self.fields[:-1], self.fields[1:], self.literals[1:-1], strict=True
        ):
            if not literal:
                raise ConfigurationError(
                    option,
                    mask_url(template),
                    "placeholders separated by a literal that their values cannot contain, "
                    "e.g. 'c:{a}:{b}'",
                    f"placeholders {{{before}}} and {{{after}}} are adjacent, so different "
                    "keys could format to the same string",
                )
        # (field, literal after it, its separator: "" for the last placeholder, never checked)
        self._parts = tuple(
            (field, literal, literal[0] if i < len(self.fields) - 1 else "")
            for i, (field, literal) in enumerate(zip(self.fields, self.literals[1:], strict=True))
        )
        self._parser: re.Pattern[str] | None = None

    def key_columns(self, key_columns: Sequence[str] | str | None) -> tuple[str, ...]:
        """The key columns: given ones (each must appear in the template) or the template's."""
        if key_columns is None:
            columns = tuple(dict.fromkeys(self.fields))
        elif isinstance(key_columns, str):
            columns = (key_columns,)
        elif isinstance(key_columns, (list, tuple)):
            columns = tuple(key_columns)
        else:
            raise ConfigurationError(
                "key_columns", key_columns, "a column name or a list of column names"
            )
        if not columns:
            raise ConfigurationError(
                "key_columns",
                key_columns,
                "one or more column names",
                f"the {self.option} {self.template!r} has no {{column}} placeholder",
            )
        if not all(isinstance(c, str) and c for c in columns) or len(set(columns)) < len(columns):
            raise ConfigurationError(
                "key_columns", key_columns, "distinct column names (non-empty text)"
            )
        unknown = sorted(set(self.fields) - set(columns))
        if unknown:
            raise ConfigurationError(
                self.option,
                self.template,
                f"placeholders among the key columns {list(columns)}",
                f"unknown placeholder(s) {unknown}",
            )
        unplaced = [c for c in columns if c not in self.fields]
        if unplaced:
            raise ConfigurationError(
                "key_columns",
                list(columns),
                f"columns that each have a {{placeholder}} in the {self.option} "
                f"{mask_url(self.template)!r}",
                f"{unplaced} would not be in the {self.option}: keys that differ only there "
                "would get one another's rows",
            )
        return columns

    @property
    def single_field(self) -> tuple[str, str] | None:
        """(text before, text after) when the template has exactly one placeholder."""
        if len(self.fields) != 1:
            return None
        return self.literals[0], self.literals[1]

    @property
    def separators(self) -> tuple[tuple[str, str], ...]:
        """``(field, separator)`` of each placeholder but the last (whose value the template's
        end or literal delimits)."""
        return tuple((field, separator) for field, _, separator in self._parts if separator)

    def format(
        self,
        values: Mapping[str, Any],
        encode: Callable[[Any], str],
        split_before_decoding: frozenset[str] = frozenset(),
        decoded_separators: Mapping[str, str] = _NONE,
    ) -> str:
        """The template with each placeholder replaced by ``encode(value)``.

        Raises :class:`DataFormatError` (for this key only) when a value but the last one's
        contains its separator, as encoded or as its key text (what a reader that decodes,
        e.g. an HTTP server un-percent-encoding a path, sees): the key would be ambiguous.
        Fields in ``split_before_decoding`` are read apart at their separator before any
        decoding (``/`` between path segments, ``&`` between query pairs): only their
        encoded text must not contain it. ``decoded_separators`` maps a field to its separator as
        the reader decodes it, where that differs (a query's ``+`` is a space): a value must not
        hold that either.
        """
        parts = self._parts
        if len(parts) == 1:  # one placeholder: never ambiguous
            field, literal, _ = parts[0]
            return self.literals[0] + encode(values[field]) + literal
        out = [self.literals[0]]
        for field, literal, separator in parts:
            value = values[field]
            text = encode(value)
            if separator and (
                separator in text
                or (field not in split_before_decoding and separator in key_text(value))
                or (field in decoded_separators and decoded_separators[field] in key_text(value))
            ):
                raise self._ambiguous(values, field, key_text(value), separator)
            out.append(text)
            out.append(literal)
        return "".join(out)

    def _ambiguous(
        self, values: Mapping[str, Any], field: str, text: str, separator: str
    ) -> DataFormatError:
        return DataFormatError(
            f"key {dict(values)!r} cannot be written with the {self.option} "
            f"{mask_url(self.template)!r}: the value of {field!r} ({text!r}) contains "
            f"{separator!r}, the character after its placeholder, so another key could give the "
            "same text; choose a separator the values cannot contain"
        )

    def glob(self) -> str:
        """A Redis ``SCAN MATCH`` pattern: literals escaped, each placeholder ``*``."""
        return "*".join(re.sub(r"([\\*?\[\]])", r"\\\1", lit) for lit in self.literals)

    def parser(self) -> re.Pattern[str]:
        """A regex that parses a string :meth:`format` wrote (with ``str`` values) back into its
        placeholder values; compiled once.

        It follows :meth:`format`'s rule: a value but the last one's holds none of its
        separators, so it ends at the first one (``'c:x:y:z'`` for ``'c:{a}:{b}'`` reads
        ``a='x', b='y:z'``; ``a='x:y'`` could not have been written). Every string
        :meth:`format` writes parses back to its values, and parsing is unique.
        """
        if self._parser is not None:
            return self._parser
        excluded: dict[str, set[str]] = {}
        for field, _, separator in self._parts:
            if separator:
                excluded.setdefault(field, set()).add(separator)
        parts = [re.escape(self.literals[0])]
        seen: set[str] = set()
        for field, literal, _ in self._parts:
            if field in seen:
                parts.append(f"(?P={field})")
            elif field in excluded:
                chars = "".join(re.escape(c) for c in sorted(excluded[field]))
                parts.append(f"(?P<{field}>[^{chars}]*)")
            else:
                parts.append(f"(?P<{field}>.*)")
            seen.add(field)
            parts.append(re.escape(literal))
        self._parser = re.compile("".join(parts) + r"\Z", re.DOTALL)
        return self._parser


def key_text(value: Any) -> str:
    """A key value as key text: ``str``, with ``-0.0`` written ``0.0`` (the two are one key in
    Python's equality, the lookup batcher and caches, and Spark SQL joins) and a ``Decimal`` in
    plain digits at its scale, as Spark's ``CAST(d AS STRING)`` and PostgreSQL write it
    (``str()`` gives ``0E-18`` for a DECIMAL(38, 18) zero)."""
    if isinstance(value, float) and value == 0.0:
        return "0.0"
    if type(value) is Decimal and value.is_finite():
        return format(value.copy_abs() if value.is_zero() else value, "f")  # -0.00 as 0.00
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise DataFormatError(  # str() would write b'ab': a key no one stored
            f"key value {bytes(value)[:40]!r} is binary, which a key template cannot write; "
            "cast the key column to STRING (hex() or base64() as the keys were written)"
        )
    return str(value)


def number_text(value: Any) -> str:
    """A number's value as text, one text per value (``2``, ``2.0``, ``Decimal("2.00")`` and
    ``-0.0``/``0.0`` alike); anything else as ``str()``."""
    kind = type(value)
    if kind is float or kind is Decimal:
        if not math.isfinite(value):
            return str(float(value))
        if value == int(value):
            return str(int(value))
        return repr(float(value)) if kind is float else str(value.normalize())
    return str(value)


def key_dict(columns: Sequence[str], key: Key) -> dict[str, Any]:
    """``{column: value}`` for a key tuple; a key of the wrong arity is an error."""
    if len(key) != len(columns):
        raise ConfigurationError(
            "key", key, f"a tuple of {len(columns)} value(s) for key columns {list(columns)}"
        )
    return dict(zip(columns, key, strict=True))
