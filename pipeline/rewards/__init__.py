"""Reward tokens (spec §1, §2.5).

The formula and contributor manifests, valuation and shares, payouts and the ledger.
"""
