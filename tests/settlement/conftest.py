"""Fixtures of the settlement tests: a real EVM (py-evm) with the reward contracts deployed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.evm import Evm, new_evm


@pytest.fixture(scope="module")
def module_evm() -> Evm:
    return new_evm()


@pytest.fixture
def evm(module_evm: Evm) -> Iterator[Evm]:
    """The module's chain, put back to its state before each test (evm_snapshot / evm_revert)."""
    w3 = module_evm.chain.w3
    snapshot = w3.provider.ethereum_tester.take_snapshot()  # type: ignore[attr-defined]
    yield module_evm
    w3.provider.ethereum_tester.revert_to_snapshot(snapshot)  # type: ignore[attr-defined]
