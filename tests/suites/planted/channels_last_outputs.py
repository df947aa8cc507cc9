"""Planted bug (pytest plugin): compiled outputs leak the channels-last layout inductor used internally.

Load with ``-p tests.suites.planted.channels_last_outputs``. With layout optimization inductor runs convolutions
channels-last and, by default, restores each graph output to the strides eager would have produced. This plugin
turns that restoration off (``keep_output_stride``), so a conv output comes back channels-last where eager's is
contiguous: values are right, but ``view`` on the result fails and strides no longer match eager.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from torch._inductor import config as inductor_config

    if not hasattr(inductor_config, "keep_output_stride"):
        raise pytest.UsageError("channels_last_outputs: this torch has no inductor config keep_output_stride")
    inductor_config.keep_output_stride = False
