"""A strict fake of GitHub's REST API (the CI subset), for tests and the sandbox mode."""

from .server import GitHubEmulator
from .spec import OpenAPISpec, load_spec, locate_spec

__all__ = ["GitHubEmulator", "OpenAPISpec", "load_spec", "locate_spec"]
