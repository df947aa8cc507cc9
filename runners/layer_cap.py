"""An untrusted job's compile-cache layer is bounded while the job runs.

Its writes land in its own layer on the worker's data disk (an overlay's upper directory, or a copy): gone with
the job, but until then a job could fill the disk every other job and the artifacts share. The layer is measured
every few seconds (blocks, not claimed sizes; links not followed) and the job is stopped once it holds more than
the repository's trusted cache may (COMPILE_CI_CACHE_CAP_MB), with its own outcome: "Compile cache over N MB".
"""

from __future__ import annotations

import time

from runners.compile_cache import JobCache
from runners.untrusted_files import usage

CHECK_EVERY_S = 5.0


class LayerWatch:
    """`check()` about once a second from the runner's wait loop; true once the layer is over its cap."""

    def __init__(self, cache: JobCache | None, every_s: float = CHECK_EVERY_S) -> None:
        self.layer = cache.layer if cache is not None else None  # None: a trusted job, or no cache at all
        self.cap_mb = cache.scope.cap_mb if cache is not None else 0
        self.every_s = every_s
        self.over = False
        # A copy layer starts as a copy of the trusted cache (itself under the cap): only the job's own writes count.
        self.baseline = usage(self.layer, 1 << 62) if self.layer is not None else 0
        self._next = time.monotonic() + every_s

    def check(self) -> bool:
        if self.layer is None or self.over or time.monotonic() < self._next:
            return self.over
        self._next = time.monotonic() + self.every_s
        cap = self.cap_mb * 1024 * 1024
        self.over = usage(self.layer, self.baseline + cap) - self.baseline > cap
        return self.over
