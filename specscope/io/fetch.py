"""HTTP for specscope's clients outside an engine's process, on httpx, in one place: a page, a
JSON document, a JSON post, a health check and the served model's name.

Every failure (refused, timed out, a status of 400 or more, a page over its cap) raises
:class:`FetchError`, an ``OSError``, so a caller catches one kind whatever went wrong. The
hooks and the OTLP sink never come here: inside an engine's process they stay on the stdlib.
The probe keeps its own ``httpx.Client`` (it needs a transport seam and a pool per run).
"""

from __future__ import annotations

import json
import ssl
from typing import Any


class FetchError(OSError):
    """An HTTP request that gave no usable answer; the message names the URL."""


def _fail(url: str, exc: BaseException) -> FetchError:
    return FetchError(f"{url}: {type(exc).__name__}: {exc}")


def _verify(url: str, verify: ssl.SSLContext | bool) -> ssl.SSLContext | bool:
    # plain http needs no TLS context (making the default one loads the CA bundle: ~19 ms)
    return verify if url.lower().startswith("https:") else False


def get_text(url: str, *, timeout_s: float = 10.0, max_bytes: int | None = None,
             headers: dict[str, str] | None = None, verify: ssl.SSLContext | bool = True,
             client: Any = None) -> str:
    """The page at ``url`` as text (UTF-8, undecodable bytes replaced); ``max_bytes`` caps what
    is read (a longer page is an error, never silently cut). ``client``: an ``httpx.Client`` to
    reuse (a poller's, made once with :func:`client`); else one is made for this call."""
    import httpx

    own = client is None
    http = client if client is not None else httpx.Client(verify=_verify(url, verify),
                                                           timeout=timeout_s)
    try:
        with http.stream("GET", url, headers=headers or {}, timeout=timeout_s) as resp:
            resp.raise_for_status()
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if max_bytes is not None and len(body) > max_bytes:
                    raise FetchError(f"{url}: page larger than the cap of {max_bytes} bytes "
                                     "(--max-bytes)")
    except httpx.HTTPError as exc:
        raise _fail(url, exc) from None
    finally:
        if own:
            http.close()
    return body.decode("utf-8", errors="replace")


def client(*, verify: ssl.SSLContext | bool = True, timeout_s: float = 10.0) -> Any:
    """An ``httpx.Client`` for repeated fetches (thread-safe; the caller closes it)."""
    import httpx

    return httpx.Client(verify=verify, timeout=timeout_s)


def get_json(url: str, *, timeout_s: float = 10.0) -> Any:
    """The JSON document at ``url``."""
    text = get_text(url, timeout_s=timeout_s)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FetchError(f"{url}: not JSON ({exc})") from None


def post_json(url: str, body: dict[str, Any], *, timeout_s: float = 600.0) -> Any:
    """POST ``body`` as JSON to ``url``; the answer's JSON."""
    import httpx

    try:
        resp = httpx.post(url, json=body, timeout=timeout_s, verify=_verify(url, True))
        resp.raise_for_status()
        return resp.json()
    except httpx.HTTPError as exc:
        raise _fail(url, exc) from None
    except ValueError as exc:
        raise FetchError(f"{url}: not JSON ({exc})") from None


def healthy(url: str, *, timeout_s: float = 2.0) -> bool:
    """Whether ``url`` answers 200 within ``timeout_s`` (refused or slow is False)."""
    import httpx

    try:
        return httpx.get(url, timeout=timeout_s, verify=_verify(url, True)).status_code == 200
    except httpx.HTTPError:
        return False


def served_model(base_url: str, *, timeout_s: float = 10.0) -> str:
    """The first model an OpenAI-compatible server lists on ``/v1/models`` ("" where none)."""
    data = get_json(base_url.rstrip("/") + "/v1/models", timeout_s=timeout_s)
    listed = (data.get("data") if isinstance(data, dict) else None) or [{}]
    return str(listed[0].get("id", "")) if isinstance(listed[0], dict) else ""
