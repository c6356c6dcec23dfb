"""Prompts in, text out: chat messages to token ids and incremental detokenisation.

Models without a tokenizer (the tiny test models) take a deterministic byte-derived token
stream per prompt and print token ids as `` <id>``.
"""

from __future__ import annotations

from typing import Any


class BadRequest(ValueError):
    """A request the API refuses, with the message the client sees (HTTP 400)."""


def message_text(content: Any) -> str:
    """A chat message's content: a string, or a list of parts of which text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                texts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                raise BadRequest(f"content part of type {part.get('type')!r} is not supported "
                                 "(text only)")
        return "".join(texts)
    raise BadRequest("message content must be a string or a list of parts")


class Codec:
    """Encodes prompts and decodes outputs for one model (``tokenizer`` may be None)."""

    def __init__(self, tokenizer: Any | None, vocab_size: int) -> None:
        self.tok = tokenizer
        self.vocab = vocab_size

    def encode_prompt(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
            prompt = prompt[0]
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
        elif isinstance(prompt, str):
            ids = self._encode_text(prompt)
        else:
            raise BadRequest("prompt must be a string, one string in a list, or token ids")
        return self._check(ids)

    def encode_chat(self, messages: Any) -> list[int]:
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        msgs = []
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise BadRequest("each message needs a role")
            msgs.append({"role": str(m["role"]), "content": message_text(m.get("content"))})
        if self.tok is not None and getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return self._check(list(ids))
        return self._check(self._encode_text("\n".join(f"{m['role']}: {m['content']}"
                                                       for m in msgs)))

    def _encode_text(self, text: str) -> list[int]:
        if self.tok is not None:
            return list(self.tok.encode(text, add_special_tokens=False)) or [0]
        data = text.encode("utf-8") or b" "
        return [(b * 31 + i * 7) % self.vocab for i, b in enumerate(data)]

    def _check(self, ids: list[int]) -> list[int]:
        if not ids:
            raise BadRequest("empty prompt")
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise BadRequest(f"token id {bad[0]} outside the vocabulary (size {self.vocab})")
        return ids

    def decode(self, ids: list[int]) -> str:
        if self.tok is None:
            return "".join(f" {t}" for t in ids)
        return self.tok.decode(ids, skip_special_tokens=True)

    def stream(self) -> "Detokenizer":
        return Detokenizer(self)


class Detokenizer:
    """Turns a growing token list into text deltas; holds back an incomplete UTF-8 character."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.ids: list[int] = []
        self.sent = ""

    def push(self, tokens: list[int], final: bool = False) -> str:
        self.ids.extend(tokens)
        text = self.codec.decode(self.ids)
        if not final and text.endswith("\ufffd"):
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta


def stop_strings(value: Any) -> tuple[str, ...]:
    """A request's ``stop`` (a string or a list of up to four), checked."""
    if value is None or value == [] or value == "":
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
        raise BadRequest("stop must be a non-empty string or a list of them")
    if len(items) > 4:
        raise BadRequest("at most 4 stop strings")
    return tuple(items)


def first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    """Where the earliest stop string begins in ``text``, or None."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def stop_matcher(codec: Codec, stops: tuple[str, ...], *, step_end_only: bool = False):
    """The decoder's stop check for ``stops``: given the output ids so far and how many the
    last step added, the fewest tokens whose text holds a stop string (the request ends after
    the token that completes it), or None. ``step_end_only`` seeds the fault of a check made
    once per step on the text's end (a stop string completed inside a multi-token verify step
    is missed, and the answer runs on past it)."""

    def check(ids: list[int], new: int) -> int | None:
        if step_end_only:
            text = codec.decode(ids)
            return len(ids) if any(text.endswith(s) for s in stops) else None
        for keep in range(max(1, len(ids) - new + 1), len(ids) + 1):
            if first_stop(codec.decode(ids[:keep]), stops) is not None:
                return keep
        return None

    return check
