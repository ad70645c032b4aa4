"""A server that answers badly on purpose: trickles, endless bodies, SSE that never ends, lying usage.

`FaultServer(fault)` listens on 127.0.0.1 (a free port) in a thread until closed; every path
answers with the chosen fault, except the ones the fault leaves alone (`/v1/models` answers
normally unless the fault is about it). Each fault is a behaviour a real broken server or proxy
shows, not a scenario of one test:

- `trickle_models`: `/v1/models` headers, then its body one byte every 0.2 s, forever
- `trickle_headers`: the status line and then one header byte every 0.2 s, never the blank line
- `endless_error`: every POST answers 500 with a body that never ends (fast)
- `endless_json`: `/v1/models` and `/server_info` answer 200 with a JSON body that never ends (fast)
- `sse_comments`: POSTs answer 200 text/event-stream, one content event, then `: ping` comments forever
- `sse_blank`: the same with bare newlines forever after the content event
- `sse_endless_event`: one `data:` line that grows forever without its blank line
- `sse_flood`: valid content events forever (a server that never stops generating)
- `usage_lie`: 4 content events, then usage claiming 9,999,999 completion tokens
- `usage_zero`: 4 content events, then usage claiming 0 completion tokens
- `redirect`: every POST answers 307 to `redirect_to` (set it to a ProxyTrap's URL)
- `ok`: a well-behaved tiny server (4 content events and true usage), for proxy tests

`hits` counts the requests the server saw; `closed` is set once close() ran.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = (
    "trickle_models",
    "trickle_headers",
    "endless_error",
    "endless_json",
    "sse_comments",
    "sse_blank",
    "sse_endless_event",
    "sse_flood",
    "usage_lie",
    "usage_zero",
    "redirect",
    "ok",
)
TICK_S = 0.2
MODELS = {"object": "list", "data": [{"id": "fault-model", "object": "model"}]}


class FaultServer:
    """A bad server on 127.0.0.1 until `close()` (or the `with` block ends)."""

    def __init__(self, fault: str) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")
        self.fault = fault
        self.hits = 0
        self.redirect_to = "http://127.0.0.1:9"
        self.closed = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(_Handler):
            server_ref = outer

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="fault-server")
        self._thread.start()

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.closed.set()
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_ref: FaultServer
    protocol_version = "HTTP/1.0"  # bodies end when the connection does: no length to trust

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return None

    # -- helpers ---------------------------------------------------------------------------------

    def _count(self) -> None:
        with self.server_ref.lock:
            self.server_ref.hits += 1

    def _alive(self) -> bool:
        return not self.server_ref.closed.is_set()

    def _send(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        return self._alive()

    def _head(self, status: int, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.end_headers()

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self._send(data)

    def _forever(self, piece: bytes, pause_s: float) -> None:
        while self._send(piece):
            if pause_s:
                time.sleep(pause_s)

    # -- routes ----------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._count()
        fault = self.server_ref.fault
        if fault == "trickle_headers":
            self._trickle_headers()
        elif fault == "trickle_models" and self.path.startswith("/v1/models"):
            self._head(200, "application/json")
            self._forever(b" ", TICK_S)
        elif fault == "endless_json":
            self._head(200, "application/json")
            self._send(b'{"data": [{"id": "')
            self._forever(b"x" * 65536, 0.0)
        elif self.path.startswith("/v1/models"):
            self._json(MODELS)
        elif self.path.startswith(("/health", "/ready")):
            self._json({})
        else:
            self._json({"max_total_num_tokens": 1000})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self._count()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        fault = self.server_ref.fault
        if fault == "trickle_headers":
            self._trickle_headers()
        elif fault == "redirect":
            self.send_response(307)
            self.send_header("Location", self.server_ref.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif fault == "endless_error":
            self._head(500, "text/plain")
            self._forever(b"error " * 10000, 0.0)
        elif self.path.startswith("/flush_cache"):
            self._json({})
        elif fault == "sse_comments":
            self._head(200, "text/event-stream")
            self._send(_event(_chunk("tok ")))
            self._forever(b": ping\n\n", TICK_S / 4)
        elif fault == "sse_blank":
            self._head(200, "text/event-stream")
            self._send(_event(_chunk("tok ")))
            self._forever(b"\n", TICK_S / 4)
        elif fault == "sse_endless_event":
            self._head(200, "text/event-stream")
            self._send(b"data: ")
            self._forever(b"x" * 65536, 0.0)
        elif fault == "sse_flood":
            self._head(200, "text/event-stream")
            self._forever(_event(_chunk("tok ")), 0.0)
        elif self.path.startswith("/v1/chat/completions") and not body.get("stream"):
            self._json(_chat_answer())
        else:
            told = {"usage_lie": 9_999_999, "usage_zero": 0}.get(fault, 4)
            self._head(200, "text/event-stream")
            for _ in range(4):
                self._send(_event(_chunk("tok ")))
            self._send(_event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": told}}))
            self._send(b"data: [DONE]\n\n")

    def _trickle_headers(self) -> None:
        if not self._send(b"HTTP/1.1 200 OK\r\nX-Slow: "):
            return
        self._forever(b"a", TICK_S)


def _chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text, "delta": {"content": text}}]}


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chat_answer() -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }


class ProxyTrap:
    """A listening socket posing as an HTTP proxy: it records every connection and answers 502.

    Set `http_proxy`/`HTTPS_PROXY`/`ALL_PROXY` to `url`; a client that honours them connects here
    (and would hand a real proxy the request, its Authorization header among it)."""

    def __init__(self) -> None:
        self.connections = 0
        self.seen = b""
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="proxy-trap")
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(1.0)
                try:
                    self.seen += conn.recv(65536)
                    conn.sendall(
                        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._sock.close()

    def __enter__(self) -> ProxyTrap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
