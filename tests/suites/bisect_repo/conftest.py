"""The stack installs its compiler change for its tests, as many stacks do (here beside the package, so its root is
on the path as pytest imports this file)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from stack import patches

    patches.install()
