"""Fixtures of the integration tests that more than one folder needs: the project's container image."""

import pytest

from tests.support import containers


@pytest.fixture(scope="session")
def standin_image() -> str:
    why = containers.why_not()
    if why:
        pytest.skip(why)
    return containers.build_standin()


@pytest.fixture(scope="session")
def podman_image(standin_image) -> str:
    """localhost/nanochat-bench:test, built (or found in Podman's cache) from the real Containerfile."""
    return containers.build_image(standin_image)
