"""Organization subcommands: orgs create, orgs add-member, orgs remove-member, orgs list."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from pipeline.auth.orgs import (
    Role,
    create_org,
    find_org,
    list_members,
    list_orgs,
    remove_member,
    set_member,
)
from pipeline.core.config import get_settings

if TYPE_CHECKING:
    from pipeline.services import Services


def _services() -> Services:
    # The composition root imports the whole domain core; `marketplace` starts without it.
    from pipeline.bootstrap import prepare_store
    from pipeline.services import Services

    settings = get_settings()
    prepare_store(settings)
    return Services(settings)


def cmd_create(args: argparse.Namespace) -> int:
    with _services() as services, services.db.session() as session:
        org = create_org(session, args.name, args.owner)
        org_id, name = org.id, org.name
    print(f"created organization {name!r} with owner {args.owner}")
    print(org_id)
    return 0


def cmd_add_member(args: argparse.Namespace) -> int:
    role = Role.parse(args.role)
    with _services() as services, services.db.session() as session:
        org = find_org(session, args.org)
        set_member(session, org, args.user, role)
        org_id = org.id
    print(f"{args.user} is {role.value} of organization {org_id}")
    return 0


def cmd_remove_member(args: argparse.Namespace) -> int:
    with _services() as services, services.db.session() as session:
        org = find_org(session, args.org)
        revoked = remove_member(session, org, args.user)
        org_id = org.id
    print(f"{args.user} removed from organization {org_id}; {revoked} of their keys revoked")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with _services() as services, services.db.session() as session:
        for org, count in list_orgs(session):
            print(f"{org.id}\t{org.name}\tmembers={count}")
            if args.members:
                for member in list_members(session, org.id):
                    print(f"\t{member.user_id}\t{member.role}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    orgs = sub.add_parser("orgs", help="organizations and their members")
    orgs_sub = orgs.add_subparsers(dest="orgs_command", required=True)

    create = orgs_sub.add_parser("create", help="create an organization; prints its id last")
    create.add_argument("name")
    create.add_argument("--owner", required=True, help="user id of the first Owner")
    create.set_defaults(handler=cmd_create)

    add = orgs_sub.add_parser("add-member", help="add a member or change a member's role")
    add.add_argument("org", help="organization id or name")
    add.add_argument("user", help="user id")
    add.add_argument("role", help=", ".join(role.value for role in Role))
    add.set_defaults(handler=cmd_add_member)

    remove = orgs_sub.add_parser(
        "remove-member", help="remove a member and revoke the org keys they created"
    )
    remove.add_argument("org", help="organization id or name")
    remove.add_argument("user", help="user id")
    remove.set_defaults(handler=cmd_remove_member)

    listing = orgs_sub.add_parser("list", help="list organizations")
    listing.add_argument("--members", action="store_true", help="also list members and roles")
    listing.set_defaults(handler=cmd_list)
