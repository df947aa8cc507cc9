"""What a process forked from a warm interpreter does first to be the process a fresh start would have made: its
own session and descriptors, its own random state. Production's warm interpreter (suites/warm_process.py) and the
tests' zygote (tests/zygote_server.py) both fork their children so."""

from __future__ import annotations

import os
import signal
import sys


def detach(out: int, err: int) -> None:
    """A forked child's own: a session of its own, stdin from /dev/null, `out` and `err` as stdout and stderr and no
    other descriptor, the default handlers of the signals its server handled."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.closerange(3, 1 << 16)
    for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def fresh_state() -> None:
    """What a fresh interpreter would not share with its siblings: random seeds (Python's, numpy's, torch's),
    `tempfile`'s directory."""
    import random
    import tempfile

    tempfile.tempdir = None
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()  # a fresh interpreter's default generator starts from a seed of its own
