"""A local OpenAI-compatible stub server for tests (127.0.0.1 only): a JSON handler base and fixture helpers."""

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JSONHandler(BaseHTTPRequestHandler):
    """Subclasses implement ``do_POST`` and answer with ``_send(status, payload)`` or ``_send_bytes``."""

    def _send(self, status: int, payload: dict) -> None:
        self._send_bytes(status, json.dumps(payload).encode())

    def _send_bytes(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        """``data`` as the body, with ``headers`` (Content-Type JSON and Content-Length unless given)."""
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields the ``/v1`` base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def answering(answer: Callable[[JSONHandler, dict], None]) -> Iterator[tuple[str, list]]:
    """Serve ``answer(handler, body)`` for every POST (``body`` the request's JSON); yields the ``/v1`` base URL and
    the list of ``(path, headers, body)`` of the requests received, in order."""
    received: list = []

    class Handler(JSONHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            received.append((self.path, dict(self.headers), body))
            answer(self, body)

        def do_GET(self):  # noqa: N802  (a 303 turns the POST into a GET)
            received.append((self.path, dict(self.headers), None))
            answer(self, {})

    with serving(Handler) as url:
        yield url, received
