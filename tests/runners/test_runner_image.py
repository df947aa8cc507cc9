"""What the CPU runner image holds beyond torch: importing torch there is quiet (numpy present), and expecttest."""

from __future__ import annotations

import os
from typing import Any

from runners.docker_runner import DEFAULT_IMAGES

# A build under another tag is checked by naming it (the tests never rebuild the shared :latest).
IMAGE = os.environ.get("COMPILE_CI_TEST_RUNNER_IMAGE", DEFAULT_IMAGES["cpu"])


def test_importing_torch_in_the_runner_image_warns_about_nothing(docker_client: Any) -> None:
    output = docker_client.containers.run(
        IMAGE, ["python", "-c", "import torch, numpy, expecttest; print('ok', torch.__version__)"],
        remove=True, network_disabled=True, stderr=True, stdout=True).decode()
    assert "Failed to initialize NumPy" not in output, output
    assert output.strip().startswith("ok 2.13.0"), output
