"""The settlement target from the settings: chain, owner key and contracts, or None when off."""

from __future__ import annotations

from eth_account import Account
from eth_account.signers.local import LocalAccount

from pipeline.core.config import Settings
from pipeline.core.errors import Conflict
from pipeline.rewards.formula import to_checksum_address, validate_wallet
from pipeline.settlement.chain import Chain, ChainError, RewardContracts
from pipeline.settlement.epochs import SettlementTarget

REQUIRED = (
    "settlement_rpc_url",
    "settlement_chain_id",
    "settlement_token_address",
    "settlement_distributor_address",
)


class SettlementOff(Conflict):
    """Settlement is not configured (SETTLEMENT_RPC_URL and the rest unset)."""


def settlement_enabled(settings: Settings) -> bool:
    return settings.settlement_rpc_url is not None


def configured_contracts(settings: Settings) -> RewardContracts:
    missing = [name.upper() for name in REQUIRED if getattr(settings, name) is None]
    if missing:
        raise SettlementOff(f"settlement is off: set {', '.join(missing)} (docs/settlement.md)")
    token, distributor = settings.settlement_token_address, settings.settlement_distributor_address
    assert token is not None and distributor is not None
    return RewardContracts(
        token=to_checksum_address(validate_wallet(token)),
        distributor=to_checksum_address(validate_wallet(distributor)),
    )


def connect(settings: Settings) -> Chain:
    """The chain at SETTLEMENT_RPC_URL, refused when its id is not SETTLEMENT_CHAIN_ID."""
    configured_contracts(settings)
    assert settings.settlement_rpc_url is not None
    chain = Chain.over_http(settings.settlement_rpc_url)
    try:
        chain_id = chain.chain_id
    except OSError as exc:  # requests' errors; the URL may hold a token: not in the message
        raise ChainError(
            f"the node at SETTLEMENT_RPC_URL did not answer: {type(exc).__name__}"
        ) from None
    if chain_id != settings.settlement_chain_id:
        raise SettlementOff(
            f"the node at SETTLEMENT_RPC_URL is chain {chain_id}, "
            f"not SETTLEMENT_CHAIN_ID {settings.settlement_chain_id}"
        )
    return chain


def owner_account(settings: Settings) -> LocalAccount:
    if settings.settlement_owner_key is None:
        raise SettlementOff("settlement needs SETTLEMENT_OWNER_KEY (the contracts' owner)")
    try:
        account: LocalAccount = Account.from_key(settings.settlement_owner_key.get_secret_value())
    except (ValueError, TypeError):
        # The key itself is never part of the message.
        raise SettlementOff("SETTLEMENT_OWNER_KEY is not a private key") from None
    return account


def settlement_target(settings: Settings) -> SettlementTarget:
    return SettlementTarget(
        chain=connect(settings),
        owner=owner_account(settings),
        contracts=configured_contracts(settings),
        require_verified_wallets=settings.settlement_require_verified_wallets,
    )
