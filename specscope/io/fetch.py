"""HTTP for specscope's clients outside an engine's process, on httpx, in one place: a page, a
JSON document, a JSON post, a health check and the served model's name.

Every failure (refused, timed out, a status of 400 or more, a page over its cap) raises
:class:`FetchError`, an ``OSError``, so a caller catches one kind whatever went wrong; a status
error says the status and the first of the server's own words. Redirects are followed; https
is verified against the system's trust store (as urllib did), or a context the caller gives.
Each request goes on a connection of its own (a kept-alive connection the server closes just as
a request goes out would read as the server failing; engines close idle ones after ~5 s, a
scrape's interval). The hooks and the OTLP sink never come here: inside an engine's process
they stay on the stdlib. The probe and the serving clients keep their own ``httpx`` clients
(a transport seam, streaming).
"""

from __future__ import annotations

import functools
import json
import ssl
from typing import Any


class FetchError(OSError):
    """An HTTP request that gave no usable answer: ``url`` and ``why`` (the message is both)."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"{url}: {why}")
        self.url, self.why = url, why


def _fail(url: str, exc: BaseException) -> FetchError:
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        r = exc.response
        try:
            words = " ".join(r.text.split())[:300]
        except Exception:  # noqa: BLE001 - a body that cannot be read says nothing more
            words = ""
        return FetchError(url, f"HTTP {r.status_code} {r.reason_phrase}"
                          + (f": {words}" if words else ""))
    return FetchError(url, f"{type(exc).__name__}: {exc}")


@functools.lru_cache(maxsize=1)
def _system_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def _verify(url: str, verify: ssl.SSLContext | bool) -> ssl.SSLContext | bool:
    # plain http needs no TLS context (making one loads a CA bundle: ~19 ms a call)
    if not url.lower().startswith("https:"):
        return False
    return _system_context() if verify is True else verify


def client(*, verify: ssl.SSLContext | bool = True, timeout_s: float = 10.0) -> Any:
    """An ``httpx.Client`` for repeated fetches (thread-safe; the caller closes it): redirects
    followed, no connection kept alive between requests, https verified by ``verify`` (True:
    the system's trust store)."""
    import httpx

    return httpx.Client(verify=_system_context() if verify is True else verify,
                        timeout=timeout_s, follow_redirects=True,
                        limits=httpx.Limits(max_keepalive_connections=0))


def get_text(url: str, *, timeout_s: float = 10.0, max_bytes: int | None = None,
             headers: dict[str, str] | None = None, verify: ssl.SSLContext | bool = True,
             client: Any = None) -> str:
    """The page at ``url`` as text (UTF-8, undecodable bytes replaced); ``max_bytes`` caps what
    is read (a longer page is an error, never silently cut). ``client``: an ``httpx.Client`` to
    reuse (a poller's, made once with :func:`client`); else one is made for this call."""
    own = client is None
    http = _client_for(url, verify, timeout_s) if own else client
    import httpx

    try:
        with http.stream("GET", url, headers=headers or {}, timeout=timeout_s) as resp:
            if resp.is_error:  # its words, for the error (an error page is short)
                resp.read()
            resp.raise_for_status()
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if max_bytes is not None and len(body) > max_bytes:
                    raise FetchError(url, f"page larger than the cap of {max_bytes} bytes")
    except httpx.HTTPError as exc:
        raise _fail(url, exc) from None
    finally:
        if own:
            http.close()
    return body.decode("utf-8", errors="replace")


def _client_for(url: str, verify: ssl.SSLContext | bool, timeout_s: float) -> Any:
    import httpx

    return httpx.Client(verify=_verify(url, verify), timeout=timeout_s, follow_redirects=True)


def get_json(url: str, *, timeout_s: float = 10.0) -> Any:
    """The JSON document at ``url``."""
    text = get_text(url, timeout_s=timeout_s)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FetchError(url, f"not JSON ({exc})") from None


def post_json(url: str, body: dict[str, Any], *, timeout_s: float = 600.0) -> Any:
    """POST ``body`` as JSON to ``url``; the answer's JSON (an error keeps the server's words)."""
    import httpx

    try:
        with _client_for(url, True, timeout_s) as http:
            resp = http.post(url, json=body)
            resp.raise_for_status()
            return resp.json()
    except httpx.HTTPError as exc:
        raise _fail(url, exc) from None
    except ValueError as exc:
        raise FetchError(url, f"not JSON ({exc})") from None


def healthy(url: str, *, timeout_s: float = 2.0) -> bool:
    """Whether ``url`` answers 200 within ``timeout_s`` (refused or slow is False)."""
    import httpx

    try:
        with _client_for(url, True, timeout_s) as http:
            return http.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def served_model(base_url: str, *, timeout_s: float = 10.0) -> str:
    """The first model an OpenAI-compatible server lists on ``/v1/models``; a FetchError where
    it lists none."""
    url = base_url.rstrip("/") + "/v1/models"
    data = get_json(url, timeout_s=timeout_s)
    listed = data.get("data") if isinstance(data, dict) else None
    first = listed[0] if isinstance(listed, list) and listed else None
    if not isinstance(first, dict) or not first.get("id"):
        raise FetchError(url, "lists no model")
    return str(first["id"])
