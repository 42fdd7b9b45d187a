// The spec (spec.py) on Node's http module: `node node_app.js PORT`.
// 1xx answers with the module's own API: writeContinue, writeProcessing, writeEarlyHints.
// keepAliveTimeout 1 s (Node announces it: `Keep-Alive: timeout=1`).
"use strict";
const http = require("http");
const zlib = require("zlib");

const SERVER = process.env.CONFORMANCE_SERVER || "node";
const NEVER = 3000;
const BIG = 5000000;
const LINK = "</style.css>; rel=preload; as=style";

function item(key, req, extra) {
  return Object.assign({ id: key, server: SERVER, injected: "x-injected" in req.headers }, extra);
}

function send(res, status, body, headers, options) {
  options = options || {};
  const data = typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const head = Object.assign({}, headers || {});
  if (body !== null && !Buffer.isBuffer(body)) head["Content-Type"] = "application/json";
  if (options.close) head["Connection"] = "close";
  if (!options.noLength && body !== null) head["Content-Length"] = Buffer.byteLength(data);
  if (options.noLength) {
    res.useChunkedEncodingByDefault = false;
    res.shouldKeepAlive = false;
    head["Connection"] = "close";
  }
  res.writeHead(status, head);
  res.end(body === null || options.head ? undefined : data);
}

function handle(req, res, body) {
  const [pathPart, query] = req.url.split("?", 2);
  const rest = pathPart.replace(/^\//, "");
  const slash = rest.indexOf("/");
  let route = slash < 0 ? rest : rest.slice(0, slash);
  const rawKey = slash < 0 ? "" : rest.slice(slash + 1);
  let key;
  try {
    key = decodeURIComponent(rawKey);
  } catch (e) {
    return send(res, 400, { error: "bad key" });
  }
  if (route === "query") {
    key = new URLSearchParams(query || "").get("key") || "";
    route = "item";
  }
  if (route === "item") {
    if (key.startsWith("miss")) return send(res, 404, { error: "no such key" });
    return send(res, 200, item(key, req), {}, { head: req.method === "HEAD" });
  }
  if (route === "status") {
    const code = parseInt(rawKey, 10);
    if (code === 204 || code === 304) return send(res, code, null);
    const headers = code >= 300 && code < 400 ? { Location: "/item/redirected" } : {};
    return send(res, code, { status: code }, headers);
  }
  if (route === "echo" && req.method === "POST") {
    return send(res, 200, item(key, req, { method: "POST", body: JSON.parse(body || "null") }));
  }
  if (route === "early") {
    res.writeContinue();
    res.writeProcessing();
    res.writeEarlyHints({ link: LINK });
    const sent = body.length ? JSON.parse(body) : null;
    return send(res, 200, item(key, req, { method: req.method, body: sent }));
  }
  const data = Buffer.from(JSON.stringify(item(key, req)));
  if (route === "negotiate") {
    // zstd where this Node has it (22.15+), else gzip, else none; X-Coding names the choice
    const asked = (req.headers["accept-encoding"] || "").split(",").map((p) => p.split(";")[0].trim());
    const vary = { Vary: "Accept-Encoding" };
    if (asked.includes("zstd") && zlib.zstdCompressSync) {
      const headers = Object.assign({ "Content-Encoding": "zstd", "X-Coding": "zstd" }, vary);
      return send(res, 200, zlib.zstdCompressSync(data), headers);
    }
    if (asked.includes("gzip")) {
      const headers = Object.assign({ "Content-Encoding": "gzip", "X-Coding": "gzip" }, vary);
      return send(res, 200, zlib.gzipSync(data), headers);
    }
    return send(res, 200, data, Object.assign({ "X-Coding": "identity" }, vary));
  }
  if (route === "gzip") return send(res, 200, zlib.gzipSync(data), { "Content-Encoding": "gzip" });
  if (route === "deflate") return send(res, 200, zlib.deflateSync(data), { "Content-Encoding": "deflate" });
  if (route === "raw-deflate") {
    return send(res, 200, zlib.deflateRawSync(data), { "Content-Encoding": "deflate" });
  }
  if (route === "unknown-coding") {
    return send(res, 200, Buffer.from("\x00\x01 not decodable"), { "Content-Encoding": "x-unknown" });
  }
  if (route === "chunked") {
    res.writeHead(200);
    const third = Math.floor(data.length / 3);
    res.write(data.subarray(0, third));
    setTimeout(() => {
      res.write(data.subarray(third, 2 * third));
      res.end(data.subarray(2 * third));
    }, 1);
    return;
  }
  if (route === "to-close") return send(res, 200, data, {}, { noLength: true });
  const size = parseInt(new URLSearchParams(query || "").get("bytes") || String(BIG), 10);
  if (route === "big") return send(res, 200, item(key, req, { blob: "x".repeat(size) }));
  if (route === "big-chunked") {
    const big = Buffer.from(JSON.stringify(item(key, req, { blob: "x".repeat(size) })));
    res.writeHead(200);
    for (let i = 0; i < big.length; i += 1000000) res.write(big.subarray(i, i + 1000000));
    return res.end();
  }
  if (route === "gzip-bomb") {
    const big = Buffer.from(JSON.stringify(item(key, req, { blob: "x".repeat(size) })));
    return send(res, 200, zlib.gzipSync(big), { "Content-Encoding": "gzip" });
  }
  if (route === "trailers") {
    res.writeHead(200, { Trailer: "X-Checksum" });
    res.write(data.subarray(0, 10));
    res.addTrailers({ "X-Checksum": "c0ffee" });
    return res.end(data.subarray(10));
  }
  if (route === "long-header") return send(res, 200, item(key, req), { "X-Long": "l".repeat(7000) });
  if (route === "many-headers") {
    const many = {};
    for (let i = 0; i < 80; i++) many[`X-Many-${i}`] = String(i);
    return send(res, 200, item(key, req), many);
  }
  if (route === "huge-header") return send(res, 200, item(key, req), { "X-Huge": "h".repeat(1000000) });
  if (route === "close") return send(res, 200, item(key, req), {}, { close: true });
  if (route === "ghost") {
    const ghost = JSON.stringify(item("ghost", req));
    const socket = req.socket;
    setTimeout(() => {
      if (!socket.destroyed) {
        socket.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${ghost.length}\r\n\r\n${ghost}`);
      }
    }, 50);
    return send(res, 200, item(key, req));
  }
  if (route === "never") {
    setTimeout(() => send(res, 200, item(key, req)), NEVER);
    return;
  }
  return send(res, 404, { error: `no route ${pathPart}` });
}

function listener(req, res) {
  const parts = [];
  req.on("data", (c) => parts.push(c));
  req.on("end", () => handle(req, res, Buffer.concat(parts).toString("utf8")));
}

// `node node_app.js PORT [CERT KEY]`: with a certificate and key, Node's https module
const tls = process.argv.length >= 5;
const server = tls
  ? require("https").createServer(
      { cert: require("fs").readFileSync(process.argv[3]), key: require("fs").readFileSync(process.argv[4]) },
      listener
    )
  : http.createServer(listener);
server.keepAliveTimeout = 1000;
server.headersTimeout = 5000;
server.maxHeadersCount = 0;
server.listen(parseInt(process.argv[2], 10), "127.0.0.1");
process.on("SIGTERM", () => process.exit(0));
