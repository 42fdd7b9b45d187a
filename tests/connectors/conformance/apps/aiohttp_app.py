"""The spec on aiohttp.web: ``python aiohttp_app.py PORT [CERT KEY PORT ...]``.

aiohttp.web has no API for 1xx answers: ``/early/`` writes them on the request's transport
before the answer (raw bytes, as a proxy or a framework with hints support would).
Keep-alive timeout 1 s. With certificate arguments it serves the spec over TLS on each of
those ports instead (the TLS cases: one process, one port per certificate).
"""

from __future__ import annotations

import asyncio
import ssl
import sys

import spec
from aiohttp import web


async def handle(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    headers = {k.lower(): v for k, v in request.headers.items()}
    a = spec.answer(request.method, request.raw_path, headers, body)
    if a.delay:
        await asyncio.sleep(a.delay)
    assert request.transport is not None
    for code, fields in a.interim:
        head = f"HTTP/1.1 {code} {spec.REASONS[code]}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in fields)
        request.transport.write(head.encode("latin-1") + b"\r\n")
    if a.chunks is None and not a.no_length:
        response = web.Response(status=a.status, body=a.body or None, headers=a.headers)
        if a.length is not None:
            response.headers["Content-Length"] = str(a.length)
        if a.close:
            response.force_close()
        if a.ghost:
            asyncio.get_running_loop().call_later(0.05, request.transport.write, a.ghost)
        return response
    stream = web.StreamResponse(status=a.status, headers=a.headers)
    if a.no_length:
        stream.force_close()
    await stream.prepare(request)
    for piece in [] if request.method == "HEAD" else a.chunks or [a.body]:
        await stream.write(piece)
        await asyncio.sleep(0.001)
    await stream.write_eof()
    return stream


async def main(argv: list[str]) -> None:
    app = web.Application(client_max_size=10_000_000)
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=1.0)
    await runner.setup()
    if len(argv) == 1:
        await web.TCPSite(runner, "127.0.0.1", int(argv[0])).start()
    for i in range(0, len(argv) - 1, 3):
        cert, key, port = argv[i : i + 3]
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        await web.TCPSite(runner, "127.0.0.1", int(port), ssl_context=context).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
