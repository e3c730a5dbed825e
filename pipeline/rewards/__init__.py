"""Reward tokens (spec §1, §2.5).

A batch scored and valued (batch_scoring, batch_valuation, valuation_records), the formula and
contributor manifests, valuation and shares, payouts and the ledger.
"""
