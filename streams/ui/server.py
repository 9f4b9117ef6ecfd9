"""The page's HTTP server: the standard library's ``ThreadingHTTPServer``, a handful of routes.

``/``                       the page (``static/index.html``; ``/static/app.js``, ``/static/app.css``)
``/api/state``              what the page shows (:meth:`UIState.view`), polled every second
``/api/lineage/{cohort}``   the cohort's lineage picture as SVG in JSON (:class:`Drawings`)
``/checkpoints/{id}``       the worker's ``/checkpoints/{id}`` answer, from this fold
``/health``                 ``{"ok": true, ...}``

The standard library keeps the page free of the worker's event loop: it runs beside a demo, a
worker or on its own (``traintrace ui``), each request on its own thread.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit

from streams.core.state import Config
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.ui.drawing import Drawings
from streams.ui.errors import PortInUse
from streams.ui.follower import TopicFollower, join_followers, start_followers
from streams.ui.state import UIState

DEFAULT_PORT = 6070
PORT_ENV = "TRAINTRACE_UI_PORT"

#: the files of ``static/`` served, with their content types (nothing else is)
_STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
           "app.css": "text/css; charset=utf-8"}


def static_file(name: str) -> bytes:
    """A file of the page shipped in ``streams/ui/static``."""
    return resources.files("streams.ui").joinpath("static", name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        path = unquote(urlsplit(self.path).path)
        ui = self.server.ui
        if path in ("/", "/index.html"):
            self._send(static_file("index.html"), _STATIC["index.html"])
        elif path.startswith("/static/") and path[len("/static/"):] in _STATIC:
            name = path[len("/static/"):]
            self._send(static_file(name), _STATIC[name])
        elif path == "/api/state":
            self._json(ui.state.view())
        elif path.startswith("/api/lineage/"):
            self._json(ui.drawings.get(path[len("/api/lineage/"):]))
        elif path.startswith("/checkpoints/") and len(path) > len("/checkpoints/"):
            self._json(ui.state.checkpoint(path[len("/checkpoints/"):]))
        elif path == "/health":
            self._json({"ok": True, "version": ui.state.version, "topics": ui.topics.all()})
        else:
            self._json({"error": f"no such page: {path}"}, HTTPStatus.NOT_FOUND)

    def _json(self, obj: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(json.dumps(obj, sort_keys=True, default=str).encode("utf-8"), "application/json", status)

    def _send(self, body: bytes, ctype: str, status: HTTPStatus = HTTPStatus.OK) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: the page polls
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    ui: "UIServer"


class UIServer:
    """The followers, the drawings and the HTTP server of one page."""

    def __init__(self, kafka: KafkaSettings | str, topics: TopicNames, port: int = DEFAULT_PORT,
                 host: str = "127.0.0.1", config: Config | None = None,
                 trusted: Mapping[str, Any] | None = None) -> None:
        self.kafka = KafkaSettings.of(kafka)
        self.topics = topics
        self.state = UIState(config, trusted=trusted)
        self._stop = threading.Event()
        try:
            self.httpd = _Server((host, port), _Handler)
        except OSError as exc:
            raise PortInUse(f"cannot serve the page on {host}:{port}: {exc.strerror or exc} "
                            f"(choose another port with --port or {PORT_ENV})") from exc
        self.httpd.ui = self
        self.drawings = Drawings(self.state, source=f"kafka://{self.kafka.bootstrap}")
        self.followers: list[TopicFollower] = []
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> "UIServer":
        self.followers = start_followers(self.kafka, self.topics, self.state, self._stop)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="traintrace-ui-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.drawings.stop()
        if self._thread is not None:  # shutdown() waits for serve_forever: only once it runs
            self.httpd.shutdown()
            self._thread = None
        self.httpd.server_close()
        join_followers(self.followers)


def start_ui(kafka: KafkaSettings | str, topics: TopicNames, port: int = DEFAULT_PORT, host: str = "127.0.0.1",
             config: Config | None = None, trusted: Mapping[str, Any] | None = None) -> UIServer:
    """A started page (stop it with :meth:`UIServer.stop`); raises :class:`PortInUse`. With
    ``trusted`` (a keyring) the control records are verified (:class:`UIState`)."""
    return UIServer(kafka, topics, port, host, config, trusted).start()
