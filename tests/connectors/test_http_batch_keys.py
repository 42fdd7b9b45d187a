"""HTTP batches against services that read keys loosely, answer a batch with a miss status or
write numbers as text (asyncio_lookup/connectors/http_batch_keys.py): a batch answers no key
with another key's row, loses no row a point request finds, and says when it cannot tell."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from typing import Any

import pytest
from aiohttp import web

from asyncio_lookup.connectors import HttpConnector
from asyncio_lookup.connectors.http_batch_keys import chunks_apart, loose_form, spelt_otherwise
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.options import LookupOptions


class LooseService:
    """A service of ``rows`` (by its own key text) that reads a requested key through
    ``read``, answers in its own spelling, and, with ``refuse_unknown``, answers a batch
    holding an unknown key 404 as a whole."""

    def __init__(
        self, rows: dict[str, dict[str, Any]], read: Callable[[str], str], *, refuse_unknown: bool
    ) -> None:
        self.rows, self.read, self.refuse_unknown = rows, read, refuse_unknown
        self.batches: list[list[str]] = []

    def app(self) -> web.Application:
        async def point(request: web.Request) -> web.Response:
            row = self.rows.get(self.read(request.match_info["id"]))
            return web.json_response(row) if row else web.Response(status=404)

        async def batch(request: web.Request) -> web.Response:
            asked = [str(item["id"]) for item in (await request.json())["keys"]]
            self.batches.append(asked)
            found = [self.rows.get(self.read(key)) for key in asked]
            if self.refuse_unknown and None in found:
                return web.Response(status=404, text="unknown key")
            return web.json_response([row for row in found if row])

        app = web.Application()
        app.router.add_get("/item/{id}", point)
        app.router.add_post("/batch", batch)
        return app


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[LooseService], Any]]:
    runners: list[web.AppRunner] = []

    async def start(service: LooseService) -> str:
        runner = web.AppRunner(service.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def lookups(
    base: str, keys: list[Any], batch: bool, batch_path: str = "batch"
) -> list[list[dict[str, Any]]]:
    """Each key's rows through a chain, all asked at once (one batch with ``batch``, sent to
    ``batch_path``)."""
    connector = HttpConnector(
        f"{base}/item/{{id}}",
        batch_url=f"{base}/{batch_path}" if batch else None,
        batch_field="keys",
    )
    options = LookupOptions.from_dict({"lookup.batch.max-size": "64"} if batch else {})
    chain = LookupChain.create(connector, options, prefer_async=True, key_columns=("id",))
    await chain.open()
    try:
        found = await asyncio.gather(*(chain.async_lookup((key,)) for key in keys))
    finally:
        await chain.close()
    return [list(rows) for rows in found]


async def test_keys_a_loose_service_confuses_go_in_separate_requests(
    serve: Callable[[LooseService], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """'alice' and 'ALICE' in one batch to a case-insensitive service: 'alice' got its row
    twice (one per key asked) and 'ALICE' none. Apart, 'alice' gets it once; 'ALICE', answered
    as 'alice', misses (a batch cannot tell it from a row not asked for), and a warning says
    so once."""
    service = LooseService(
        {"alice": {"id": "alice", "n": 1}, "bob": {"id": "bob", "n": 2}},
        str.casefold,
        refuse_unknown=False,
    )
    base = await serve(service)
    keys = ["alice", "ALICE", "bob", "Bob"]
    caplog.set_level(logging.WARNING, logger="asyncio_lookup")
    batched = await lookups(base, keys, batch=True)
    assert batched == [[{"id": "alice", "n": 1}], [], [{"id": "bob", "n": 2}], []]
    # (the second chunk, whose rows were no key's, asked again on a new connection)
    assert sorted(map(sorted, service.batches)) == [["ALICE", "Bob"]] * 2 + [["alice", "bob"]]
    spelling = [r.getMessage() for r in caplog.records if "spelling" in r.getMessage()]
    assert len(spelling) == 1
    assert (
        "a batch answer has a row of the key ('alice',), not asked for, and none of"
        in (spelling[0])
    )


async def test_a_batch_answered_404_is_asked_again_in_halves(
    serve: Callable[[LooseService], Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A batch answered 404 (a service refusing a batch with one unknown key, or a wrong
    batch_url) missed every key of it, silently."""
    rows = {str(n): {"id": str(n), "n": n} for n in range(1, 6)}
    service = LooseService(rows, str, refuse_unknown=True)
    base = await serve(service)
    keys = ["1", "2", "nope", "4", "5"]
    caplog.set_level(logging.WARNING, logger="asyncio_lookup")
    batched = await lookups(base, keys, batch=True)
    assert batched == await lookups(base, keys, batch=False)
    assert [len(found) for found in batched] == [1, 1, 0, 1, 1]
    assert any("refused as a whole" in r.getMessage() for r in caplog.records)
    # a batch URL that is not there: every key asked again, down to point requests
    found = await lookups(base, keys, batch=True, batch_path="batchez")
    assert [len(rows) for rows in found] == [1, 1, 0, 1, 1]


def test_a_number_written_as_text_matches_a_number_key_by_value() -> None:
    """A DECIMAL(10,2) key 100.00 answered as "100.0" missed in batches ("1.50" as "1.5"
    matched, by the accident of its normal form)."""
    c = HttpConnector("http://h/c/{id}", batch_url="http://h/batch")
    rows = [{"id": "100.0", "n": 1}, {"id": "0.0", "n": 2}, {"id": "1.5", "n": 3}]
    keys = [(Decimal("100.00"),), (Decimal("0.00"),), (Decimal("1.50"),), (Decimal("2.25"),)]
    assert [[r["n"] for r in found] for found in c.group(keys, rows)] == [[1], [2], [3], []]
    # text keys stay matched by text: "100.0" is not the key "100"
    assert c.group([("100",)], [{"id": "100.0"}]) == [[]]
    # text that is no plain number is left alone (no huge exponent is expanded)
    assert c.group([(1,)], [{"id": "1e999999"}, {"id": " 1"}, {"id": "0x1"}]) == [[]]


def test_chunks_keep_keys_of_one_loose_form_apart_and_plain_keys_in_order() -> None:
    plain = [(n,) for n in range(7)]
    assert chunks_apart(plain, 3) == [plain[0:3], plain[3:6], plain[6:]]
    keys = [("a",), ("A",), ("b",), (" a",), ("01",), ("1",), ("1.0",)]
    chunks = chunks_apart(keys, 64)
    assert chunks == [[("a",), ("b",), ("01",)], [("A",), ("1",)], [(" a",), ("1.0",)]]
    for chunk in chunks:
        assert len({loose_form(key) for key in chunk}) == len(chunk)
    assert loose_form(("  Straße ",)) == ("strasse",)
    assert loose_form((Decimal("2.50"), 2.0, "002")) == ("2.5", "2", "2")
    assert loose_form(("9" * 5000,)) == ("9" * 5000,)  # no number of 5,000 digits is built


def test_a_row_spelt_otherwise_is_found_only_when_no_key_took_it() -> None:
    keys = [("ALICE",), ("bob",)]
    assert spelt_otherwise(["id"], keys, [[], [{"id": "bob"}]], [{"id": "bob"}]) is None
    found = spelt_otherwise(["id"], keys, [[], [{"id": "bob"}]], [{"id": "bob"}, {"id": "alice"}])
    assert found == (("ALICE",), ["alice"])
    assert spelt_otherwise(["id"], keys, [[{"id": "x"}], [{"id": "bob"}]], []) is None
    assert json.dumps(found)  # plain values: loggable as they are


async def test_a_one_key_request_of_a_several_key_call_answered_404_is_asked_again(
    serve: Callable[[LooseService], Any],
) -> None:
    """Keys of one loose form go in requests of one key each; such a request answered 404
    (here a wrong batch_url) was taken as that key's miss, though the call held several
    keys: 'alice' and 'Alice' lost their rows, silently."""
    rows = {"alice": {"id": "alice", "n": 1}, "x": {"id": "x", "n": 2}}
    base = await serve(LooseService(rows, str.casefold, refuse_unknown=False))
    found = await lookups(base, ["x", "alice", "Alice"], batch=True, batch_path="batchez")
    assert [[r["n"] for r in rows] for rows in found] == [[2], [1], [1]]


async def test_keys_a_number_reader_confuses_go_in_separate_requests(
    serve: Callable[[LooseService], Any],
) -> None:
    """A service reading ids with Python's int() answered '1' and '+1' (or '1000' and
    '1_000') in one batch as '1': the key '1' got two rows and '+1' none."""
    rows = {str(n): {"id": str(n), "n": n} for n in (1, 1000)}
    base = await serve(LooseService(rows, lambda key: str(int(key)), refuse_unknown=False))
    keys = ["1", "+1", "1000", "1_000"]
    batched = await lookups(base, keys, batch=True)
    assert [[r["n"] for r in found] for found in batched] == [[1], [], [1000], []]
    for a, b in [("1", "+1"), ("1000", "1_000"), (".5", "0.5"), ("1.", "1"), ("i", "\u0131")]:
        assert loose_form((a,)) == loose_form((b,)), (a, b)
    assert loose_form(("\uff17",)) == loose_form(("7",))  # a full-width 7


def test_a_text_column_of_a_composite_key_matches_text_alone() -> None:
    """In a key of a text and a number column, the text column was read as a number too:
    the row ('007', 1), of a key not asked for, was given to the key ('7', 1)."""
    c = HttpConnector("http://h/c/{sku}/{region}", batch_url="http://h/batch")
    rows = [{"sku": spelt, "region": 1, "n": i} for i, spelt in enumerate(["007", "7.0", "7e0"])]
    rows.append({"sku": "7", "region": "1.0", "n": 9})  # the number column read by value
    assert c.group([("7", 1)], rows) == [[rows[3]]]
    assert c.group([("0", 0)], [{"sku": "00", "region": 0}]) == [[]]


def test_answer_numbers_are_json_numbers() -> None:
    """An answer's number text is read as JSON reads a number: '01', '+1', an Arabic-Indic or
    full-width 1 are not the key 1."""
    c = HttpConnector("http://h/c/{id}", batch_url="http://h/batch")
    spellings = ["01", "+1", "001.000", "\u0661", "\uff11", "1.", ".5"]
    answer = [{"id": spelt} for spelt in spellings] + [{"id": "1.0"}, {"id": "1e0"}]
    assert c.group([(1,)], answer) == [[{"id": "1.0"}, {"id": "1e0"}]]


async def test_the_other_requests_of_a_failed_call_are_cancelled() -> None:
    """A call sent as several requests (keys of one loose form) failed on the first refused
    one, and the others went on reading their answers after the chain closed."""
    release = asyncio.Event()
    started: list[str] = []

    async def batch(request: web.Request) -> web.Response:
        asked = [str(item["id"]) for item in (await request.json())["keys"]]
        started.append(asked[0])
        if "b" in asked:
            return web.Response(status=500)
        await release.wait()
        return web.json_response([])

    app = web.Application()
    app.router.add_post("/batch", batch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        connector = HttpConnector(f"{base}/item/{{id}}", batch_url=f"{base}/batch")
        function = connector.async_lookup_function()
        await function.open()
        try:
            with pytest.raises(Exception, match="500"):
                await function.async_lookup_batch([("a",), ("A",), ("b",)])
            pending = [t for t in asyncio.all_tasks() if "_chunk" in repr(t.get_coro())]
            assert pending == []
        finally:
            release.set()
            await function.close()
    finally:
        await runner.cleanup()
