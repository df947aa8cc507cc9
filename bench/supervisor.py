"""What compose's `restart: unless-stopped` and Kubernetes do for the fault campaign's stack: a service process that
exits by itself is started again, and counted (the campaign kills some on purpose, under `deliberate`)."""

from __future__ import annotations

import threading
from collections import Counter

from service.devkit.sandbox.stack import Stack


class Supervisor(threading.Thread):
    def __init__(self, stack: Stack, every_s: float = 1.0) -> None:
        super().__init__(name="supervisor", daemon=True)
        self.stack, self.every_s = stack, every_s
        self.deliberate = threading.Lock()  # held around a kill and its restart: not the supervisor's business
        self.restarts: Counter[str] = Counter()
        self.last_words: dict[str, str] = {}
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.every_s):
            with self.deliberate:
                for name, proc in list(self.stack.procs):
                    if proc.poll() is None or self._stopping.is_set():
                        continue
                    log = (self.stack.root / f"{name}.log").read_text(errors="replace").splitlines()
                    self.last_words[name] = next((line for line in reversed(log) if "Error" in line),
                                                 log[-1] if log else "")
                    print(f"supervisor: {name} exited with {proc.returncode}; starting it again "
                          f"({self.last_words[name]})", flush=True)
                    self.stack.respawn(name)
                    self.restarts[name] += 1

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)
