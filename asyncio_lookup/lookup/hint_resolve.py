"""One join's LOOKUP hint, resolved: the hints given for its dim table (by name or alias,
merged option by option) with Flink's job-level defaults ``table.exec.async-lookup.*``
(:class:`AsyncDefaults`) filled in, as the :class:`ResolvedLookup` the join runner executes."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup.failed_rows import OnError
from asyncio_lookup.lookup.hint_merge import merge_lookup_hints
from asyncio_lookup.lookup.hints import (
    SHUFFLE_HASH,
    HintsInput,
    LookupHint,
    OutputModeName,
    output_mode_name,
    parse_capacity,
    parse_hints,
    parse_output_mode,
    parse_timeout,
    unqualified,
)
from asyncio_lookup.lookup.retry import MissRetry
from asyncio_lookup.validation import NEVER, format_duration, parse_bool, user_stacklevel

CONF_OUTPUT_MODE = "table.exec.async-lookup.output-mode"
CONF_BUFFER_CAPACITY = "table.exec.async-lookup.buffer-capacity"
CONF_TIMEOUT = "table.exec.async-lookup.timeout"
CONF_KEY_ORDERED = "table.exec.async-lookup.key-ordered-enabled"


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
            mode = output_mode_name(parse_output_mode(CONF_OUTPUT_MODE, mode, ConfigurationError))
        object.__setattr__(self, "output_mode", mode)
        key_ordered = parse_bool(CONF_KEY_ORDERED, self.key_ordered, error=ConfigurationError)
        object.__setattr__(self, "key_ordered", key_ordered)
        capacity = parse_capacity(CONF_BUFFER_CAPACITY, self.capacity, ConfigurationError)
        object.__setattr__(self, "capacity", capacity)
        timeout = parse_timeout(CONF_TIMEOUT, self.timeout, ConfigurationError)
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
        given = {name: conf[key] for key, name in fields if conf.get(key) is not None}
        if "output_mode" in given:  # Flink's names only: 'unordered' is the Python API's
            mode = parse_output_mode(CONF_OUTPUT_MODE, given["output_mode"], ConfigurationError)
            given["output_mode"] = output_mode_name(mode)
        return cls(**given)


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
    wanted = unqualified(name).lower()
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
        output_mode = output_mode_name(lookup.output_mode)
    output_mode = _keyed(output_mode, defaults)
    timeout = lookup.timeout if lookup.timeout is not None else defaults.timeout
    _check_async_options(lookup, table, timeout)
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


def _check_async_options(lookup: LookupHint, table: str, timeout: float | None) -> None:
    """Async options a sync join ignores (as Flink does) are warned about."""
    if lookup.async_ is False:
        ignored = [
            name
            for name, value in (
                ("output-mode", lookup.output_mode),
                ("capacity", lookup.capacity),
                ("timeout", lookup.timeout),
            )
            if value is not None
        ]
        if ignored:
            warnings.warn(
                f"LOOKUP hint for {table!r}: 'async'='false' looks keys up one at a time, in "
                f"input order, without a timeout: {ignored} do nothing",
                UserWarning,
                stacklevel=user_stacklevel(),
            )


def check_retry_timeout(resolved: ResolvedLookup, *, is_async: bool, full_cache: bool) -> None:
    """For a join that runs async and retries (not a sync one, nor a FULL cache's, which never
    retries): a retry delay no retry can wait out before the total timeout is an error (every
    retried row would time out); retries that together outlast it are warned about (a key that
    stays missing fails its row with a timeout instead of missing, where Flink's sync jdbc
    join would drop or pad it)."""
    delay, timeout = resolved.retry_delay, resolved.timeout
    if not is_async or full_cache or delay is None or timeout is None or timeout >= NEVER:
        return
    if delay >= timeout:
        raise HintError(
            "fixed-delay",
            format_duration(delay),
            f"a delay shorter than the timeout ({format_duration(timeout)})",
            reason="the timeout counts every retry: no retry could start before it, so every "
            "row retried would fail with a timeout",
        )
    attempts = resolved.retry_max_attempts or 0
    if delay * attempts >= timeout:
        warnings.warn(
            f"LOOKUP hint for {resolved.table!r}: {attempts} retries of "
            f"{format_duration(delay)} outlast the async timeout ({format_duration(timeout)}), "
            "which counts every retry: a key still missing then fails its row with a timeout "
            "(not a miss); raise 'timeout', lower 'max-attempts', or set 'async'='false'",
            UserWarning,
            stacklevel=user_stacklevel(),
        )


def check_batch_wait(
    resolved: ResolvedLookup, max_size: int, max_wait: float, *, is_async: bool, full_cache: bool
) -> None:
    """For a join that batches its async lookups: a ``lookup.batch.max-wait`` no lookup can
    wait out before the async timeout is an error (a batch not full by then times out every
    row in it, with a message that names only the timeout)."""
    timeout = resolved.timeout
    if not is_async or full_cache or max_size <= 1 or timeout is None or timeout >= NEVER:
        return
    if max_wait >= timeout:
        raise ConfigurationError(
            "lookup.batch.max-wait",
            format_duration(max_wait),
            f"a wait shorter than the async timeout ({format_duration(timeout)})",
            reason="a batch that is not full is sent only after the wait: each of its lookups "
            "would time out first",
        )


def _keyed(mode: OutputModeName, defaults: AsyncDefaults) -> OutputModeName:
    """Flink's rule (FLIP-519): with key order enabled, an unordered join keeps key order."""
    return "key_ordered" if mode == "unordered" and defaults.key_ordered else mode


duration_text = format_duration  # the name lookup/join.py imports
