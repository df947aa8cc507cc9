"""A SIGALRM deadline that never cuts an import short.

The op sweep's batch budget and the bisection's hard stop raise from a SIGALRM handler into whatever the main thread
runs, and a compile runs torch's lazy imports. An exception raised inside a module's import leaves that module out of
`sys.modules` half-run: the next import runs it again, and what it registered the first time is registered twice (a
CPU host's op sweep saw `AssertionError: duplicate name: dynamo_minifier_backend` on every later case once a batch's
budget ended inside `torch._dynamo.repro.after_dynamo`'s import). So while an import is in progress on the
interrupted stack, the handler re-arms the timer for a moment and returns; the deadline is then late by at most the
import's own time, and by GRACE_S at the most: an import that does not end (a repository's module that hangs as it
is imported inside a compile) is cut then, as before, so the budget still bounds the batch.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType

RETRY_S = 0.02
GRACE_S = 10.0
_IMPORTING = "<frozen importlib._bootstrap"  # the import machinery's frames (_bootstrap and _bootstrap_external)


def importing(frame: FrameType | None) -> bool:
    """Whether a module is being imported somewhere on `frame`'s stack."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORTING):
            return True
        frame = frame.f_back
    return False


def handler(expire: Callable[[], None]) -> Callable[[int, FrameType | None], None]:
    """A SIGALRM handler that calls `expire` (which raises) unless an import is in progress, when it tries again
    RETRY_S later, for GRACE_S after the first expiry at the most."""
    due: list[float] = []

    def expired(_signum: int, frame: FrameType | None) -> None:
        due.append(due[0] if due else time.monotonic())
        if importing(frame) and time.monotonic() - due[0] < GRACE_S:
            signal.setitimer(signal.ITIMER_REAL, RETRY_S)
            return
        expire()

    return expired
