"""What an epoch's settlement looks like to the API, the CLI and Dagster."""

from __future__ import annotations

from typing import Any

from pipeline.core.settlement_tables import Settlement
from pipeline.core.tables import isoformat_utc


def settlement_view(row: Settlement) -> dict[str, Any]:
    """An epoch as the API and Dagster show it (amounts as decimal strings of base units)."""
    return {
        "epoch": row.epoch,
        "number": row.number,
        "status": row.status,
        "root": row.root,
        "wallets": row.wallets,
        "totalAmount": str(row.total_units),
        "mintedAmount": None if row.minted_units is None else str(row.minted_units),
        "ledgerRowId": row.ledger_row_id,
        "chainId": row.chain_id,
        "token": row.token_address,
        "distributor": row.distributor_address,
        "mintTransaction": row.mint_tx_hash,
        "rootTransaction": row.root_tx_hash,
        "block": row.block,
        "createdAt": isoformat_utc(row.created_at),
        "settledAt": isoformat_utc(row.settled_at),
    }
