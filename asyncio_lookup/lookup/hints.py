"""Join hints: ``LOOKUP(...)`` (FLIP-234) and ``SHUFFLE_HASH(...)`` (FLIP-204).

Hints arrive as text (a bare hint, several separated by commas, or a ``/*+ ... */`` comment),
as a ``dict`` of LOOKUP options, as :class:`LookupHint` / :class:`ShuffleHashHint` objects, or
as a list of any of these. :func:`parse_hints` turns them into hint objects
(:func:`~asyncio_lookup.lookup.hint_resolve.resolve_lookup` picks the hints for one join and
fills the job-level defaults).

Unlike Flink, which ignores what it does not understand, every mistake here is an error: an
unknown option, an unparsable value, a half-given retry configuration, a hint for another table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup.failed_rows import OnError
from asyncio_lookup.lookup.l2.hint_options import SHARED_PREFIX, parse_hint_options
from asyncio_lookup.masking import mask_text
from asyncio_lookup.validation import (
    POSITIVE_DURATION_ALLOWED,
    format_duration,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    refuse_unitless,
    unknown_option,
)

OutputModeName: TypeAlias = Literal["ordered", "unordered", "key_ordered"]

LOOKUP = "LOOKUP"
SHUFFLE_HASH = "SHUFFLE_HASH"
HINT_NAMES = (LOOKUP, SHUFFLE_HASH)


MAX_CAPACITY = 1_000_000
"""The most records a lookup join keeps in flight per task (``capacity``); more is a typo."""

_INT_ALLOWED = "a whole number > 0"
_CAPACITY_ALLOWED = f"a whole number > 0 and at most {MAX_CAPACITY:_} (records in flight per task)"
_TIMEOUT_ALLOWED = "a duration > 0 such as '10s', '500ms', '3 min' (no unit = ms)"
_HINT_SYNTAX = (
    "hints such as LOOKUP('table'='T', 'async'='true') or SHUFFLE_HASH('T'), "
    "optionally inside /*+ ... */ and separated by commas"
)


# --------------------------------------------------------------------------- value parsers


def _parse_table(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise HintError(option, value, "the name (or alias) of the dim table, a non-empty string")
    return value.strip()


def parse_output_mode(option: str, value: Any, error: type[ConfigurationError]) -> str:
    return parse_choice(option, value, ("ordered", "allow_unordered", "key_ordered"), error=error)


def output_mode_name(parsed: str) -> OutputModeName:
    """The runtime's name for a parsed hint or conf value (Flink's 'allow_unordered')."""
    if parsed == "allow_unordered":
        return "unordered"
    return "key_ordered" if parsed == "key_ordered" else "ordered"


def parse_capacity(option: str, value: Any, error: type[ConfigurationError]) -> int:
    return parse_int(
        option, value, minimum=1, maximum=MAX_CAPACITY, allowed=_CAPACITY_ALLOWED, error=error
    )


def parse_timeout(option: str, value: Any, error: type[ConfigurationError]) -> float:
    return parse_duration(
        option, value, positive=True, allowed=_TIMEOUT_ALLOWED, never=True, error=error
    )


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _quote(text: str) -> str:
    return text.replace("'", "''")


#: Qualifiers a hint may put before a table's name: Flink matches a hint naming
#: ``default_catalog.default_database.T`` or ``default_database.T`` to the table ``T`` a
#: ``CREATE TEMPORARY TABLE`` made in its default catalog and database.
DEFAULT_QUALIFIERS = ("default_catalog.default_database.", "default_database.")


def unqualified(name: str) -> str:
    """``name`` without Flink's default catalog and database qualifiers (any case)."""
    name = name.strip()
    for prefix in DEFAULT_QUALIFIERS:
        if name.lower().startswith(prefix):
            return name[len(prefix) :]
    return name


@dataclass(frozen=True)
class _HintOption:
    """One LOOKUP hint option: its :class:`LookupHint` field, parser and text form."""

    name: str
    field: str
    parse: Callable[[str, Any], Any]
    text: Callable[[Any], str] = str

    @property
    def is_duration(self) -> bool:
        return self.text is format_duration  # every duration option is shown as one


HINT_OPTIONS: tuple[_HintOption, ...] = (
    _HintOption("table", "table", _parse_table, _quote),
    _HintOption("async", "async_", lambda o, v: parse_bool(o, v, error=HintError), _bool_text),
    _HintOption("output-mode", "output_mode", lambda o, v: parse_output_mode(o, v, HintError)),
    _HintOption("capacity", "capacity", lambda o, v: parse_capacity(o, v, HintError)),
    _HintOption("timeout", "timeout", lambda o, v: parse_timeout(o, v, HintError), format_duration),
    _HintOption(
        "retry-predicate",
        "retry_predicate",
        lambda o, v: parse_choice(o, v, ("lookup_miss",), error=HintError),
    ),
    _HintOption(
        "retry-strategy",
        "retry_strategy",
        lambda o, v: parse_choice(o, v, ("fixed_delay",), error=HintError),
    ),
    _HintOption(
        "fixed-delay",
        "fixed_delay",
        lambda o, v: parse_duration(o, v, positive=True, error=HintError),
        format_duration,
    ),
    _HintOption(
        "max-attempts",
        "max_attempts",
        lambda o, v: parse_int(o, v, minimum=1, allowed=_INT_ALLOWED, error=HintError),
    ),
    _HintOption("shuffle", "shuffle", lambda o, v: parse_bool(o, v, error=HintError), _bool_text),
    _HintOption("on-error", "on_error", lambda o, v: OnError.of(v, o, HintError).value),
)
_BY_NAME = {option.name: option for option in HINT_OPTIONS}
_DURATION_ALLOWED = {"timeout": _TIMEOUT_ALLOWED, "fixed-delay": POSITIVE_DURATION_ALLOWED}
LOOKUP_OPTIONS = tuple(_BY_NAME)
RETRY_OPTIONS = ("retry-predicate", "retry-strategy", "fixed-delay", "max-attempts")


# --------------------------------------------------------------------------- hint objects


@dataclass(frozen=True)
class LookupHint:
    """One ``LOOKUP`` hint: the options a user gave, parsed and validated (no defaults filled).

    ``None`` means "not given". Durations are seconds (as text: Flink's syntax, no unit = ms).
    Build it with :meth:`parse`, :meth:`from_options` or directly: the constructor parses and
    validates every option, once, whichever way it was given.
    """

    table: str
    async_: bool | None = None
    output_mode: str | None = None  # 'ordered' | 'allow_unordered' | 'key_ordered'
    capacity: int | None = None
    timeout: float | None = None
    retry_predicate: str | None = None  # 'lookup_miss'
    retry_strategy: str | None = None  # 'fixed_delay'
    fixed_delay: float | None = None
    max_attempts: int | None = None
    shuffle: bool | None = None
    on_error: str | None = None  # 'fail' | 'keep'
    #: ``lookup.shared-cache.*`` options for this join, over the table's (name, value) pairs
    shared_cache: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # a URL's password

    def __post_init__(self) -> None:
        if self.shared_cache:
            object.__setattr__(self, "shared_cache", parse_hint_options(self.shared_cache))
        for option in HINT_OPTIONS:
            value = getattr(self, option.field)
            if value is not None or option.name == "table":
                object.__setattr__(self, option.field, option.parse(option.name, value))
        given = [n for n in RETRY_OPTIONS if getattr(self, _BY_NAME[n].field) is not None]
        if given and len(given) != len(RETRY_OPTIONS):
            missing = [name for name in RETRY_OPTIONS if name not in given]
            raise HintError(
                missing[0],
                None,
                "all four of " + ", ".join(repr(n) for n in RETRY_OPTIONS) + " or none of them",
                reason=f"{', '.join(repr(g) for g in given)} given without "
                f"{', '.join(repr(m) for m in missing)}",
            )

    @property
    def has_retry(self) -> bool:
        """True when the hint enables retry on lookup miss."""
        return self.retry_predicate is not None

    @classmethod
    def parse(cls, text: str) -> LookupHint:
        """Parse one ``LOOKUP('table'='T', ...)`` hint (or a comment holding exactly one)."""
        hints = parse_hints(text)
        if len(hints) != 1 or not isinstance(hints[0], LookupHint):
            raise HintError("hint", text, "exactly one LOOKUP('table'='T', ...) hint")
        return hints[0]

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> LookupHint:
        """Build a hint from its key/value options (the ``'k'='v'`` pairs)."""
        if not isinstance(options, Mapping):
            raise HintError("LOOKUP", options, "a mapping of LOOKUP option names to values")
        values: dict[str, Any] = {}
        shared: list[tuple[str, Any]] = []
        for raw_name, value in options.items():
            lowered = str(raw_name).strip().lower()
            if lowered.startswith(SHARED_PREFIX):
                shared.append((lowered, value))
                continue
            option = _BY_NAME.get(lowered)
            if option is None:
                raise unknown_option(
                    raw_name, value, LOOKUP_OPTIONS, kind="LOOKUP hint option", error=HintError
                )
            if option.field in values:
                raise HintError(
                    option.name, value, "each option at most once", reason="given twice"
                )
            if option.is_duration:
                refuse_unitless(option.name, value, _DURATION_ALLOWED[option.name], HintError)
            values[option.field] = value
        if values.get("table") is None:
            raise HintError(
                "table", None, "'table'='<dim table name>'", reason="LOOKUP hint needs 'table'"
            )
        return cls(**values, shared_cache=tuple(shared))

    def to_text(self) -> str:
        """The hint as ``LOOKUP(...)`` text, parseable by :meth:`parse`."""
        parts = [
            f"'{option.name}'='{option.text(getattr(self, option.field))}'"
            for option in HINT_OPTIONS
            if getattr(self, option.field) is not None
        ]
        parts += [f"'{name}'='{_quote(value)}'" for name, value in self.shared_cache]
        return f"LOOKUP({', '.join(parts)})"


@dataclass(frozen=True)
class ShuffleHashHint:
    """``SHUFFLE_HASH('T', ...)``: hash-partition the probe side by the lookup key (FLIP-204)."""

    tables: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.tables:
            raise HintError(SHUFFLE_HASH, (), "one or more table names: SHUFFLE_HASH('T')")
        for table in self.tables:
            _parse_table(SHUFFLE_HASH, table)


Hint: TypeAlias = "LookupHint | ShuffleHashHint"
HintsInput: TypeAlias = (
    "str | Mapping[str, Any] | LookupHint | ShuffleHashHint | "
    "Iterable[str | Mapping[str, Any] | LookupHint | ShuffleHashHint] | None"
)


# --------------------------------------------------------------------------- text parser

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*'|"(?:[^"]|"")*")
      | (?P<ident>[A-Za-z_][A-Za-z0-9_.$-]*)
      | (?P<punct>[(),=])
    )""",
    re.VERBOSE,
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    body = text.strip()
    if body.startswith("/*+"):
        if not body.endswith("*/"):
            raise HintError("hint", text, _HINT_SYNTAX, reason="unterminated /*+ ... */ comment")
        body = body[3:-2]
    elif body.startswith("/*"):
        raise HintError("hint", text, _HINT_SYNTAX, reason="a hint comment starts with '/*+'")
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(body):
        if body[position:].strip() == "":
            break
        match = _TOKEN.match(body, position)
        if not match or match.end() == position:
            raise HintError(
                "hint", text, _HINT_SYNTAX, reason=f"unexpected text at {body[position:]!r}"
            )
        position = match.end()
        kind = match.lastgroup
        assert kind is not None
        value = match.group(kind)
        if kind == "string":
            quote = value[0]
            value = value[1:-1].replace(quote * 2, quote)
        tokens.append((kind, value))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.position = 0

    def fail(self, reason: str) -> HintError:
        return HintError("hint", mask_text(self.text), _HINT_SYNTAX, reason=reason)

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, kind: str, value: str | None = None) -> str:
        token = self.peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            found = "the end" if token is None else repr(token[1])
            raise self.fail(f"expected {value or kind!r}, found {found}")
        self.position += 1
        return token[1]

    def hints(self) -> list[Hint]:
        result: list[Hint] = []
        if not self.tokens:
            return result
        while True:
            result.append(self.hint())
            if self.peek() is None:
                return result
            self.take("punct", ",")

    def hint(self) -> Hint:
        name = self.take("ident")
        self.take("punct", "(")
        items: list[str] = []
        pairs: list[tuple[str, str]] = []
        while self.peek() != ("punct", ")"):
            if items or pairs:
                self.take("punct", ",")
            token = self.peek()
            if token is None or token[0] not in ("string", "ident"):
                raise self.fail(f"expected an option or a table name inside {name}(...)")
            self.position += 1
            if self.peek() == ("punct", "="):
                self.position += 1
                value_token = self.peek()
                if value_token is None or value_token[0] not in ("string", "ident"):
                    raise self.fail(f"expected a value after {token[1]!r}=")
                self.position += 1
                pairs.append((token[1], value_token[1]))
            else:
                items.append(token[1])
        self.take("punct", ")")
        return _build_hint(self.text, name, items, pairs)


def _build_hint(text: str, name: str, items: list[str], pairs: list[tuple[str, str]]) -> Hint:
    upper = name.upper()
    if upper == LOOKUP:
        if items:
            raise HintError(
                "LOOKUP", text, "'key'='value' options only", reason=f"bare value {items[0]!r}"
            )
        options: dict[str, str] = {}
        for key, value in pairs:
            lowered = key.strip().lower()
            if lowered in options:
                raise HintError(key, value, "each option at most once", reason="given twice")
            options[lowered] = value
        return LookupHint.from_options(options)
    if upper == SHUFFLE_HASH:
        if pairs:
            raise HintError(
                SHUFFLE_HASH,
                text,
                "table names only: SHUFFLE_HASH('T')",
                reason=f"unexpected option {pairs[0][0]!r}",
            )
        return ShuffleHashHint(tuple(items))
    raise HintError(
        "hint", name, " or ".join(HINT_NAMES) + " (case-insensitive)", reason="unknown hint"
    )


def parse_hints(hints: HintsInput) -> list[Hint]:
    """Parse hints given as text, a dict of LOOKUP options, hint objects, or a list of those."""
    if hints is None:
        return []
    if isinstance(hints, (LookupHint, ShuffleHashHint)):
        return [hints]
    if isinstance(hints, str):
        return _Parser(hints).hints()
    if isinstance(hints, Mapping):
        return [LookupHint.from_options(hints)]
    if isinstance(hints, Iterable):
        result: list[Hint] = []
        for item in hints:
            if item is None or not isinstance(item, (str, Mapping, LookupHint, ShuffleHashHint)):
                raise HintError(
                    "hints", item, "a hint string, a dict of LOOKUP options or a hint object"
                )
            result.extend(parse_hints(item))
        return result
    raise HintError(
        "hints", hints, "a hint string, a dict of LOOKUP options, a hint object or a list of them"
    )
