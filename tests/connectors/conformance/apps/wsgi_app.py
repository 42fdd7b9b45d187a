"""The spec as a small Flask app, for gunicorn (sync, gthread) and waitress.

WSGI has no 1xx and no hop-by-hop headers (PEP 3333): gunicorn drops an app's ``Connection``
header and waitress refuses it, so ``/close/`` and ``/to-close/`` are answers without a length,
which the server frames itself (gunicorn: chunked; waitress: chunked and ``Connection: close``).
The raw request target is gunicorn's ``RAW_URI`` or waitress's ``REQUEST_URI``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import spec
from flask import Flask, Response, request

app = Flask(__name__)
METHODS = ["GET", "POST", "HEAD"]


@app.route("/", defaults={"path": ""}, methods=METHODS)
@app.route("/<path:path>", methods=METHODS)
def anything(path: str) -> Response:
    environ = request.environ
    target = environ.get("RAW_URI") or environ["REQUEST_URI"]
    headers = {k.lower(): v for k, v in request.headers.items()}
    a = spec.answer(request.method, target, headers, request.get_data())
    if a.delay:
        time.sleep(a.delay)
    if a.chunks is not None or a.no_length or a.close:
        pieces = a.chunks if a.chunks is not None else [a.body]

        def stream() -> Iterator[bytes]:
            yield from pieces

        response = Response(stream(), status=a.status, headers=a.headers)
        response.headers.pop("Content-Length", None)
        return response
    response = Response(a.body, status=a.status, headers=a.headers)
    if a.length is not None:
        response.headers["Content-Length"] = str(a.length)
    return response
