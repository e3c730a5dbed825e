"""Who is calling and what they may do (spec §2.8–2.9, §4.6–4.7, §5).

API keys, session and admin tokens, rate limits, organizations and their roles.
"""
