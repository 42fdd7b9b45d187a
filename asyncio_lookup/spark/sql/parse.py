"""Parsing one statement with sqlglot's Spark dialect, plus what Flink SQL adds to it.

The dialect records whether a table's time-travel clause was written ``FOR SYSTEM_TIME AS OF``
(sqlglot folds it into ``TIMESTAMP AS OF``), so a lookup join can be told from Spark's time
travel. Parse errors carry the line and column; a secret option's value never appears in them.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ErrorLevel, ParseError, TokenError, UnsupportedError
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]

from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.masking import mask_text

SYSTEM_TIME = "system_time"
STATEMENT_ALLOWED = "one Spark SQL statement, with Flink's lookup-join syntax and DDL"
_SECRET_WORDS = ("password", "passwd", "secret", "token", "credential")
# header.<Name> options whose value is a credential (as the connectors mask them)
_SECRET_HEADERS = ("authorization", "cookie", "api-key", "apikey", "auth", "key", "signature")


class SqlError(ConfigurationError):
    """A SQL statement that cannot run: names what is wrong and what is allowed."""


class SqlParseError(SqlError):
    """A statement that does not parse; ``line`` and ``column`` are 1-based.

    The message shows the failing line with a caret under the column, and what was expected
    there when the parser knows it (``expected ')'``)."""

    def __init__(
        self, message: str, line: int | None, column: int | None, near: str, caret: str = ""
    ) -> None:
        self.line = line
        self.column = column
        self.caret = caret
        where = f"line {line}, column {column}" if line is not None else "unknown position"
        super().__init__(
            "sql", near, STATEMENT_ALLOWED, reason=f"parse error at {where}: {message}"
        )
        self._message = message

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n{self.caret}" if self.caret else text

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._message, self.line, self.column, self.value, self.caret))


def is_secret(option: str) -> bool:
    """True for an option whose value must never be shown (passwords, tokens)."""
    lowered = option.lower()
    if lowered.startswith("header.") and any(w in lowered for w in _SECRET_HEADERS):
        return True
    return any(word in lowered for word in _SECRET_WORDS)


class _Parser(Spark.Parser):  # type: ignore[misc,valid-type]
    def _parse_version(self) -> exp.Version | None:
        words = [t.text.upper() for t in (self._curr, self._next) if t is not None]
        system_time = (
            len(words) == 2 and words[0] == "FOR" and words[1] in ("SYSTEM_TIME", "SYSTEM")
        )
        version = super()._parse_version()
        if version is not None:
            version.meta[SYSTEM_TIME] = system_time
        return version  # type: ignore[no-any-return]


class _Tokenizer(Spark.Tokenizer):
    # A doubled quote inside a literal is one quote, as Spark and Flink read it ('O''Brien' is
    # O'Brien, "a""b" is a"b); sqlglot's Spark dialect takes only backslash escapes and reads
    # 'O''Brien' as two adjacent literals. The backslash stays first: the generator escapes with it.
    STRING_ESCAPES = ["\\", "'", '"']


class _Generator(Spark.Generator):  # type: ignore[misc,valid-type]
    # Spark SQL printed back as written where sqlglot's Spark generator rewrites it into
    # something else: to_char(x, fmt) into CAST(x AS STRING) (the format dropped),
    # percentile_cont/_disc(p) WITHIN GROUP (ORDER BY v) into PERCENTILE_APPROX(v, p),
    # parse_json(s) into s (a STRING, not a VARIANT); levenshtein(a, b, threshold), printed
    # right, was flagged as unsupported.
    TRANSFORMS = {
        **{k: v for k, v in Spark.Generator.TRANSFORMS.items() if k is not exp.WithinGroup},
        exp.ToChar: lambda self, e: self.function_fallback_sql(e),
        exp.ParseJSON: lambda self, e: self.func(
            "TRY_PARSE_JSON" if e.args.get("safe") else "PARSE_JSON", e.this
        ),
        exp.Levenshtein: lambda self, e: self.func(
            "LEVENSHTEIN", e.this, e.expression, e.args.get("ins_cost")
        ),
    }


class SparkSql(Spark):
    """Spark's dialect as a rewritten statement is printed for Spark to run (see
    :func:`to_spark_sql`)."""

    Generator = _Generator


def to_spark_sql(node: exp.Expr) -> str:
    """``node`` as Spark SQL; a :class:`SqlError` where sqlglot cannot print it exactly (it
    would drop an argument, and the statement would compute something else)."""
    try:
        return node.sql(dialect=SparkSql, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as error:
        raise SqlError(
            "sql",
            node.sql(dialect=SparkSql)[:200],
            "Spark SQL that sqlglot prints back exactly",
            reason=f"a lookup join's statement is rewritten, and sqlglot would change it: "
            f"{error}; write the expression another way",
        ) from None


class FlinkSpark(Spark):
    """Spark SQL that remembers ``FOR SYSTEM_TIME AS OF`` (Flink's lookup-join clause) and reads
    a doubled quote inside a string literal as one quote."""

    Tokenizer = _Tokenizer
    Parser = _Parser


class _DdlTokenizer(_Tokenizer):
    # Flink's string literals know no backslash escape: in a DDL's WITH values, a Windows path,
    # a regex or a password keeps its backslashes ('p\ss' is p, backslash, ss)
    STRING_ESCAPES = ["'", '"']


class FlinkDdl(FlinkSpark):
    """:class:`FlinkSpark` for Flink's ``CREATE TABLE ... WITH (...)``: string literals as
    Flink reads them (a doubled quote is one quote; a backslash is itself)."""

    Tokenizer = _DdlTokenizer


def parse_statement(sql: str) -> exp.Expr:
    """Parse exactly one statement (a trailing ``;`` allowed)."""
    if not isinstance(sql, str) or not sql.strip():
        raise SqlError("sql", sql, STATEMENT_ALLOWED, reason="empty statement")
    try:
        dialect = FlinkDdl if has_with_options(sql) else FlinkSpark
        statements = [s for s in sqlglot.parse(sql, dialect=dialect) if s is not None]
    except ParseError as error:
        first = error.errors[0] if error.errors else {}
        raise SqlParseError(
            _describe(sql, first, error),
            first.get("line"),
            first.get("col"),
            _near(sql, first.get("line"), first.get("col")),
            _caret(sql, first.get("line"), first.get("col")),
        ) from None
    except TokenError:
        raise SqlParseError(
            "the statement does not tokenize (an unterminated string, quoted name or comment?)",
            None,
            None,
            "",
        ) from None
    if len(statements) != 1:
        raise SqlError(
            "sql",
            f"{len(statements)} statements",
            "exactly one statement per call (a trailing ';' is allowed)",
        )
    return statements[0]


HINT_PLACE = "one hint block, right after SELECT: SELECT /*+ LOOKUP(...), SHUFFLE_HASH(...) */"


def check_hint_blocks(sql: str) -> None:
    """Refuse a ``/*+ ... */`` hint that is not the one block right after a ``SELECT``: sqlglot
    keeps a second block, or a hint after a table name (Flink's ``OPTIONS(...)``), as a plain
    comment, so the rewritten statement would silently lose it."""
    try:
        tokens = sqlglot.tokenize(sql, dialect=FlinkSpark)
    except TokenError:
        return  # parse_statement has already refused it
    starts = [-1] + [t.end for t in tokens]
    ends = [t.start for t in tokens] + [len(sql)]
    for gap_start, gap_end in zip(starts, ends, strict=True):
        # between two tokens: only white space and comments
        position = gap_start + 1
        while position < gap_end:
            if sql.startswith("--", position):
                newline = sql.find("\n", position)
                position = gap_end if newline < 0 else newline
            elif sql.startswith("/*", position):
                if sql.startswith("/*+", position):
                    _refuse_hint(sql, position)
                position = _comment_end(sql, position)
            else:
                position += 1


def _comment_end(sql: str, start: int) -> int:
    """The position after the ``/* ... */`` comment at ``start`` (nested comments counted)."""
    depth, position = 0, start
    while position < len(sql):
        if sql.startswith("/*", position):
            depth, position = depth + 1, position + 2
        elif sql.startswith("*/", position):
            depth, position = depth - 1, position + 2
            if depth == 0:
                return position
        else:
            position += 1
    return position


def _refuse_hint(sql: str, position: int) -> None:
    line = sql.count("\n", 0, position) + 1
    column = position - (sql.rfind("\n", 0, position) + 1) + 1
    body = sql[position + 3 :].lstrip()
    if body[:7].upper() == "OPTIONS":
        message = (
            "Flink's dynamic table options (/*+ OPTIONS(...) */ after a table) are not "
            "supported: put the options in the table's WITH (...) clause"
        )
    else:
        message = f"a hint here would be ignored; a SELECT takes {HINT_PLACE}"
    raise SqlParseError(message, line, column, _near(sql, line, column), _caret(sql, line, column))


_STATEMENT_WORDS = (
    "SELECT", "WITH", "CREATE", "DROP", "INSERT", "EXPLAIN", "SHOW", "DESCRIBE", "VALUES",
    "TABLE", "FROM", "SET", "USE", "CACHE", "UNCACHE", "REFRESH", "ALTER", "DELETE", "UPDATE",
    "MERGE", "TRUNCATE", "ANALYZE",
)  # fmt: skip


def _describe(sql: str, first: dict[str, Any], error: ParseError) -> str:
    """sqlglot's description, with the expected token(s) spelled out where it names them."""
    description = str(first.get("description") or error).splitlines()[0]
    highlight = str(first.get("highlight") or "")
    shown = highlight if highlight and highlight in mask_secrets(sql) else "***"
    if "<Token" in description:
        description = description.split("<Token")[0].rstrip()
        description += f" {shown!r}"
    missing = re.match(
        r"Required keyword: '(\w+)' missing for <class '[\w.]+\.(\w+)'>", description
    )
    if missing:
        return f"an incomplete {missing.group(2)} expression near {shown!r} (no {missing.group(1)})"
    if description.startswith("Expecting "):
        expected = description.removeprefix("Expecting ").strip()
        found = f"{shown!r}" if highlight else "the end of the statement"
        return f"expected {expected!r}, found {found}"
    if description.startswith("Invalid expression / Unexpected token"):
        words = sql.split()
        first_word = words[0].upper() if words else ""
        if first_word not in _STATEMENT_WORDS:
            return (
                f"unexpected {words[0]!r} at the start of the statement; expected a statement "
                "such as " + ", ".join(_STATEMENT_WORDS[:5])
            )
        return f"unexpected {shown!r}"
    return description


def _caret(sql: str, line: int | None, column: int | None) -> str:
    """The failing line of the statement (secrets masked) with a ``^`` under ``column``."""
    if line is None or column is None:
        return ""
    lines = mask_secrets(sql).splitlines() or [""]
    text = lines[min(max(line, 1), len(lines)) - 1]
    if len(text) > 200:  # a long line: show the 200 characters around the column
        start = max(0, column - 100)
        text, column = text[start : start + 200], column - start
    return f"  {text}\n  {' ' * max(column - 1, 0)}^"


def _near(sql: str, line: int | None, column: int | None) -> str:
    """The text of the failing line, with secret option values masked."""
    if line is None:
        return ""
    masked = mask_secrets(sql)
    lines = masked.splitlines() or [""]
    text = lines[min(max(line, 1), len(lines)) - 1].strip()
    return text[:200]


def has_with_options(sql: str) -> bool:
    """True when ``sql`` has a ``WITH (`` options clause (Flink's DDL; a CTE is ``WITH name``)."""
    try:
        tokens = sqlglot.tokenize(sql, dialect=FlinkSpark)
    except TokenError:
        return False
    return any(
        a.token_type == TokenType.WITH and b.token_type == TokenType.L_PAREN
        for a, b in itertools.pairwise(tokens)
    )


def mask_secrets(sql: str) -> str:
    """``sql`` with the values of secret options (``'password' = '...'``) replaced by ``***``."""
    try:
        tokens = sqlglot.tokenize(sql, dialect=FlinkSpark)
    except TokenError:
        return "<statement not shown>" if any(w in sql.lower() for w in _SECRET_WORDS) else sql
    spans: list[tuple[int, int]] = []
    for i in range(len(tokens) - 2):
        key, eq, value = tokens[i], tokens[i + 1], tokens[i + 2]
        if (
            key.token_type == TokenType.STRING
            and eq.token_type == TokenType.EQ
            and value.token_type == TokenType.STRING
        ):
            # The whole literal: escaped quotes are inside the token, and adjacent literals
            # ('sec' 'ret') are one value to Spark.
            last = i + 2
            while last + 1 < len(tokens) and tokens[last + 1].token_type == TokenType.STRING:
                last += 1
            text = "".join(t.text for t in tokens[i + 2 : last + 1])
            if is_secret(key.text) or "@" in text:
                spans.append((value.start, tokens[last].end))
    for start, end in reversed(spans):
        sql = sql[:start] + "'***'" + sql[end + 1 :]
    return mask_text(sql)  # a URL's password anywhere else: a LOOKUP hint's shared-cache URL
