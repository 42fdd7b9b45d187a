"""The HTTP connector's clients against third-party servers (issue 21's conformance suite).

Every case runs with the project's client (``client="asyncio"``) and aiohttp
(``client="aiohttp"``, the reference), at two levels: ``HttpConnector(...)``'s point lookups
and the client's ``fetch(method, url, body)``. The property above all: a lookup returns its own
key's row (every answer echoes the key it was asked for, and the server's name) or raises a
clear error; none hangs (10 s per lookup, pytest-timeout 30 s per test).

The servers (``servers.SERVERS``) run as subprocesses on free 127.0.0.1 ports, all started
at once for the package and stopped by process group; their endpoints are one spec
(``apps/spec.py``, and ``apps/node_app.js`` after it):

==================  ==================================================  ======================
server              app                                                 idle close after
==================  ==================================================  ======================
uvicorn-h11         ``asgi_app.py``, ``--http h11``                      1 s
uvicorn-httptools   ``asgi_app.py``, ``--http httptools``                1 s
hypercorn           ``asgi_app.py``                                     1 s
gunicorn-sync       ``wsgi_app.py`` (Flask), 3 sync workers             every answer
gunicorn-gthread    ``wsgi_app.py`` (Flask), 16 threads                 1 s
waitress            ``wsgi_app.py`` (Flask)                             1 s (checked each 1 s)
aiohttp             ``aiohttp_app.py`` (aiohttp.web)                    1 s
stdlib-1.0          ``stdlib_app.py``: ``http.server``, HTTP/1.0         every answer
stdlib-1.1          ``stdlib_app.py``: ``http.server``, HTTP/1.1         1 s
node                ``node_app.js``: Node's ``http`` (where ``node`` is  ~2 s (announces
                    on PATH; with ``CI=true`` it must be)               ``timeout=1``)
==================  ==================================================  ======================

Which server covers which case:

- **Every server:** own rows and misses; awkward keys in the path and the query (space, ``/``,
  ``?``, ``#``, ``%``, ``+``, ``&``, unicode, ``..``, ``.``, ...); status classes through the
  connector and through ``fetch`` (2xx incl. 204, 3xx not followed, 304, 4xx, 5xx); HEAD, also
  where the GET would be chunked, unframed or gzip-coded; POST with a JSON body; gzip and
  deflate (zlib and raw) sent unasked, zstd or gzip negotiated by ``Accept-Encoding``, an
  unknown coding a clear error; chunked (with a trailer field on ``http.server`` HTTP/1.1 and
  Node); an answer without a length; ``Connection: close``; 5 MB bodies (with a length, chunked
  without one, a gzip bomb); ``max_body_size`` and a 1 MB header refused clearly, the next
  answer on the client its own; a 7,000-byte header and 80 headers; a server that never
  answers (0.5 s timeout); 500 lookups in flight; URLs with a space or unicode encoded, control
  characters refused before sending.
- **1xx interim answers** (100, 102 and 103 before every answer; GET and POST): Node
  (``writeContinue``, ``writeProcessing``, ``writeEarlyHints``), ``http.server`` HTTP/1.1
  (``send_response_only``), aiohttp.web (raw writes on ``request.transport``: it has no API).
  Not uvicorn (ASGI has no 1xx on HTTP/1.1), hypercorn (its ``http.response.early_hint`` is
  for HTTP/2 and 3 only), gunicorn and waitress (WSGI has no 1xx), nor ``http.server``
  HTTP/1.0.
- **Read to the close** (no length, the connection closed after the body): ``http.server``
  (both) and Node. uvicorn, hypercorn, aiohttp.web, gunicorn and waitress frame an answer
  without a length as chunked (uvicorn, hypercorn, aiohttp and waitress then close).
- **Connection: close per answer:** uvicorn, hypercorn, aiohttp.web, ``http.server``, Node;
  gunicorn sync closes every answer, waitress closes an answer without a length; gunicorn
  gthread drops an app's ``Connection`` header (hop-by-hop), so its case is a chunked answer.
- **An answer nobody asked for** (a broken server writes a second answer onto the idle
  connection): ``http.server`` HTTP/1.1, aiohttp.web, Node.
- **Keep-alive across the server's idle close** (idle 0.5 s past it): every server with one
  in the table above (not gunicorn sync and ``http.server`` HTTP/1.0, which close every answer).
- **Restart mid-run** (stopped and started on the same port while 40 workers look up):
  uvicorn-h11 and Node.
- **TLS** (trustme: good certificate by name and by IP, wrong host, expired, self-signed, a CA
  named by ``SSL_CERT_FILE`` after start): aiohttp.web in one process, one port per
  certificate. **Framings over TLS** (an item, 1xx first, read to the close, chunked,
  ``Connection: close``, gzip, 5 MB): aiohttp.web, uvicorn-h11, ``http.server`` HTTP/1.0 and
  HTTP/1.1, Node's ``https``. **Forward proxies:** proxy.py (HTTP
  in absolute form, HTTPS through CONNECT, ``NO_PROXY``, a 407 without credentials, the
  credentials in the proxy URL), in front of aiohttp.web.

The cases that wait (never-answering, idle close) run on every server and both clients at
once in a module fixture; each (server, client) test reports its own outcome. The cases where
the loop's transports matter (1xx, the framings in plain text and over TLS, restart) run on
uvloop too (``test_on_uvloop.py``: what Spark's Python workers run).

Cases aiohttp fails are strict xfails naming its behaviour (non-strict where it depends on
timing); the project's client has none.
"""
