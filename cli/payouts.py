"""Payout subcommands: payouts held | release | reject (docs/rewards.md §2c).

A valuation made with the owner's training code that the marketplace's reference disputes is
held (`pipeline.rewards.holds`); these operator commands list the held valuations and pay or
reject one.
"""

from __future__ import annotations

import argparse

from pipeline.core.config import get_settings


def cmd_held(args: argparse.Namespace) -> int:
    from pipeline.rewards.holds import held_valuations
    from pipeline.services import Services  # alembic, pyarrow, numpy: not at every start

    with Services(get_settings()) as services:
        held = held_valuations(services.db)
    for valuation in held:
        print(
            f"valuation {valuation.valuation_id}\tmodel {valuation.model_id}\t"
            f"{len(valuation.job_ids)} contribution(s)\t{valuation.hold}"
        )
    if not held:
        print("no payout is held")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from pipeline.rewards.holds import release
    from pipeline.services import Services  # alembic, pyarrow, numpy: not at every start

    with Services(get_settings()) as services:
        paid = release(services, args.valuation_id)
    for outcome in paid:
        print(f"{outcome.version}\t{outcome.tokens:g} tokens\t{outcome.detail}")
    if not paid:
        print(f"released valuation {args.valuation_id}: the model's running evaluation pays it")
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    from pipeline.rewards.holds import reject
    from pipeline.services import Services  # alembic, pyarrow, numpy: not at every start

    with Services(get_settings()) as services:
        jobs = reject(services.db, args.valuation_id)
    print(f"rejected {len(jobs)} contribution(s): {', '.join(jobs)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    payouts = sub.add_parser("payouts", help="payouts held for the operator (docs/rewards.md)")
    payouts_sub = payouts.add_subparsers(dest="payouts_command", required=True)
    held = payouts_sub.add_parser("held", help="list valuations whose payout is held")
    held.set_defaults(handler=cmd_held)
    for name, handler, what in (
        ("release", cmd_release, "pay a held valuation as it was valued"),
        ("reject", cmd_reject, "reject a held valuation's contributions: nothing paid"),
    ):
        command = payouts_sub.add_parser(name, help=what)
        command.add_argument("valuation_id", help="the valuation id (`payouts held`)")
        command.set_defaults(handler=handler)
