"""Fixtures of the end-to-end tests on anvil: one chain per module, fresh contracts per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.settlement.chain import RewardContracts
from tests.support.anvil import anvil_or_skip, deploy


@pytest.fixture(scope="module")
def anvil() -> Iterator[str]:
    with anvil_or_skip() as url:
        yield url


@pytest.fixture
def deployed(anvil: str) -> RewardContracts:
    """A new token and distributor: a test sees only its own mints and roots."""
    return deploy(anvil)
