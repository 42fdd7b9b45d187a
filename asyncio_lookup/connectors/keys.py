"""Key templates (``"customer:{id}"``, ``"http://host/c/{id}"``) and key-tuple helpers."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.functions import Key


def has_null(key: Key) -> bool:
    """A key with a NULL never equals a stored key: it is a miss without a call."""
    return any(v is None for v in key)


class KeyTemplate:
    """A template whose ``{field}`` placeholders are key columns.

    Only plain named fields are allowed (no ``{0}``, ``{id!r}`` or ``{id:>5}``), so formatting
    cannot run user-chosen conversions.
    """

    def __init__(self, template: str, option: str) -> None:
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

    def key_columns(self, key_columns: Sequence[str] | str | None) -> tuple[str, ...]:
        """The key columns: given ones (each must appear in the template) or the template's."""
        if key_columns is None:
            columns = tuple(dict.fromkeys(self.fields))
        elif isinstance(key_columns, str):
            columns = (key_columns,)
        else:
            columns = tuple(key_columns)
        if not columns:
            raise ConfigurationError(
                "key_columns",
                key_columns,
                "one or more column names",
                f"the {self.option} {self.template!r} has no {{column}} placeholder",
            )
        unknown = sorted(set(self.fields) - set(columns))
        if unknown:
            raise ConfigurationError(
                self.option,
                self.template,
                f"placeholders among the key columns {list(columns)}",
                f"unknown placeholder(s) {unknown}",
            )
        return columns

    @property
    def single_field(self) -> tuple[str, str] | None:
        """(text before, text after) when the template has exactly one placeholder."""
        if len(self.fields) != 1:
            return None
        return self.literals[0], self.literals[1]

    def format(self, values: Mapping[str, Any], encode: Callable[[Any], str]) -> str:
        out = [self.literals[0]]
        for field, literal in zip(self.fields, self.literals[1:], strict=True):
            out.append(encode(values[field]))
            out.append(literal)
        return "".join(out)

    def glob(self) -> str:
        """A Redis ``SCAN MATCH`` pattern: literals escaped, each placeholder ``*``."""
        return "*".join(re.sub(r"([\\*?\[\]])", r"\\\1", lit) for lit in self.literals)

    def parser(self) -> re.Pattern[str]:
        """A regex that parses a formatted string back into its placeholder values.

        With several placeholders a value containing the separator between them is ambiguous:
        the earlier placeholder takes the shortest match.
        """
        parts = [re.escape(self.literals[0])]
        seen: set[str] = set()
        for field, literal in zip(self.fields, self.literals[1:], strict=True):
            if field in seen:
                parts.append(f"(?P={field})")
            else:
                parts.append(f"(?P<{field}>.*?)")
                seen.add(field)
            parts.append(re.escape(literal))
        return re.compile("".join(parts) + r"\Z", re.DOTALL)


def key_dict(columns: Sequence[str], key: Key) -> dict[str, Any]:
    """``{column: value}`` for a key tuple; a key of the wrong arity is an error."""
    if len(key) != len(columns):
        raise ConfigurationError(
            "key", key, f"a tuple of {len(columns)} value(s) for key columns {list(columns)}"
        )
    return dict(zip(columns, key, strict=True))
