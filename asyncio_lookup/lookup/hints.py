"""Join hints: ``LOOKUP(...)`` (FLIP-234) and ``SHUFFLE_HASH(...)`` (FLIP-204).

Hints arrive as text (a bare hint, several separated by commas, or a ``/*+ ... */`` comment),
as a ``dict`` of LOOKUP options, as :class:`LookupHint` / :class:`ShuffleHashHint` objects, or
as a list of any of these. :func:`parse_hints` turns them into hint objects;
:func:`resolve_lookup` picks the hints for one join and fills the job-level defaults, giving the
:class:`ResolvedLookup` the join runner executes.

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
from asyncio_lookup.lookup.hint_merge import merge_lookup_hints
from asyncio_lookup.lookup.l2.hint_options import SHARED_PREFIX, parse_hint_options
from asyncio_lookup.lookup.retry import MissRetry
from asyncio_lookup.validation import (
    NEVER,
    format_duration,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_int,
    unknown_option,
)

OutputModeName: TypeAlias = Literal["ordered", "unordered", "key_ordered"]

LOOKUP = "LOOKUP"
SHUFFLE_HASH = "SHUFFLE_HASH"
HINT_NAMES = (LOOKUP, SHUFFLE_HASH)

CONF_OUTPUT_MODE = "table.exec.async-lookup.output-mode"
CONF_BUFFER_CAPACITY = "table.exec.async-lookup.buffer-capacity"
CONF_TIMEOUT = "table.exec.async-lookup.timeout"
CONF_KEY_ORDERED = "table.exec.async-lookup.key-ordered-enabled"

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


def _parse_output_mode(option: str, value: Any, error: type[ConfigurationError]) -> str:
    return parse_choice(option, value, ("ordered", "allow_unordered", "key_ordered"), error=error)


def _output_mode_name(parsed: str) -> OutputModeName:
    """The runtime's name for a parsed hint or conf value (Flink's 'allow_unordered')."""
    if parsed == "allow_unordered":
        return "unordered"
    return "key_ordered" if parsed == "key_ordered" else "ordered"


def _parse_capacity(option: str, value: Any, error: type[ConfigurationError]) -> int:
    return parse_int(
        option, value, minimum=1, maximum=MAX_CAPACITY, allowed=_CAPACITY_ALLOWED, error=error
    )


def _parse_timeout(option: str, value: Any, error: type[ConfigurationError]) -> float:
    return parse_duration(
        option, value, positive=True, allowed=_TIMEOUT_ALLOWED, never=True, error=error
    )


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _quote(text: str) -> str:
    return text.replace("'", "''")


@dataclass(frozen=True)
class _HintOption:
    """One LOOKUP hint option: its :class:`LookupHint` field, parser and text form."""

    name: str
    field: str
    parse: Callable[[str, Any], Any]
    text: Callable[[Any], str] = str


HINT_OPTIONS: tuple[_HintOption, ...] = (
    _HintOption("table", "table", _parse_table, _quote),
    _HintOption("async", "async_", lambda o, v: parse_bool(o, v, error=HintError), _bool_text),
    _HintOption("output-mode", "output_mode", lambda o, v: _parse_output_mode(o, v, HintError)),
    _HintOption("capacity", "capacity", lambda o, v: _parse_capacity(o, v, HintError)),
    _HintOption(
        "timeout", "timeout", lambda o, v: _parse_timeout(o, v, HintError), format_duration
    ),
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
        return HintError("hint", self.text, _HINT_SYNTAX, reason=reason)

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


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class AsyncDefaults:
    """Job-level defaults for async lookups (Flink's ``table.exec.async-lookup.*``).

    ``key_ordered`` (``table.exec.async-lookup.key-ordered-enabled``, FLIP-519): a join whose
    output mode is unordered (by hint or by default) keeps the order per lookup key instead.
    """

    output_mode: OutputModeName = "ordered"
    capacity: int = 100
    timeout: float = 180.0
    key_ordered: bool = False

    def __post_init__(self) -> None:
        mode = self.output_mode
        if mode not in ("ordered", "unordered", "key_ordered"):
            mode = _output_mode_name(_parse_output_mode(CONF_OUTPUT_MODE, mode, ConfigurationError))
        object.__setattr__(self, "output_mode", mode)
        key_ordered = parse_bool(CONF_KEY_ORDERED, self.key_ordered, error=ConfigurationError)
        object.__setattr__(self, "key_ordered", key_ordered)
        capacity = _parse_capacity(CONF_BUFFER_CAPACITY, self.capacity, ConfigurationError)
        object.__setattr__(self, "capacity", capacity)
        timeout = _parse_timeout(CONF_TIMEOUT, self.timeout, ConfigurationError)
        object.__setattr__(self, "timeout", timeout)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> AsyncDefaults:
        """Read the defaults from a conf mapping (only the four ``table.exec.async-lookup``
        keys are looked at; a missing key keeps its default). The output mode is Flink's
        ``ORDERED`` / ``ALLOW_UNORDERED`` (or ``KEY_ORDERED``)."""
        fields = (
            (CONF_OUTPUT_MODE, "output_mode"),
            (CONF_BUFFER_CAPACITY, "capacity"),
            (CONF_TIMEOUT, "timeout"),
            (CONF_KEY_ORDERED, "key_ordered"),
        )
        return cls(**{name: conf[key] for key, name in fields if conf.get(key) is not None})


@dataclass(frozen=True)
class ResolvedLookup:
    """What one lookup join runs with: the hint for its table merged with the job defaults.

    ``prefer_async`` is a preference: a source without that capability uses the other one.
    ``timeout`` of ``None`` means no timeout. ``shuffle`` asks to hash-partition the probe side
    by the key's left columns before the lookup (SHUFFLE_HASH or ``'shuffle'='true'``).
    ``on_error`` is the error output (``'on-error'``): fail the job, or keep failed rows.
    """

    table: str
    prefer_async: bool = True
    output_mode: OutputModeName = "ordered"
    capacity: int = 100
    timeout: float | None = 180.0
    retry_delay: float | None = None
    retry_max_attempts: int | None = None
    shuffle: bool = False
    on_error: OnError = OnError.FAIL
    hint: LookupHint | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.timeout is not None and self.timeout >= NEVER:  # 100 years or more: none
            object.__setattr__(self, "timeout", None)

    @property
    def has_retry(self) -> bool:
        return self.retry_delay is not None and self.retry_max_attempts is not None

    def miss_retry(self) -> MissRetry | None:
        """The lookup-miss retry for the chain, or ``None`` without retry."""
        if self.retry_delay is None or self.retry_max_attempts is None:
            return None
        return MissRetry(delay=self.retry_delay, max_attempts=self.retry_max_attempts)


def _names_match(name: str, table: str, aliases: Iterable[str]) -> bool:
    wanted = name.strip().lower()
    return wanted == table.lower() or any(wanted == a.lower() for a in aliases)


def resolve_lookup(
    hints: HintsInput,
    table: str,
    *,
    aliases: Iterable[str] = (),
    defaults: AsyncDefaults | None = None,
) -> ResolvedLookup:
    """Resolve the hints of one lookup join against the dim table ``table`` (or an alias).

    Hints naming another table are errors (each join is given its own hints). Several LOOKUP
    hints for the table are merged option by option (:mod:`~asyncio_lookup.lookup.hint_merge`;
    a conflicting value is an error). Missing async options come from ``defaults``.
    """
    defaults = defaults or AsyncDefaults()
    aliases = tuple(aliases)
    known = " or ".join(repr(n) for n in (table, *aliases))
    lookups: list[LookupHint] = []
    shuffle = False
    for hint in parse_hints(hints):
        if isinstance(hint, LookupHint):
            if not _names_match(hint.table, table, aliases):
                raise HintError(
                    "table",
                    hint.table,
                    known,
                    reason="the LOOKUP hint names a table that is not the dim table of this join",
                )
            lookups.append(hint)
        else:
            for name in hint.tables:
                if not _names_match(name, table, aliases):
                    raise HintError(
                        SHUFFLE_HASH,
                        name,
                        known,
                        reason="SHUFFLE_HASH names a table that is not the dim table of this join",
                    )
            shuffle = True
    lookup = merge_lookup_hints(lookups)
    if lookup is None:
        return ResolvedLookup(
            table=table,
            output_mode=_keyed(defaults.output_mode, defaults),
            capacity=defaults.capacity,
            timeout=defaults.timeout,
            shuffle=shuffle,
        )
    output_mode = defaults.output_mode
    if lookup.output_mode is not None:
        output_mode = _output_mode_name(lookup.output_mode)
    output_mode = _keyed(output_mode, defaults)
    timeout = lookup.timeout if lookup.timeout is not None else defaults.timeout
    return ResolvedLookup(
        table=table,
        prefer_async=lookup.async_ is not False,
        output_mode=output_mode,
        capacity=lookup.capacity if lookup.capacity is not None else defaults.capacity,
        timeout=timeout,
        retry_delay=lookup.fixed_delay,
        retry_max_attempts=lookup.max_attempts,
        shuffle=shuffle or bool(lookup.shuffle),
        on_error=OnError.of(lookup.on_error or "fail"),
        hint=lookup,
    )


def _keyed(mode: OutputModeName, defaults: AsyncDefaults) -> OutputModeName:
    """Flink's rule (FLIP-519): with key order enabled, an unordered join keeps key order."""
    return "key_ordered" if mode == "unordered" and defaults.key_ordered else mode


duration_text = format_duration  # the name lookup/join.py imports
