"""A stop the process can see: on SIGTERM (or SIGINT) the recorder hands what it holds to its
sinks, with a health snapshot that counts it, then the engine's own handler runs.

The handler is chained in front of whatever the process had installed (vLLM's engine core sets
its own before the first verify step, when this is installed), never replacing it: the previous
handler runs after at most ``STOP_BOUND_S``, whatever the sinks do; the default action (``SIG_DFL``)
is restored and the signal raised again, so the process ends as it would have. A signal that
kills at once (SIGKILL, and vLLM's SIGTERM at ``--shutdown-timeout 0``, followed by a SIGKILL
within microseconds) leaves the drain's own window: ``recorder.IDLE_S`` and
``recorder.BUSY_INTERVAL_S``. Python runs signal handlers on the main thread only, so this is
installed from there (``chain_stop`` returns False elsewhere).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

#: the most a stop waits for the recorder's hand-over before the engine's own handler runs
STOP_BOUND_S = 0.5


def chain_stop(recorder: Any, signals: tuple[int, ...] = (signal.SIGTERM,),
               bound_s: float = STOP_BOUND_S) -> bool:
    """Chain a hand-over of ``recorder``'s records in front of each signal's current handler.
    Only from the main thread, once per signal (a handler already chained is left); a handler
    installed outside Python (``getsignal`` None) is left alone. Returns True where it chained
    one at least. Never raises."""
    if threading.current_thread() is not threading.main_thread():
        return False
    done = False
    for sig in signals:
        try:
            previous = signal.getsignal(sig)
            if previous is None or getattr(previous, "_specscope_stop", False):
                continue
            signal.signal(sig, _handler(recorder, sig, previous, bound_s))
            done = True
        except (Exception, SystemExit):  # noqa: PERF203 - a failure leaves the engine's handler
            continue
    return done


def _handler(recorder: Any, sig: int, previous: Any, bound_s: float) -> Any:
    def on_stop(signum: int, frame: Any) -> None:
        try:
            recorder.hand_over(bound_s)
        except (Exception, SystemExit):
            pass
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # end as the process would have without us
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        # SIG_IGN: the process ignored it, and still does

    on_stop._specscope_stop = True  # type: ignore[attr-defined]
    return on_stop
