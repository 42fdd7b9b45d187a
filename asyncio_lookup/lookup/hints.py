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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeAlias

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup.durations import DURATION_ALLOWED, parse_duration
from asyncio_lookup.lookup.retry import MissRetry

OutputModeName: TypeAlias = Literal["ordered", "unordered"]

LOOKUP = "LOOKUP"
SHUFFLE_HASH = "SHUFFLE_HASH"
HINT_NAMES = (LOOKUP, SHUFFLE_HASH)

LOOKUP_OPTIONS = (
    "table",
    "async",
    "output-mode",
    "capacity",
    "timeout",
    "retry-predicate",
    "retry-strategy",
    "fixed-delay",
    "max-attempts",
    "shuffle",
)
RETRY_OPTIONS = ("retry-predicate", "retry-strategy", "fixed-delay", "max-attempts")

CONF_OUTPUT_MODE = "table.exec.async-lookup.output-mode"
CONF_BUFFER_CAPACITY = "table.exec.async-lookup.buffer-capacity"
CONF_TIMEOUT = "table.exec.async-lookup.timeout"

_BOOL_ALLOWED = "'true' or 'false'"
_INT_ALLOWED = "a whole number > 0"
_HINT_SYNTAX = (
    "hints such as LOOKUP('table'='T', 'async'='true') or SHUFFLE_HASH('T'), "
    "optionally inside /*+ ... */ and separated by commas"
)


# --------------------------------------------------------------------------- value parsers


def _parse_bool(option: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise HintError(option, value, _BOOL_ALLOWED)


def _parse_positive_int(option: str, value: Any, error: type[ConfigurationError]) -> int:
    if isinstance(value, bool):
        raise error(option, value, _INT_ALLOWED)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        number = int(value)
    else:
        raise error(option, value, _INT_ALLOWED)
    if number <= 0:
        raise error(option, value, _INT_ALLOWED, reason="must be greater than 0")
    return number


def _parse_duration(option: str, value: Any, error: type[ConfigurationError]) -> float:
    try:
        return parse_duration(option, value)
    except ConfigurationError as bad:
        raise error(option, value, DURATION_ALLOWED, reason=bad.reason) from None


def _parse_output_mode(option: str, value: Any, error: type[ConfigurationError]) -> str:
    allowed = ("ordered", "allow_unordered")
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    raise error(option, value, "'ordered' or 'allow_unordered' (case-insensitive)")


def _parse_enum(option: str, value: Any, allowed: tuple[str, ...]) -> str:
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    raise HintError(option, value, " or ".join(repr(a) for a in allowed))


def _parse_table(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise HintError(option, value, "the name (or alias) of the dim table, a non-empty string")
    return value.strip()


# --------------------------------------------------------------------------- hint objects


@dataclass(frozen=True)
class LookupHint:
    """One ``LOOKUP`` hint: the options a user gave, parsed and validated (no defaults filled).

    ``None`` means "not given". Durations are seconds. Build it with :meth:`parse`,
    :meth:`from_options` or directly (the constructor validates too).
    """

    table: str
    async_: bool | None = None
    output_mode: str | None = None  # 'ordered' | 'allow_unordered'
    capacity: int | None = None
    timeout: float | None = None
    retry_predicate: str | None = None  # 'lookup_miss'
    retry_strategy: str | None = None  # 'fixed_delay'
    fixed_delay: float | None = None
    max_attempts: int | None = None
    shuffle: bool | None = None

    def __post_init__(self) -> None:
        retry = {
            "retry-predicate": self.retry_predicate,
            "retry-strategy": self.retry_strategy,
            "fixed-delay": self.fixed_delay,
            "max-attempts": self.max_attempts,
        }
        given = [name for name, value in retry.items() if value is not None]
        if given and len(given) != len(retry):
            missing = [name for name in RETRY_OPTIONS if name not in given]
            raise HintError(
                missing[0],
                None,
                "all four of " + ", ".join(repr(n) for n in RETRY_OPTIONS) + " or none of them",
                reason=f"{', '.join(repr(g) for g in given)} given without "
                f"{', '.join(repr(m) for m in missing)}",
            )
        _parse_table("table", self.table)
        for name, number in (("capacity", self.capacity), ("max-attempts", self.max_attempts)):
            if number is not None:
                _parse_positive_int(name, number, HintError)
        if self.timeout is not None and self.timeout < 0:
            raise HintError(
                "timeout", self.timeout, DURATION_ALLOWED, reason="must not be negative"
            )
        if self.fixed_delay is not None and self.fixed_delay <= 0:
            raise HintError(
                "fixed-delay", self.fixed_delay, "a duration > 0", reason="must be positive"
            )
        if given and self.timeout is not None and self.timeout <= 0:
            raise HintError(
                "timeout",
                self.timeout,
                "a duration > 0",
                reason="a retrying lookup needs a timeout (0 disables it)",
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
        """Build a hint from its key/value options (the ``'k'='v'`` pairs), validating each."""
        if not isinstance(options, Mapping):
            raise HintError("LOOKUP", options, "a mapping of LOOKUP option names to values")
        values: dict[str, Any] = {}
        for raw_name, value in options.items():
            name = str(raw_name).strip().lower()
            if name not in LOOKUP_OPTIONS:
                raise HintError(
                    str(raw_name),
                    value,
                    "one of " + ", ".join(repr(o) for o in LOOKUP_OPTIONS),
                    reason="unknown LOOKUP hint option",
                )
            if name in values:
                raise HintError(name, value, "each option at most once", reason="given twice")
            values[name] = value
        if "table" not in values:
            raise HintError(
                "table", None, "'table'='<dim table name>'", reason="LOOKUP hint needs 'table'"
            )
        return cls(
            table=_parse_table("table", values["table"]),
            async_=_opt(values, "async", _parse_bool),
            output_mode=_opt(
                values, "output-mode", lambda o, v: _parse_output_mode(o, v, HintError)
            ),
            capacity=_opt(values, "capacity", lambda o, v: _parse_positive_int(o, v, HintError)),
            timeout=_opt(values, "timeout", lambda o, v: _parse_duration(o, v, HintError)),
            retry_predicate=_opt(
                values, "retry-predicate", lambda o, v: _parse_enum(o, v, ("lookup_miss",))
            ),
            retry_strategy=_opt(
                values, "retry-strategy", lambda o, v: _parse_enum(o, v, ("fixed_delay",))
            ),
            fixed_delay=_opt(values, "fixed-delay", lambda o, v: _parse_duration(o, v, HintError)),
            max_attempts=_opt(
                values, "max-attempts", lambda o, v: _parse_positive_int(o, v, HintError)
            ),
            shuffle=_opt(values, "shuffle", _parse_bool),
        )

    def to_text(self) -> str:
        """The hint as ``LOOKUP(...)`` text (durations in ms), parseable by :meth:`parse`."""
        parts = [f"'table'='{_quote(self.table)}'"]
        for name, value in (
            ("async", self.async_),
            ("output-mode", self.output_mode),
            ("capacity", self.capacity),
            ("timeout", self.timeout),
            ("retry-predicate", self.retry_predicate),
            ("retry-strategy", self.retry_strategy),
            ("fixed-delay", self.fixed_delay),
            ("max-attempts", self.max_attempts),
            ("shuffle", self.shuffle),
        ):
            if value is None:
                continue
            if isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, float):
                text = f"{value * 1000:g} ms"
            else:
                text = str(value)
            parts.append(f"'{name}'='{text}'")
        return f"LOOKUP({', '.join(parts)})"


def _opt(values: Mapping[str, Any], name: str, parse: Any) -> Any:
    if name not in values or values[name] is None:
        return None
    return parse(name, values[name])


def _quote(text: str) -> str:
    return text.replace("'", "''")


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
    """Job-level defaults for async lookups (Flink's ``table.exec.async-lookup.*``)."""

    output_mode: OutputModeName = "ordered"
    capacity: int = 100
    timeout: float = 180.0

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> AsyncDefaults:
        """Read the defaults from a conf mapping (only the three ``table.exec.async-lookup``
        keys are looked at; a missing key keeps its default)."""
        defaults = cls()
        mode: OutputModeName = defaults.output_mode
        capacity = defaults.capacity
        timeout = defaults.timeout
        if conf.get(CONF_OUTPUT_MODE) is not None:
            parsed = _parse_output_mode(
                CONF_OUTPUT_MODE, conf[CONF_OUTPUT_MODE], ConfigurationError
            )
            mode = "unordered" if parsed == "allow_unordered" else "ordered"
        if conf.get(CONF_BUFFER_CAPACITY) is not None:
            capacity = _parse_positive_int(
                CONF_BUFFER_CAPACITY, conf[CONF_BUFFER_CAPACITY], ConfigurationError
            )
        if conf.get(CONF_TIMEOUT) is not None:
            timeout = _parse_duration(CONF_TIMEOUT, conf[CONF_TIMEOUT], ConfigurationError)
        return cls(output_mode=mode, capacity=capacity, timeout=timeout)


@dataclass(frozen=True)
class ResolvedLookup:
    """What one lookup join runs with: the hint for its table merged with the job defaults.

    ``prefer_async`` is a preference: a source without that capability uses the other one.
    ``timeout`` of ``None`` means no timeout. ``shuffle`` asks to hash-partition the probe side
    by the key's left columns before the lookup (SHUFFLE_HASH or ``'shuffle'='true'``).
    """

    table: str
    prefer_async: bool = True
    output_mode: OutputModeName = "ordered"
    capacity: int = 100
    timeout: float | None = 180.0
    retry_delay: float | None = None
    retry_max_attempts: int | None = None
    shuffle: bool = False
    hint: LookupHint | None = field(default=None, compare=False)

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

    Hints naming another table are errors (each join is given its own hints). Of two LOOKUP
    hints for the table the first wins. Missing async options come from ``defaults``.
    """
    defaults = defaults or AsyncDefaults()
    aliases = tuple(aliases)
    known = " or ".join(repr(n) for n in (table, *aliases))
    lookup: LookupHint | None = None
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
            if lookup is None:
                lookup = hint
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
    if lookup is None:
        return ResolvedLookup(
            table=table,
            output_mode=defaults.output_mode,
            capacity=defaults.capacity,
            timeout=_timeout(defaults.timeout),
            shuffle=shuffle,
        )
    output_mode: OutputModeName = defaults.output_mode
    if lookup.output_mode is not None:
        output_mode = "unordered" if lookup.output_mode == "allow_unordered" else "ordered"
    timeout = lookup.timeout if lookup.timeout is not None else defaults.timeout
    if lookup.has_retry and timeout <= 0:
        raise HintError(
            "timeout",
            timeout,
            "a duration > 0",
            reason=f"a retrying lookup needs a timeout; the job default ({CONF_TIMEOUT}) is 0",
        )
    return ResolvedLookup(
        table=table,
        prefer_async=lookup.async_ is not False,
        output_mode=output_mode,
        capacity=lookup.capacity if lookup.capacity is not None else defaults.capacity,
        timeout=_timeout(timeout),
        retry_delay=lookup.fixed_delay,
        retry_max_attempts=lookup.max_attempts,
        shuffle=shuffle or bool(lookup.shuffle),
        hint=lookup,
    )


def _timeout(seconds: float) -> float | None:
    return seconds if seconds > 0 else None


def duration_text(seconds: float | timedelta) -> str:
    """Format seconds for messages: ``'500 ms'``, ``'3 s'``."""
    value = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"
