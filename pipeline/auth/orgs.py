"""Organizations, their members and roles, and the key permissions of the spec §5 role matrix."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from pipeline.core.tables import ApiKey, Organization, OrgMember, canonical_uuid, utcnow


class Role(enum.StrEnum):
    OWNER = "Owner"
    ADMIN = "Admin"
    DEVELOPER = "Developer"
    VIEWER = "Viewer"

    @classmethod
    def parse(cls, value: str) -> Role:
        for role in cls:
            if role.value.lower() == value.strip().lower():
                return role
        names = ", ".join(r.value for r in cls)
        raise InvalidInput(f"unknown role {value!r}; expected one of {names}")


class KeyAction(enum.StrEnum):
    CREATE = "create"
    LIST = "list"
    REVOKE_OWN = "revoke own"
    REVOKE_ANY = "revoke any"
    SET_PLAN = "set the plan and limits of"


# Fields of a key's create body that decide what the key costs and may consume. Spec §4.7 gives
# organization key creation only {name, service_id, scopes, environment}: the plan and limits
# are the organization's to decide, so only its Owners and Admins set them; a Developer's key
# gets the defaults of §4.6 (plan free, 1000 requests per hour, no monthly limit).
PLAN_FIELDS = ("billing_plan", "rate_limit_per_hour", "monthly_prediction_limit")


# Spec §5 organization role matrix; a Developer revokes only keys it created.
PERMISSIONS: dict[Role, frozenset[KeyAction]] = {
    Role.OWNER: frozenset(KeyAction),
    Role.ADMIN: frozenset(KeyAction),
    Role.DEVELOPER: frozenset({KeyAction.CREATE, KeyAction.LIST, KeyAction.REVOKE_OWN}),
    Role.VIEWER: frozenset({KeyAction.LIST}),
}


def allowed(role: Role, action: KeyAction) -> bool:
    return action in PERMISSIONS[role]


def key_holder_role(role: str) -> bool:
    """Whether a member with this stored role may use the organization keys it created.

    The same roles that may create keys: a Developer demoted to Viewer cannot use its keys
    until promoted again; a role unknown to this code version holds none.
    """
    try:
        return allowed(Role(role), KeyAction.CREATE)
    except ValueError:
        return False


@dataclass(frozen=True)
class Membership:
    org_id: str
    user_id: str
    role: Role

    def require(self, action: KeyAction) -> None:
        if not allowed(self.role, action):
            raise Forbidden(f"role {self.role.value} may not {action.value} keys")

    def require_plan_fields(self, fields_set: set[str]) -> None:
        """Refuse plan and limit fields in a create body from a role that may not set them."""
        sent = [name for name in PLAN_FIELDS if name in fields_set]
        if sent and not allowed(self.role, KeyAction.SET_PLAN):
            raise Forbidden(
                f"role {self.role.value} may not set {', '.join(sent)}: the plan and limits of "
                "an organization key are set by the organization's Owners and Admins"
            )

    def require_revoke_right(self) -> None:
        """Before looking the key up: a role that may revoke no key at all is refused at once."""
        if not {KeyAction.REVOKE_ANY, KeyAction.REVOKE_OWN} & PERMISSIONS[self.role]:
            raise Forbidden(f"role {self.role.value} may not revoke keys")

    def require_revoke(self, key: ApiKey) -> None:
        """Owner and Admin revoke any key of the org; a Developer only the keys it created."""
        if allowed(self.role, KeyAction.REVOKE_ANY):
            return
        if allowed(self.role, KeyAction.REVOKE_OWN) and key.user_id == self.user_id:
            return
        if allowed(self.role, KeyAction.REVOKE_OWN):
            raise Forbidden(f"role {self.role.value} may revoke only its own keys")
        raise Forbidden(f"role {self.role.value} may not revoke keys")


def membership(session: Session, org_id: str, user_id: str) -> Membership:
    """The caller's role in the org; a non-member, or an unknown org, is Forbidden alike."""
    canonical = canonical_uuid(org_id)
    member = (
        session.get(OrgMember, {"org_id": canonical, "user_id": user_id}) if canonical else None
    )
    if member is None:
        raise Forbidden("not a member of this organization")
    return Membership(org_id=member.org_id, user_id=member.user_id, role=Role(member.role))


def create_org(session: Session, name: str, owner: str) -> Organization:
    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidInput("organization name must be 1 to 200 characters")
    if not owner.strip() or len(owner) > 200:
        raise InvalidInput("owner must be a user id of 1 to 200 characters")
    if session.scalar(select(Organization).where(Organization.name == name)) is not None:
        raise Conflict(f"organization {name!r} already exists")
    org = Organization(name=name)
    session.add(org)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"organization {name!r} already exists") from None
    session.add(OrgMember(org_id=org.id, user_id=owner.strip(), role=Role.OWNER.value))
    session.flush()
    return org


def find_org(session: Session, ref: str) -> Organization:
    """An organization by id or by name."""
    canonical = canonical_uuid(ref)
    org = session.get(Organization, canonical) if canonical else None
    if org is None:
        org = session.scalar(select(Organization).where(Organization.name == ref))
    if org is None:
        raise NotFound(f"no organization {ref!r}")
    return org


def set_member(session: Session, org: Organization, user_id: str, role: Role) -> OrgMember:
    """Add a member, or change the role of an existing one."""
    user_id = user_id.strip()
    if not user_id or len(user_id) > 200:
        raise InvalidInput("user id must be 1 to 200 characters")
    member = session.get(OrgMember, {"org_id": org.id, "user_id": user_id})
    if member is None:
        member = OrgMember(org_id=org.id, user_id=user_id, role=role.value)
        session.add(member)
    else:
        if role is not Role.OWNER:
            _keep_an_owner(session, member)
        # Takes effect on the member's next request: key verification reads the current role.
        member.role = role.value
    session.flush()
    return member


def remove_member(session: Session, org: Organization, user_id: str) -> int:
    """Remove a member and revoke the organization keys they created; how many were revoked.

    The keys stop working on the next request (verification reads the database every time).
    """
    member = session.get(OrgMember, {"org_id": org.id, "user_id": user_id.strip()})
    if member is None:
        raise NotFound(f"{user_id!r} is not a member of organization {org.name!r}")
    _keep_an_owner(session, member)
    revoked = session.execute(
        update(ApiKey)
        .where(
            ApiKey.org_id == org.id,
            ApiKey.user_id == member.user_id,
            ApiKey.is_active.is_(True),
        )
        .values(is_active=False, revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    session.delete(member)
    session.flush()
    return int(revoked)


def _keep_an_owner(session: Session, member: OrgMember) -> None:
    """Refuse to remove or demote the last Owner: nobody could manage the organization."""
    if member.role != Role.OWNER.value:
        return
    owners = session.scalar(
        select(func.count())
        .select_from(OrgMember)
        .where(OrgMember.org_id == member.org_id, OrgMember.role == Role.OWNER.value)
    )
    if (owners or 0) <= 1:
        raise Conflict("an organization keeps at least one Owner")


def list_orgs(session: Session) -> list[tuple[Organization, int]]:
    """Every organization with its member count, oldest first."""
    counts = (
        select(OrgMember.org_id, func.count().label("members"))
        .group_by(OrgMember.org_id)
        .subquery()
    )
    query = (
        select(Organization, func.coalesce(counts.c.members, 0))
        .outerjoin(counts, counts.c.org_id == Organization.id)
        .order_by(Organization.created_at, Organization.name)
    )
    return [(org, int(members)) for org, members in session.execute(query)]


def list_members(session: Session, org_id: str) -> list[OrgMember]:
    query = select(OrgMember).where(OrgMember.org_id == org_id).order_by(OrgMember.user_id)
    return list(session.scalars(query))
