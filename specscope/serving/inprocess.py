"""The reference engine's API answered in this process, no socket: an httpx transport over its
FastAPI application (``specscope.probe`` takes one as ``transport``)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import httpx


class InProcess(httpx.BaseTransport):
    """Requests to any host, answered by ``app``. The application's lifespan is this object's
    ``start`` and ``stop`` (``in_process``), not its clients': an httpx client closes its
    transport when it is done, and the application outlives each probe."""

    def __init__(self, app: Any) -> None:
        from fastapi.testclient import TestClient

        self.client = TestClient(app)

    def start(self) -> "InProcess":
        self.client.__enter__()
        return self

    def stop(self) -> None:
        self.client.__exit__(None, None, None)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        r = self.client.request(request.method, request.url.path, content=request.read(),
                                headers=dict(request.headers))
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)


@contextlib.contextmanager
def in_process(app: Any) -> Iterator[InProcess]:
    """``app`` started, as a transport, and stopped on leaving."""
    transport = InProcess(app).start()
    try:
        yield transport
    finally:
        transport.stop()
