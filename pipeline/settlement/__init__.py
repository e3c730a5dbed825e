"""Settlement of rewards on an EVM chain: epochs, Merkle trees, the reward contracts.

Above `pipeline.rewards` (it reads the ledger), below the API, CLI and Dagster assets.
"""
