"""Guards around every call an engine makes into specscope. Stdlib only.

Whatever specscope raises inside an engine's call, ``SystemExit`` included, is caught, counted
and never reaches the engine; the engine's own code always runs. ``KeyboardInterrupt`` is the
user's and passes through, as does anything the engine's own code raises.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

#: what a guard catches: everything specscope can raise, except the user's Ctrl-C
SPECSCOPE_ERRORS = (Exception, SystemExit)


def count(on_error: Callable[[], None]) -> None:
    """Call ``on_error``; a counter that itself fails is not the engine's problem."""
    try:
        on_error()
    except SPECSCOPE_ERRORS:
        pass


@contextlib.contextmanager
def guarded_phase(open_timer: Callable[[], Any], on_error: Callable[[], None]) -> Iterator[None]:
    """Time the block with the context manager ``open_timer()`` returns; a failure to open or
    close the timer is counted, and the block runs (and raises) exactly as it would without."""
    timer = None
    try:
        timer = open_timer()
        if timer is not None:
            timer.__enter__()
    except SPECSCOPE_ERRORS:
        timer = None
        count(on_error)
    try:
        yield
    finally:
        if timer is not None:
            try:
                timer.__exit__(None, None, None)
            except SPECSCOPE_ERRORS:
                count(on_error)
