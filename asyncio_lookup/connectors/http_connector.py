"""An HTTP/JSON service as a dim table, read with the library's own HTTP/1.1 client on asyncio,
aiohttp or pyreqwest (``client``; see :mod:`~asyncio_lookup.connectors.http_client`); the sync
mode runs the same code.

A point lookup is ``GET url`` where ``url`` is a template over the key columns
(``"http://host/customers/{id}"``). Every key value is percent-encoded with nothing kept safe
(dots too), so a key can never add a path segment, a query, a fragment, a header or change the
host; placeholders are only allowed in the path and query of the template.

The response body is JSON: an object (one row), a list of objects (several rows) or ``null``,
optionally found under ``rows_field`` (a dotted path such as ``"data.items"``;
``batch_rows_field`` and ``scan_rows_field`` default to it, ``""`` means the whole body).
Statuses in ``miss_statuses`` (404) are a miss; ``transient_statuses`` (429, 502, 503, 504),
timeouts and connection errors raise :class:`~asyncio_lookup.errors.TransientError` with the
server's ``Retry-After`` (seconds or HTTP-date), for the lookup layer's ``lookup.max-retries``.

Batches (``batch_url``): ``batch_mode="post_json"`` sends ``POST batch_url`` with body
``{"<batch_field>": [{"<key column>": value, ...}, ...]}`` (values: :func:`json_value`);
``batch_mode="query"`` sends ``GET batch_url?<key column>=v1&<key column>=v2...``. A key no
request can carry fails alone. The response rows must contain the key columns; they are
matched back to the keys by value: as text, and numbers by number (``2.0`` is ``2``).

A scan (``scan_url``) follows pages: the next page is the value at ``next_field`` in the
body - a URL (same origin only, credentials are never sent elsewhere) or, with
``cursor_param``, a cursor put into that query parameter - or else the ``Link`` header's
``rel="next"`` link. Every page must be a 2xx answer with a body: a miss status or an empty
answer fails the scan (a missing page is not the end of the table).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import math
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Mapping,
    Sequence,
)
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import quote, unquote_plus, urljoin, urlsplit, urlunsplit

from asyncio_lookup.connectors import http_client
from asyncio_lookup.connectors._args import MAX_POOL, count, seconds
from asyncio_lookup.connectors._secrets import (
    identity_digest,
    mask_headers,
    mask_url,
    redact,
    shown_url,
    url_secrets,
)
from asyncio_lookup.connectors.http_answers import (
    MISSING,
    check_loop,
    dig,
    header_values,
    link_next,
    missing_field,
    parse_retry_after,
)
from asyncio_lookup.connectors.http_batch_keys import (
    answer_match,
    chunks_apart,
    has_number,
    key_match,
    number_columns,
    spelt_otherwise,
)
from asyncio_lookup.connectors.http_client import EMPTY, HttpClient, check_client, decode_json
from asyncio_lookup.connectors.http_urls import (
    check_headers,
    decoded_separators,
    encode_value,
    fixed_url,
    one_credentials,
    path_fields,
    split_before_decoding,
    status_set,
    url_template,
    utf8_text,
)
from asyncio_lookup.connectors.keys import has_null, key_dict, key_text
from asyncio_lookup.connectors.scan import Scan
from asyncio_lookup.connectors.source import AsyncFirstSource
from asyncio_lookup.errors import (
    ConfigurationError,
    DataFormatError,
    HttpStatusError,
    TransientError,
)
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row

log = logging.getLogger(__name__)

BATCH_MODES = ("post_json", "query")
# statuses a server answers a request line or URL too long for it with (nginx, Apache: 414;
# aiohttp, Node: 400; h11/uvicorn: 431), and the URL length from which a batch names it
_URL_REFUSED = frozenset((400, 414, 431))
#: Client-error statuses one bad key (or too many keys) of a batch request may cause: a value
#: the service refuses, a URL, header or body too large; not the request as such.
_ONE_KEY_MAY_CAUSE = frozenset((400, 413, 414, 422, 431))
_LONG_URL = 2048
T = TypeVar("T")
_CHECKED_KEY_TYPES = (str, int, float)  # keys a point answer's key columns are checked against
_ACCEPT = {"Accept": "application/json"}


def _inexact_as_float(value: Any) -> bool:
    """Whether a JSON float may not tell ``value`` from other keys: a decimal, or an integer
    beyond 2**53 (a service may write ids as floats)."""
    kind = type(value)
    return kind is Decimal or (kind is int and not -(2**53) < value < 2**53)


def open_client(c: HttpConnector) -> HttpClient:
    """A new client for ``c`` (its ``client`` option); call on the loop that will use it."""
    if c.client == "aiohttp":
        from asyncio_lookup.connectors.http_aiohttp import AiohttpClient

        return AiohttpClient(c)
    if c.client == "pyreqwest":
        from asyncio_lookup.connectors.http_pyreqwest import PyreqwestClient

        return PyreqwestClient(c)
    from asyncio_lookup.connectors.http_asyncio import AsyncioClient

    return AsyncioClient(c)


class HttpConnector(AsyncFirstSource):
    """A dim table behind an HTTP/JSON service. Picklable; clients open on the executor.

    ``max_connections`` is the connection-pool size of each executor process (default 100,
    the default async ``capacity``, so a full pipeline of point lookups never waits for a
    connection). ``client``: ``"asyncio"`` (default), ``"aiohttp"`` or ``"pyreqwest"`` (see
    :mod:`~asyncio_lookup.connectors.http_client`).
    """

    def __init__(
        self,
        url: str,
        key_columns: Sequence[str] | str | None = None,
        *,
        rows_field: str | None = None,
        batch_rows_field: str | None = None,
        scan_rows_field: str | None = None,
        miss_statuses: Collection[int] = (404,),
        transient_statuses: Collection[int] = (429, 502, 503, 504),
        headers: Mapping[str, str] | None = None,
        basic_auth: tuple[str, str] | None = None,
        bearer_token: str | None = None,
        timeout: float = 10.0,
        batch_url: str | None = None,
        batch_mode: str = "post_json",
        batch_field: str = "keys",
        batch_size: int = 100,
        scan_url: str | None = None,
        next_field: str | None = None,
        cursor_param: str | None = None,
        max_connections: int = 100,
        client: str | None = None,
        max_body_size: int = 64 * 1024 * 1024,
        check_answer_keys: bool = True,
    ) -> None:
        self.template, url_auth = url_template(url, "url")
        self.key_columns = self.template.key_columns(key_columns)
        # a placeholder in the path given "" would address the collection (a miss instead)
        self.path_fields = path_fields(self.template)
        self.split_before_decoding = split_before_decoding(self.template)
        self.decoded_separators = decoded_separators(self.template)
        # one key column in one placeholder: a point URL is prefix + value + suffix
        self.point_affixes = self.template.single_field if len(self.key_columns) == 1 else None
        self.batch_url, batch_auth = fixed_url(batch_url, "batch_url")
        self.scan_url, scan_auth = fixed_url(scan_url, "scan_url")
        url_auth = one_credentials(url=url_auth, batch_url=batch_auth, scan_url=scan_auth)
        if basic_auth is not None and not (
            isinstance(basic_auth, (tuple, list))
            and len(basic_auth) == 2
            and all(isinstance(part, str) for part in basic_auth)
        ):
            raise ConfigurationError("basic_auth", "***", "a (user, password) pair of strings")
        if bearer_token is not None and (not isinstance(bearer_token, str) or not bearer_token):
            raise ConfigurationError("bearer_token", "***", "a non-empty string")
        header_names = {str(name).lower() for name in headers or {}}
        given = [
            name
            for name, value in (
                ("basic_auth", basic_auth),
                ("credentials in the URL", url_auth),
                ("bearer_token", bearer_token),
                ("an Authorization header", "authorization" in header_names or None),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise ConfigurationError(
                "basic_auth / bearer_token",
                "***",
                "one way to authenticate",
                f"{' and '.join(given)} are given: which one would be sent is not clear",
            )
        self.basic_auth = tuple(basic_auth) if basic_auth is not None else url_auth
        self.bearer_token = bearer_token
        self.headers = dict(headers or {})
        check_headers("headers", self.headers, mask_headers(self.headers))
        check_headers("basic_auth / bearer_token", self.request_headers(), "***")
        for option, value in (
            ("rows_field", rows_field),
            ("batch_rows_field", batch_rows_field),
            ("scan_rows_field", scan_rows_field),
            ("next_field", next_field),
            ("cursor_param", cursor_param),
        ):
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(option, value, "a field name (text) or None")
        self.rows_field = rows_field
        self.batch_rows_field = rows_field if batch_rows_field is None else batch_rows_field
        self.scan_rows_field = rows_field if scan_rows_field is None else scan_rows_field
        self.miss_statuses = status_set("miss_statuses", miss_statuses)
        self.transient_statuses = status_set("transient_statuses", transient_statuses)
        if not isinstance(check_answer_keys, bool):
            raise ConfigurationError("check_answer_keys", check_answer_keys, "True or False")
        self.check_answer_keys = check_answer_keys
        if 200 in self.miss_statuses:
            raise ConfigurationError(
                "miss_statuses",
                sorted(self.miss_statuses),
                "statuses other than 200 (the answer with rows)",
                "every lookup would be a miss",
            )
        answers = sorted(s for s in self.transient_statuses if 200 <= s < 300)
        if answers:  # a 2xx is read as an answer before a transient status is looked for
            raise ConfigurationError(
                "transient_statuses",
                sorted(self.transient_statuses),
                "statuses outside 200-299 (a 2xx is an answer)",
            )
        both = sorted(self.miss_statuses & self.transient_statuses)
        if both:
            raise ConfigurationError(
                "miss_statuses / transient_statuses",
                both,
                "statuses in one of the two: a miss is final, a transient status is retried",
                f"{both} in both",
            )
        self.timeout = seconds("timeout", timeout)
        if batch_mode not in BATCH_MODES:
            raise ConfigurationError("batch_mode", batch_mode, " | ".join(BATCH_MODES))
        self.batch_mode = batch_mode
        if "content-type" in header_names and batch_url is not None and batch_mode == "post_json":
            raise ConfigurationError(  # every client sent its own beside it: refused with 400
                "headers",
                mask_headers(self.headers),
                "headers other than Content-Type with batch_mode='post_json'",
                "a batch request's body is JSON, sent with Content-Type: application/json",
            )
        if not isinstance(batch_field, str) or not batch_field:
            raise ConfigurationError("batch_field", batch_field, "a non-empty field name")
        self.batch_field = batch_field
        self.batch_size = count("batch_size", batch_size)
        self.max_connections = count("max_connections", max_connections, maximum=MAX_POOL)
        self.max_body_size = count("max_body_size", max_body_size, maximum=2**40)
        self.client = check_client(http_client.DEFAULT_CLIENT if client is None else client)
        self.next_field = next_field
        self.cursor_param = cursor_param
        if cursor_param and not next_field:
            raise ConfigurationError(
                "next_field",
                next_field,
                "the body field holding the cursor",
                "cursor_param needs next_field",
            )

    def __repr__(self) -> str:
        parts = [
            f"url={mask_url(self.template.template)!r}",
            f"key_columns={list(self.key_columns)}",
        ]
        if self.batch_url:
            parts.append(f"batch_url={mask_url(self.batch_url)!r}, batch_mode={self.batch_mode!r}")
        if self.scan_url:
            parts.append(f"scan_url={mask_url(self.scan_url)!r}")
        if self.headers:
            parts.append(f"headers={mask_headers(self.headers)!r}")
        if self.basic_auth:
            parts.append(f"basic_auth=({self.basic_auth[0]!r}, '***')")
        if self.bearer_token:
            parts.append("bearer_token='***'")
        return f"HttpConnector({', '.join(parts)})"

    @property
    def target(self) -> str:
        """What run-time errors name: the URL template (secrets masked)."""
        return f"HTTP {mask_url(self.template.template)}"

    @property
    def cache_identity(self) -> str:
        """What its answers depend on (the shared cache's namespace): URLs, key columns, rows
        fields, statuses, headers and credentials (digested, never in clear)."""
        settings = (
            self.template.template,
            self.key_columns,
            (self.rows_field, self.batch_rows_field, self.scan_rows_field),
            sorted(self.miss_statuses),
            sorted(self.request_headers().items()),
            (self.batch_url, self.batch_mode, self.batch_field),
            (self.scan_url, self.next_field, self.cursor_param),
        )
        return identity_digest("http", settings)

    # -- LookupTableSource -------------------------------------------------------------------

    def async_lookup_function(self) -> AsyncLookupFunction:
        if self.batch_url is not None:
            return _HttpBatchLookup(self)
        return _HttpLookup(self)

    def scan(self) -> Scan | None:
        if self.scan_url is None:
            return None
        return super().scan()

    # -- requests and responses --------------------------------------------------------------

    def request_headers(self, with_body: bool = False) -> dict[str, str]:
        headers = {} if any(k.lower() == "accept" for k in self.headers) else dict(_ACCEPT)
        headers.update(self.headers)
        if self.basic_auth:
            token = base64.b64encode(":".join(self.basic_auth).encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        if self.bearer_token:
            headers["Authorization"] = f"Bearer {self.bearer_token}"
        if with_body:
            headers["Content-Type"] = "application/json"
        return headers

    def secrets(self) -> list[str]:
        found = url_secrets(self.template.template) + [
            v for k, v in self.headers.items() if mask_headers({k: v})[k] != v
        ]
        if self.basic_auth:
            found.append(self.basic_auth[1])
            found.append(base64.b64encode(":".join(self.basic_auth).encode()).decode())
        if self.bearer_token:
            found.append(self.bearer_token)
        return found

    def point_url(self, key: Key) -> str | None:
        """The GET URL of one key; ``None`` for a key with a NULL (a miss, no request)."""
        columns = self.key_columns
        if len(columns) == 1 and len(key) == 1:
            (value,) = key
            if value is None or (value == "" and self.path_fields):
                return None
            affixes = self.point_affixes
            if affixes is not None:
                return affixes[0] + encode_value(value) + affixes[1]
            return self.template.format(
                {columns[0]: value}, encode_value, self.split_before_decoding
            )
        values = key_dict(columns, tuple(key))
        if has_null(tuple(values.values())) or any(values[f] == "" for f in self.path_fields):
            return None
        return self.template.format(
            values, encode_value, self.split_before_decoding, self.decoded_separators
        )

    def batch_item(self, key: Key) -> str:
        """One key as a batch request writes it: a JSON object (``post_json``) or query pairs;
        :class:`DataFormatError` for a value it cannot write (for this key only)."""
        values = key_dict(self.key_columns, key)
        if self.batch_mode == "post_json":
            fields = (f"{json.dumps(c)}:{json_value(v)}" for c, v in values.items())
            return "{" + ",".join(fields) + "}"
        return "&".join(f"{quote(c, safe='')}={encode_value(v)}" for c, v in values.items())

    def batch_request(self, items: Sequence[str]) -> tuple[str, str, bytes | None]:
        """The request of a batch of :meth:`batch_item` texts."""
        assert self.batch_url is not None
        if self.batch_mode == "post_json":
            body = f"{{{json.dumps(self.batch_field)}:[{','.join(items)}]}}"
            return "POST", self.batch_url, body.encode()
        base = self.batch_url.partition("#")[0]  # a fragment is never sent: keys go before it
        separator = "" if base.endswith(("?", "&")) else "&" if "?" in base else "?"
        return "GET", f"{base}{separator}{'&'.join(items)}", None

    def transient(
        self, message: str, retry_after: float | None = None, status: int | None = None
    ) -> TransientError:
        message = redact(message, self.secrets())
        log.debug("%s", message)  # per attempt; the error that ends the retries says it once
        return TransientError(message, retry_after=retry_after, status=status)

    def rows(
        self,
        method: str,
        url: str,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        rows_field: str | None,
    ) -> tuple[list[Row], Any]:
        """Rows of one response (empty on a miss status), and the decoded body."""
        if not self.answered(method, url, status, headers, body):
            return [], None
        decoded = decode_json(self, method, url, body)
        return self.rows_of(method, url, decoded, rows_field), (
            None if decoded is EMPTY else decoded
        )

    def answered(
        self, method: str, url: str, status: int, headers: Mapping[str, str], body: Any
    ) -> bool:
        """True for a 2xx answer with a body to read; False for a miss status (and 204);
        raises for the rest: transient statuses (with ``Retry-After``) and errors."""
        if status in self.miss_statuses:
            return False
        if 200 <= status < 300:
            return status != 204
        raise self.status_error(method, url, status, headers, body)

    def status_error(
        self, method: str, url: str, status: int, headers: Mapping[str, str], body: Any
    ) -> Exception:
        """The error of a status that is not an answer: transient (with ``Retry-After``) or
        :class:`HttpStatusError`."""
        if status in self.transient_statuses:
            retry_after = parse_retry_after(headers.get("Retry-After"))
            return self.transient(
                f"HTTP {method} {shown_url(url)} answered {status}"
                + (f", retry after {retry_after:g}s" if retry_after is not None else ""),
                retry_after,
                status,
            )
        excerpt = bytes(body[:200]).decode("utf-8", "replace")
        return HttpStatusError(
            redact(f"HTTP {method} {shown_url(url)} answered {status}: {excerpt}", self.secrets()),
            status,
        )

    def rows_of(self, method: str, url: str, decoded: Any, rows_field: str | None) -> list[Row]:
        """The rows in a decoded 2xx body (``EMPTY``: none)."""
        if decoded is EMPTY:
            return []
        value = dig(decoded, rows_field) if rows_field else decoded
        if value is MISSING:
            assert rows_field is not None  # dig() of no path is the body
            problem = missing_field(decoded, rows_field)
            if problem is None:  # an empty list left out
                return []
            raise DataFormatError(
                f"HTTP {method} {shown_url(url)}: the answer has no {rows_field!r} (rows_field): "
                f"{problem}; a null there is a miss"
            )
        if type(value) is dict:
            return [value]
        if value is None:
            return []
        if isinstance(value, dict):
            return [value]
        if isinstance(value, list) and all(isinstance(r, dict) for r in value):
            return list(value)
        raise DataFormatError(
            f"HTTP {method} {shown_url(url)}: rows"
            + (f" at {rows_field!r}" if rows_field else "")
            + f" are {type(value).__name__}, expected an object or a list of objects"
        )

    def foreign_answer(self, key: Key, rows: Sequence[Row]) -> Row | None:
        """A row of a point answer to ``key`` holding every key column, none null, with
        another key's values, when no row of the answer is ``key``'s (matched as a batch
        answer's rows are, and alike in any case): maybe the answer to another request. None
        when a row is ``key``'s, or nothing tells: a key column left out; a key of text and
        numbers only is checked (a date or a time may come back in another format; a DECIMAL
        or an integer beyond 2**53 as a JSON float that cannot tell it apart)."""
        columns = self.key_columns
        if len(columns) == 1 and len(rows) == 1:  # the usual answer: one row, of the key
            value = rows[0].get(columns[0])
            if value is None or value == key[0]:
                return None
        if not all(type(v) in _CHECKED_KEY_TYPES for v in key) or any(
            _inexact_as_float(v) for v in key
        ):
            return None
        foreign = None
        for row in rows:
            verdict = self._row_is_key_s(key, row)
            if verdict:
                return None
            if verdict is False and foreign is None:
                foreign = row
        return foreign

    def _row_is_key_s(self, key: Key, row: Row) -> bool | None:
        """Whether ``row``'s key columns are ``key``'s; None when it lacks one (or one is null)."""
        columns = self.key_columns
        if len(columns) == 1:
            value = row.get(columns[0])
            if value is None:
                return None
            if value == key[0]:
                return True
            values: list[Any] = [value]
        else:
            values = [row.get(c) for c in columns]
            if None in values:
                return None
            if values == list(key):
                return True
        texts = tuple(map(key_text, values))
        if texts == tuple(map(key_text, key)):
            return True
        if tuple(t.casefold() for t in texts) == tuple(key_text(v).casefold() for v in key):
            return True
        return has_number(key) and answer_match(values, number_columns(key)) == key_match(key)

    def group(
        self, keys: Sequence[Key], rows: Sequence[Row], exact: Sequence[Row] | None = None
    ) -> list[Collection[Row]]:
        """Each key's rows of a batch answer, matched on the key columns' values as text
        (:func:`key_text` of both, as sent: ``-0.0`` is ``0.0``) or, for a key with a number,
        by value (:func:`number_text`: the key ``2.0`` matches ``2``); a row without all the
        key columns, or with a null among them, belongs to no key. An answer none of whose rows
        has every key column is a :class:`DataFormatError`: the service names its keys otherwise
        (every key would miss). ``exact``: the same rows decoded with exact decimals, whose
        key values are matched in place of ``rows``' (for DECIMAL keys and integers beyond
        2**53)."""
        columns = self.key_columns
        if rows and not any(all(c in row for c in columns) for row in rows):
            raise DataFormatError(
                f"HTTP batch answer of {len(rows)} row(s): none has all the key columns "
                f"{list(columns)} that rows are matched to keys by (the first row's fields: "
                f"{sorted(rows[0])[:20]}); name them as the service does (key_columns, the "
                "placeholders of url)"
            )
        by_text: dict[tuple[str, ...], list[Row]] = {}
        # by which key columns hold numbers (:func:`number_columns`: one pattern in a join,
        # whose key columns have fixed types), the rows by their key values read that way
        by_number: dict[tuple[bool, ...], dict[tuple[str, ...], list[Row]]] = {
            numbers: {} for numbers in {number_columns(k) for k in keys if has_number(k)}
        }
        for row, matched in zip(rows, rows if exact is None else exact, strict=True):
            values = [matched.get(c) for c in columns]
            if None not in values:
                by_text.setdefault(tuple(map(key_text, values)), []).append(row)
                for numbers, rows_by in by_number.items():
                    rows_by.setdefault(answer_match(values, numbers), []).append(row)
        out: list[Collection[Row]] = []
        for key in keys:
            found = by_text.get(tuple(map(key_text, key)), [])
            if has_number(key):
                more = by_number[number_columns(key)].get(key_match(key), [])
                seen = set(map(id, found))
                found = found + [r for r in more if id(r) not in seen]
            out.append([dict(r) for r in found])
        return out

    def next_page(self, current: str, headers: Mapping[str, str], body: Any) -> str | None:
        if self.next_field:
            value = dig(body, self.next_field)
            if value is MISSING or value in (None, ""):
                return None
            if self.cursor_param:
                return self.cursor_url(str(value))
            target = urljoin(current, str(value))
        else:
            linked = link_next(header_values(headers, "Link"), current)
            if linked is None:
                return None
            target = linked
        if urlsplit(target)[:2] != urlsplit(current)[:2]:
            raise DataFormatError(
                f"scan: refusing to follow next page {mask_url(target)!r} to another origin"
            )
        return target

    def cursor_url(self, cursor: str) -> str:
        """``scan_url`` with ``cursor`` in ``cursor_param`` (in place of one it had); its other
        query parameters kept as they are written, blank ones too."""
        assert self.scan_url is not None and self.cursor_param is not None
        parts = urlsplit(self.scan_url)
        kept = [
            pair
            for pair in parts.query.split("&")
            if pair and unquote_plus(pair.partition("=")[0]) != self.cursor_param
        ]
        kept.append(f"{quote(self.cursor_param, safe='')}={quote(cursor, safe='')}")
        return urlunsplit(parts._replace(query="&".join(kept)))

    def scan_page(self, url: str, status: int, headers: Mapping[str, str], data: bytes) -> Any:
        """The decoded body of a scan page: a 2xx answer with a body. Anything else raises,
        a miss status too (a page that is not there is not the end of the table; an empty
        table is an empty list): transient statuses as :class:`TransientError`."""
        if not 200 <= status < 300:
            raise self.status_error("GET", url, status, headers, data)
        decoded = EMPTY if status == 204 else decode_json(self, "GET", url, data)
        if decoded is EMPTY:
            raise DataFormatError(
                f"scan: page {mask_url(url)!r} answered {status} without a body; a page is "
                "a 2xx answer with JSON rows (an empty table: an empty list)"
            )
        return decoded

    # -- scan --------------------------------------------------------------------------------

    async def _scan(self) -> AsyncIterator[Row]:
        url: str | None = self.scan_url
        seen: set[str] = set()
        client = open_client(self)
        try:
            while url is not None:
                check_loop(url, seen)
                status, headers, data = await client.fetch("GET", url, None)
                body = self.scan_page(url, status, headers, data)
                for row in self.rows_of("GET", url, body, self.scan_rows_field):
                    yield row
                url = self.next_page(url, headers, body)
        finally:
            await client.close()


def json_value(value: Any) -> str:
    """A key value as JSON: a number as its number text (``-0.0`` as ``0.0``, a ``Decimal``
    exactly), text, a boolean, any other value as its text (``str()``, as a JSON string);
    :class:`DataFormatError` for NaN and infinities (no JSON number) and invalid Unicode."""
    if isinstance(value, (Decimal, float)):
        finite = value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)
        if not finite:
            raise DataFormatError(
                f"key value {value!r} has no JSON number: it cannot be sent in a batch"
            )
        return key_text(value)  # -0.0 as 0.0
    if isinstance(value, int):  # bool too: true / false
        return json.dumps(value)
    return json.dumps(utf8_text(value))


class _HttpLookup(AsyncLookupFunction):
    def __init__(self, connector: HttpConnector) -> None:
        self.connector = connector
        self.client: HttpClient | None = None
        self.check_keys = connector.check_answer_keys  # off once the service's shape is known
        self._retired: set[HttpClient] = set()  # clients whose connections read foreign answers
        self._closing: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        if self.client is None:
            self.client = open_client(self.connector)

    async def _client(self) -> HttpClient:
        if self.client is None:
            await self.open()
        assert self.client is not None
        return self.client

    async def async_lookup(self, key: Key) -> Collection[Row]:
        c = self.connector
        client = self.client if self.client is not None else await self._client()
        url = c.point_url(key)  # one key column: prefix + encoded value + suffix, no parse
        if url is None:
            return []
        status, headers, payload = await client.get_json(url)
        rows = self._answer_rows(url, status, headers, payload)
        if self.check_keys and c.foreign_answer(key, rows) is not None:
            fresh = await self._asked_again(lambda client: self._point_rows(client, url))
            if c.foreign_answer(key, fresh) is None:
                self.retire_client(client)  # a pooled connection read another request's answer
                return fresh
            self._service_s_shape(f"HTTP GET {shown_url(url)}", key)
            return fresh
        return rows

    async def _point_rows(self, client: HttpClient, url: str) -> list[Row]:
        status, headers, payload = await client.get_json(url)
        return self._answer_rows(url, status, headers, payload)

    def _answer_rows(
        self, url: str, status: int, headers: Mapping[str, str], payload: Any
    ) -> list[Row]:
        """The rows of a point answer ([] for a miss)."""
        c = self.connector
        # answered() and rows_of() of the usual answer: a 200 (never a miss status) with one
        # object as the body
        if status == 200 and type(payload) is dict and not c.rows_field:
            return [payload]
        if not c.answered("GET", url, status, headers, payload):
            return []
        return c.rows_of("GET", url, payload, c.rows_field)

    async def _asked_again(self, ask: Callable[[HttpClient], Awaitable[T]]) -> T:
        """An answer that may be another request's (a server or proxy that answered one twice:
        an HTTP/1.1 connection then reads each answer one request late), asked again on a new
        connection, which no earlier answer can reach. If that one is the key's, the pooled
        connections are retired: new lookups get a new client; the old one is closed once its
        requests in flight had their time (they keep their deadlines)."""
        fresh = open_client(self.connector)
        try:
            answer = await ask(fresh)
        finally:
            await fresh.close()
        return answer

    def retire_client(self, old: HttpClient) -> None:
        """New lookups get a new client (unless ``old`` was retired already); ``old`` closes
        after the connector's timeout, when its requests in flight had their time."""
        if self.client is not old:
            return
        self.client = None
        self._retired.add(old)

        def close_old() -> None:
            if old in self._retired:
                self._retired.discard(old)
                task = asyncio.ensure_future(old.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

        asyncio.get_running_loop().call_later(self.connector.timeout + 1.0, close_old)

    def _service_s_shape(self, request: str, key: Key, taken: str = "taken") -> None:
        """A new connection answered another key too: the service's own way (rows of related
        keys, keys written otherwise). Checked no more by this function, warned once.
        ``taken``: what became of the rows."""
        if not self.check_keys:
            return  # another lookup in flight found it first
        self.check_keys = False
        log.warning(
            "%s answered the key %r with rows of other keys on a new connection too: %s as "
            "the service's own answers (rows of related keys, keys written otherwise), and "
            "answers are no longer checked in this task's worker; set "
            "HttpConnector(check_answer_keys=False) to skip the check and its second request",
            request,
            key,
            taken,
        )

    async def close(self) -> None:
        retired, self._retired = list(self._retired), set()
        for client in retired:
            await client.close()
        for task in list(self._closing):
            await task
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()


async def _all_or_none(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Each call's result, in order; on the first error the other calls are cancelled (and
    awaited) before it is raised, so none goes on past the batch call it belongs to."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class _HttpBatchLookup(_HttpLookup):
    spelling_warned = False  # a batch answer had a key in the service's own spelling

    @property
    def max_batch_size(self) -> int | None:
        return self.connector.batch_size

    async def async_lookup_batch(
        self, keys: Sequence[Key]
    ) -> Sequence[Collection[Row] | BaseException]:
        keys = [tuple(k) for k in keys]
        c = self.connector
        items: dict[Key, str] = {}
        refused: dict[Key, DataFormatError] = {}  # a key no request can carry: its own error
        for key in dict.fromkeys(k for k in keys if not has_null(k)):
            try:
                items[key] = c.batch_item(key)
            except DataFormatError as error:
                refused[key] = error
        chunks = chunks_apart(list(items), c.batch_size)
        client = await self._client()
        found: dict[Key, Collection[Row]] = {}
        several = len(items) > 1
        try:
            results = await _all_or_none(
                [self._chunk(client, chunk, items, several) for chunk in chunks]
            )
        except HttpStatusError as error:
            if several and error.status in _ONE_KEY_MAY_CAUSE | c.miss_statuses:
                error.split_batch = True  # the batcher sends the keys again in halves
            raise
        for chunk, (rows, exact) in zip(chunks, results, strict=True):
            grouped = c.group(chunk, rows, exact)
            if self.check_keys and rows and not any(grouped):
                # rows with every key column, none of a key asked for: maybe another request's
                fresh_rows, fresh_exact = await self._asked_again(
                    functools.partial(self._chunk, chunk=chunk, items=items, several=several)
                )
                grouped = c.group(chunk, fresh_rows, fresh_exact)
                rows, exact = fresh_rows, fresh_exact
                if any(grouped):
                    self.retire_client(client)
                elif fresh_rows:
                    self._service_s_shape(
                        f"the batch request for {len(chunk)} key(s)",
                        chunk[0],
                        "matched to keys as sent (none was theirs)",
                    )
            if not self.spelling_warned and sum(map(len, grouped)) < len(rows):
                self._spelt_otherwise(chunk, grouped, rows if exact is None else exact)
            for key, key_rows in zip(chunk, grouped, strict=True):
                found[key] = key_rows
        return [refused.get(k) or [dict(r) for r in found.get(k, ())] for k in keys]

    def _spelt_otherwise(
        self, chunk: Sequence[Key], grouped: Sequence[Collection[Row]], rows: Sequence[Row]
    ) -> None:
        """Warn once when an answer's row no key matched has the loose form of a key that got
        no row (:func:`spelt_otherwise`): that key misses in batches."""
        found = spelt_otherwise(self.connector.key_columns, chunk, grouped, rows)
        if found is None:
            return
        self.spelling_warned = True
        log.warning(
            "a batch answer has a row of the key %r, not asked for, and none of the key %r: "
            "if the service reads keys loosely (in any case, trimmed, as numbers) and answers "
            "in its own spelling, such keys miss in batches (rows are matched to keys as sent, "
            "as a row of a key not asked for could be); send keys as the service spells them, "
            "or drop batch_url (a point answer's rows are its key's)",
            tuple(found[1]),
            found[0],
        )

    async def _chunk(
        self, client: HttpClient, chunk: Sequence[Key], items: Mapping[Key, str], several: bool
    ) -> tuple[list[Row], list[Row] | None]:
        """The rows of one batch request (``several``: of a call for several keys, whose
        requests may hold one key each, :func:`chunks_apart`), and for DECIMAL keys (and
        integers beyond 2**53) the same rows with every JSON number read exactly (a float would
        make 0.100000000000000001 the key 0.1, and 9007199254740993.0 the key 9007199254740992)."""
        c = self.connector
        method, url, body = c.batch_request([items[k] for k in chunk])
        status, headers, data = await client.fetch(method, url, body)
        if several and status in c.miss_statuses:
            # not every key's miss: one key may cause it ("a malformed id is a miss"), or the
            # batch URL is wrong (a typo is a 404); the call's keys go again in halves, down to
            # point requests
            raise c.status_error(method, url, status, headers, data)
        if (
            body is None
            and status in _URL_REFUSED - c.miss_statuses - c.transient_statuses
            and len(url) > _LONG_URL
        ):
            raise HttpStatusError(
                f"{c.status_error(method, url, status, headers, data)} (the request's URL is "
                f"{len(url):,} bytes for {len(chunk)} keys; servers commonly refuse URLs over "
                "8 KB: lower batch_size, or use batch_mode='post_json')",
                status,
            )
        rows = c.rows(method, url, status, headers, data, c.batch_rows_field)[0]
        if not any(_inexact_as_float(v) for key in chunk for v in key) or not any(
            type(row.get(column)) is float for row in rows for column in c.key_columns
        ):
            return rows, None
        exact = json.loads(data, parse_float=Decimal)
        return rows, c.rows_of(method, url, exact, c.batch_rows_field)
