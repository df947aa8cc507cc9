"""Reading a request body against a deadline that a slow client cannot stretch.

A socket timeout bounds each recv, not the whole body: a client sending one byte just before every timeout
would hold the server's thread for hours. Instead a timer shuts the connection's read side when the deadline
passes; the blocked read then returns at once, the body comes out short and the request is answered 408.
"""

from __future__ import annotations

import socket
import threading
from typing import IO, Any

from werkzeug.exceptions import ClientDisconnected

# GitHub's hookshot itself gives up on a delivery after 10 seconds, so no real delivery takes longer.
BODY_DEADLINE_S = 10.0
CHUNK = 64 * 1024


class SlowBody(Exception):
    """The body did not arrive before the deadline."""


def read_body(stream: IO[bytes], environ: dict[str, Any], deadline_s: float = BODY_DEADLINE_S) -> bytes:
    """The whole body of `stream` (werkzeug's length-limited input), or SlowBody after `deadline_s`.

    The deadline needs the connection's socket, which gunicorn hands over as `gunicorn.socket`; other servers
    (the test client) read without one.
    """
    sock = environ.get("gunicorn.socket")
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass  # the client has gone already

    timer = threading.Timer(deadline_s, cut) if isinstance(sock, socket.socket) else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    chunks: list[bytes] = []
    try:
        while chunk := stream.read(CHUNK):
            chunks.append(chunk)
    except (ClientDisconnected, OSError) as exc:
        if expired.is_set():
            raise SlowBody(f"the body did not arrive within {deadline_s:g} s") from None
        raise ClientDisconnected() from exc
    finally:
        if timer is not None:
            timer.cancel()
    if expired.is_set():
        raise SlowBody(f"the body did not arrive within {deadline_s:g} s")
    return b"".join(chunks)
