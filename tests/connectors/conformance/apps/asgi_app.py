"""The spec as a bare ASGI app, for uvicorn (h11, httptools) and hypercorn.

ASGI has no way to send a 1xx on HTTP/1.1 (hypercorn's ``http.response.early_hint`` is for
HTTP/2 and 3 only), and ``/to-close/`` is an answer without a length: the server frames it
(chunked).
"""

from __future__ import annotations

import asyncio
from typing import Any

import spec


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    target = scope["raw_path"].decode("latin-1")
    if scope["query_string"]:
        target += "?" + scope["query_string"].decode("latin-1")
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    a = spec.answer(scope["method"], target, headers, body)
    if a.delay:
        await asyncio.sleep(a.delay)
    out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in a.headers]
    if a.length is not None:
        out.append((b"content-length", str(a.length).encode()))
    elif a.chunks is None and not a.no_length and a.status not in (204, 304):
        out.append((b"content-length", str(len(a.body)).encode()))
    if a.close or a.no_length:
        out.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": a.status, "headers": out})
    head = scope["method"] == "HEAD"
    for piece in () if head else a.chunks or ():
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        await asyncio.sleep(0.001)
    await send({"type": "http.response.body", "body": b"" if head else a.body})
