"""`python -m service.devkit.github_emulator`: serve the fake GitHub until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from .server import GitHubEmulator


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m service.devkit.github_emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--app-id", type=int, required=True)
    parser.add_argument("--public-key-file", type=Path, required=True, help="the App's RSA key (PEM)")
    parser.add_argument("--spec", type=Path, default=None, help="openapi-ci-subset.json (default: located)")
    parser.add_argument("--app-slug", default="compile-ci")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    emulator = GitHubEmulator(args.app_id, args.public_key_file.read_bytes(), args.spec, app_slug=args.app_slug,
                              host=args.host, port=args.port)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with emulator:
        print(f"listening {emulator.url}", flush=True)
        # wait() with a timeout so the main thread wakes up to run signal handlers promptly.
        while not stopping.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
