"""The settlement API: epochs, their public trees, a wallet's claim and its settled amounts."""

from __future__ import annotations

from typing import Any

import pytest
from eth_account import Account

from pipeline.core.db import Database
from pipeline.settlement.claim_events import read_claims
from pipeline.settlement.epochs import SettlementTarget, settle_epoch
from pipeline.settlement.merkle import load, verify
from pipeline.store.objectstore import LocalObjectStore
from tests.support.evm import Evm
from tests.support.ledger import LedgerWriter

TOKEN = 10**18
ALICE, BOB = Account.create().address, Account.create().address


@pytest.fixture
def settled(app: Any, db: Database, store: LocalObjectStore, evm: Evm) -> dict[str, Any]:
    """One epoch settled (Alice 2**70 + 3, Bob 1 token); the API reads claims from this EVM."""

    def claimed(distributor: str, wallet: str) -> int:
        return int(evm.chain.distributor(distributor).functions.claimed(wallet).call())

    app.state.claimed_reader = claimed
    app.state.claims_reader = lambda distributor, wallet: read_claims(
        evm.chain, distributor, wallet
    )
    LedgerWriter(db, store).pay([(ALICE, 2**70 + 3), (BOB, TOKEN)])
    target = SettlementTarget(chain=evm.chain, owner=evm.owner, contracts=evm.contracts)
    view = settle_epoch(db, store, target, "2026-12-07")
    assert view is not None
    return view


def test_epochs_are_listed_and_shown_with_root_totals_and_transactions(
    client: Any, settled: dict[str, Any], evm: Evm
) -> None:
    listed = client.get("/api/settlements").json()["settlements"]
    one = client.get("/api/settlements/2026-12-07").json()

    assert listed == [one]
    assert one["root"] == settled["root"] and one["status"] == "settled"
    assert one["totalAmount"] == str(2**70 + 3 + TOKEN) and one["wallets"] == 2
    assert one["distributor"] == evm.contracts.distributor
    assert one["chainId"] == evm.chain.chain_id
    assert one["rootTransaction"].startswith("0x") and one["block"] > 0
    assert client.get("/api/settlements/2026-11-30").status_code == 404


def test_the_whole_tree_is_public_and_loads_with_the_epochs_root(
    client: Any, settled: dict[str, Any]
) -> None:
    response = client.get("/api/settlements/2026-12-07/tree.json")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    tree = load(response.json())
    assert tree.root == settled["root"]
    assert sorted(tree.values) == sorted([(ALICE, 2**70 + 3), (BOB, TOKEN)])


def test_a_claim_gives_amount_proof_root_and_contracts_and_pays_on_chain(
    client: Any, settled: dict[str, Any], evm: Evm
) -> None:
    claim = client.get(f"/api/claims/{ALICE.lower()}").json()

    assert claim["wallet"] == ALICE and claim["amount"] == str(2**70 + 3)
    assert claim["root"] == settled["root"] and claim["claimedAmount"] == "0"
    assert verify(claim["root"], ALICE, int(claim["amount"]), claim["proof"])
    rewards = client.get("/api/rewards", params={"wallet": ALICE}).json()
    assert (rewards["settledAmount"], rewards["claimedAmount"], rewards["claimableAmount"]) == (
        str(2**70 + 3),
        "0",
        str(2**70 + 3),
    )

    distributor = evm.chain.distributor(claim["distributor"])
    proof = [bytes.fromhex(p[2:]) for p in claim["proof"]]
    call = distributor.functions.claim(ALICE, int(claim["amount"]), proof)
    evm.chain.transact(evm.funded_account(), call)

    rewards = client.get("/api/rewards", params={"wallet": ALICE}).json()
    assert (rewards["claimedAmount"], rewards["claimableAmount"]) == (str(2**70 + 3), "0")
    response = client.get(f"/api/claims/{ALICE}")
    assert response.status_code == 404
    assert response.json() == {
        "detail": f"nothing to claim for {ALICE}: all {2**70 + 3} units are claimed"
    }


def test_nothing_to_claim_is_404_with_a_clear_body_and_a_bad_wallet_400(
    client: Any, settled: dict[str, Any]
) -> None:
    stranger = Account.create().address
    response = client.get(f"/api/claims/{stranger}")
    assert response.status_code == 404
    assert response.json() == {
        "detail": f"nothing to claim for {stranger}: no settled epoch includes it"
    }
    mis_checksummed = ALICE[:2] + ALICE[2:].swapcase()
    for wallet in ("0x123", mis_checksummed, "0x" + "g" * 40):
        response = client.get(f"/api/claims/{wallet}")
        assert response.status_code == 400, wallet
        assert "wallet address" in response.json()["detail"]


def test_the_chain_being_down_leaves_claimed_amounts_unknown_not_an_error(
    app: Any, client: Any, settled: dict[str, Any]
) -> None:
    app.state.claimed_reader = lambda distributor, wallet: None

    rewards = client.get("/api/rewards", params={"wallet": BOB})
    claim = client.get(f"/api/claims/{BOB}")

    assert rewards.status_code == 200 and claim.status_code == 200
    assert rewards.json()["settledAmount"] == str(TOKEN)
    assert rewards.json()["claimableAmount"] is None and claim.json()["claimedAmount"] is None


def test_the_wallet_page_shows_earnings_settled_claimed_and_claimable(
    client: Any, settled: dict[str, Any]
) -> None:
    page = client.get(f"/wallets/{ALICE.lower()}")

    assert page.status_code == 200
    text = page.text
    assert f'<code id="wallet">{ALICE}</code>' in text
    assert f'<dd id="settled">{2**70 + 3} base units</dd>' in text
    assert '<dd id="claimed">0</dd>' in text
    assert f'<dd id="claimable">{2**70 + 3}</dd>' in text
    assert f'href="/api/claims/{ALICE}"' in text
    assert "Not verified" in text
    assert client.get("/wallets/0x123").status_code == 400


def test_the_wallet_page_lists_the_claims_made_with_their_transactions(
    app: Any, client: Any, settled: dict[str, Any], evm: Evm
) -> None:
    assert '<p id="claims">No claims yet.</p>' in client.get(f"/wallets/{BOB}").text
    claim = client.get(f"/api/claims/{BOB}").json()
    distributor = evm.chain.distributor(claim["distributor"])
    proof = [bytes.fromhex(p[2:]) for p in claim["proof"]]
    # Sent by a sponsor, not by this service: the page reads the chain's events.
    receipt = evm.chain.transact(
        evm.funded_account(), distributor.functions.claim(BOB, TOKEN, proof)
    )

    text = client.get(f"/wallets/{BOB}").text

    assert (
        f"<tr><td>{receipt.block}</td><td>{TOKEN}</td><td><code>{receipt.tx_hash}</code></td></tr>"
        in text
    )
    assert receipt.tx_hash.startswith("0x") and len(receipt.tx_hash) == 66
    assert "No claims yet." in client.get(f"/wallets/{ALICE}").text  # Bob's claim only
    app.state.claims_reader = lambda distributor, wallet: None
    assert "Unknown: the chain does not answer." in client.get(f"/wallets/{BOB}").text
