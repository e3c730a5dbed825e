"""Model registry: models stored with their data-spec and owner.

A model's owner (one user or one organization) is who may change its ground truth: upload a
benchmark, create, change or delete its evaluation schedule. `require_model_owner` is the one
check; docs/ownership.md states the rule. What a model file holds, and how it is checked, is
`pipeline.models.definitions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.auth.orgs import Role
from pipeline.core.db import Database
from pipeline.core.errors import Forbidden, InvalidInput, NotFound
from pipeline.core.tables import INT32_MAX, Model, OrgMember
from pipeline.models.definitions import (
    DEMO_MODELS,
    ModelDefinition,
    ModelFolder,
    demo_definition,
    demo_model,
)
from pipeline.sandbox.envs import Environment
from pipeline.sandbox.folders import trainer_key
from pipeline.sandbox.requirements import REQUIREMENTS_FILE

if TYPE_CHECKING:
    from pipeline.store.objectstore import ObjectStore


@dataclass(frozen=True)
class ModelOwner:
    """A model's owner: exactly one of a user id and an organization id."""

    user_id: str | None = None
    org_id: str | None = None

    def __post_init__(self) -> None:
        if (self.user_id is None) == (self.org_id is None):
            raise InvalidInput("a model owner is one user or one organization")
        if self.user_id is not None and not 1 <= len(self.user_id.strip()) <= 200:
            raise InvalidInput("owner user id must be 1 to 200 characters")

    def describe(self) -> str:
        return f"user {self.user_id}" if self.user_id else f"organization {self.org_id}"


# Organization roles whose members' keys act for an organization that owns a model.
OWNER_ROLES = (Role.OWNER.value, Role.ADMIN.value)


def model_owner(model: Model) -> ModelOwner | None:
    if model.owner_user_id is None and model.owner_org_id is None:
        return None
    return ModelOwner(model.owner_user_id, model.owner_org_id)


def set_model_owner(model: Model, owner: ModelOwner) -> None:
    model.owner_user_id = owner.user_id.strip() if owner.user_id else None
    model.owner_org_id = owner.org_id


def register_model(
    session: Session,
    definition: ModelDefinition,
    owner: ModelOwner | None = None,
    *,
    trainer_sha256: str | None = None,
    environment: Environment | None = None,
) -> Model:
    """Add a model, or update the one with the same name (bumping its spec version).

    `owner`, when given, becomes the model's owner; otherwise an existing model keeps its own.
    A definition with a trainer needs the hash of its stored folder (`trainer_sha256`), and
    the environment its requirements installed, if it has any.
    """
    if (definition.trainer is None) != (trainer_sha256 is None):
        raise InvalidInput(
            "a model with a trainer is registered from its folder: marketplace models add DIR"
        )
    existing = session.scalar(select(Model).where(Model.name == definition.name))
    if existing is not None:
        if existing.data_spec != definition.data_spec:
            existing.spec_version += 1
        for field, value in definition.table_columns().items():
            setattr(existing, field, value)
        if existing.trainer_sha256 != trainer_sha256:
            existing.trainer_sha256 = trainer_sha256
            existing.trainer_failure = None
        for field, value in Environment.model_columns(environment).items():
            setattr(existing, field, value)
        if owner is not None:
            set_model_owner(existing, owner)
        session.flush()
        return existing
    model = Model(
        **definition.table_columns(),
        **Environment.model_columns(environment),
        trainer_sha256=trainer_sha256,
        spec_version=1,
        last_version=0,
    )
    if owner is not None:
        set_model_owner(model, owner)
    session.add(model)
    session.flush()
    return model


def register_model_folder(
    session: Session,
    store: ObjectStore,
    folder: ModelFolder,
    owner: ModelOwner | None = None,
    environment: Environment | None = None,
) -> Model:
    """Register a model from its folder; a trainer's packed folder is stored by its hash, with
    the environment its requirements installed (`pipeline.models.environments`).

    The object is written inside the caller's transaction: if the write fails, nothing is
    registered (an object left by a failed commit is unreferenced and harmless).
    """
    if (folder.requirements is None) != (environment is None):
        raise InvalidInput(f"a folder with {REQUIREMENTS_FILE} is registered with its environment")
    model = register_model(
        session, folder.definition, owner, trainer_sha256=folder.sha256, environment=environment
    )
    if folder.archive is not None and folder.sha256 is not None:
        store.put_bytes(trainer_key(model.id, folder.sha256), folder.archive)
    return model


def find_model(session: Session, ref: str) -> Model:
    """A model by id or by name (operator commands)."""
    model = session.scalar(select(Model).where(Model.name == ref))
    if model is None and ref.strip().isdigit():
        model = get_model(session, int(ref))
    if model is None:
        raise NotFound(f"no model {ref!r}")
    return model


def acts_for_owner(session: Session, model: Model, user_id: str, key_org_id: str | None) -> bool:
    """Whether a key (its user, and the organization it was issued for) acts for the owner.

    A user owner: the user's own keys, not organization keys (those act for their
    organization). An organization owner: keys of a member whose role is Owner or Admin now,
    issued for that organization or personal; never keys issued for another organization.
    """
    if model.owner_user_id is not None:
        return key_org_id is None and user_id == model.owner_user_id
    if model.owner_org_id is not None:
        if key_org_id not in (None, model.owner_org_id):
            return False
        member = session.get(OrgMember, {"org_id": model.owner_org_id, "user_id": user_id})
        return member is not None and member.role in OWNER_ROLES
    return False


def owned_models_clause(user_id: str, key_org_id: str | None) -> ColumnElement[bool]:
    """`acts_for_owner` as a condition on `Model`: the models a key acts for the owner of."""
    admin_of = select(OrgMember.org_id).where(
        OrgMember.user_id == user_id, OrgMember.role.in_(OWNER_ROLES)
    )
    if key_org_id is not None:
        return Model.owner_org_id.in_(admin_of.where(OrgMember.org_id == key_org_id))
    return or_(Model.owner_user_id == user_id, Model.owner_org_id.in_(admin_of))


def require_model_owner(db: Database, model_id: int, user_id: str, key_org_id: str | None) -> None:
    """NotFound for an unknown model; Forbidden unless the key acts for the model's owner."""
    with db.session() as session:
        model = get_model(session, model_id)
        if not acts_for_owner(session, model, user_id, key_org_id):
            raise Forbidden(
                f"only the owner of model {model_id} may change its benchmark or evaluation "
                "schedule (for an organization: keys of its Owners and Admins)"
            )


def get_model(session: Session, model_id: int) -> Model:
    # Ids outside the integer column's range cannot exist; some drivers overflow on them.
    model = session.get(Model, model_id) if 1 <= model_id <= INT32_MAX else None
    if model is None:
        raise NotFound(f"model {model_id} not found")
    return model


def list_models(session: Session) -> list[Model]:
    return list(session.scalars(select(Model).order_by(Model.id)))


def seed_demo_model(db: Database, owner_user_id: str = "admin") -> Model | None:
    """Register the first demo model (`customer-churn`, a definition file: no code to store)
    alone; see `seed_demo_models`."""
    definition = demo_definition()
    models = _seed_empty_store(
        db, owner_user_id, lambda session, owner: [register_model(session, definition, owner)]
    )
    return models[0] if models else None


def seed_demo_models(db: Database, store: ObjectStore, owner_user_id: str = "admin") -> list[Model]:
    """Register the demo models (`DEMO_MODELS`), owned by the admin user, in an empty store, as
    `marketplace models add` does: the loan model's folder is packed and stored by its hash.

    Returns them, or nothing when models exist; a first demo model left without an owner (a
    store from before owners existed) is given to the admin user.
    """
    return _seed_empty_store(
        db,
        owner_user_id,
        lambda session, owner: [
            register_model_folder(session, store, demo_model(name), owner) for name in DEMO_MODELS
        ],
    )


def _seed_empty_store(
    db: Database,
    owner_user_id: str,
    register: Callable[[Session, ModelOwner], list[Model]],
) -> list[Model]:
    """`register`'s models in an empty store; else the ownerless first demo model given to
    `owner_user_id`, and nothing registered.

    Callers hold the store's preparation lock (`pipeline.core.store_lock`), so one process
    seeds at a time. Should two still seed one empty store together (a PostgreSQL lock session
    cut by a proxy or an operator), the second fails on the unique model name: its transaction
    is rolled back and the first one's models stand, as if it had found them (or, once the
    first has committed, it finds them by name and registers them again, unchanged).
    """
    try:
        return _seed_once(db, owner_user_id, register)
    except IntegrityError:
        with db.session() as session:
            if session.scalar(select(func.count()).select_from(Model)):
                return []
        raise


def _seed_once(
    db: Database,
    owner_user_id: str,
    register: Callable[[Session, ModelOwner], list[Model]],
) -> list[Model]:
    with db.session() as session:
        if session.scalar(select(func.count()).select_from(Model)):
            demo = session.scalar(
                select(Model).where(
                    Model.name == demo_definition().name,
                    Model.owner_user_id.is_(None),
                    Model.owner_org_id.is_(None),
                )
            )
            if demo is not None:
                set_model_owner(demo, ModelOwner(user_id=owner_user_id))
            return []
        return register(session, ModelOwner(user_id=owner_user_id))


def allocate_version(db: Database, model_id: int) -> tuple[int, str]:
    """Hand out the model's next dataset version number in its own short transaction.

    Versions are monotonic per model; a failed write leaves a gap rather than reusing a
    number whose object may already have been announced to the arrival queue. The one
    statement commits on its own: every contribution to a model updates this row, and in a
    session its lock lasted until the thread came back to send COMMIT, which under 50
    concurrent contributors (one process, one interpreter lock) queued requests behind it for
    up to a second, in no fair order (bench/load.py, issue 19).
    """
    if not 1 <= model_id <= INT32_MAX:
        raise NotFound(f"model {model_id} not found")
    with db.autocommit() as conn:
        number = conn.execute(
            update(Model)
            .where(Model.id == model_id)
            .values(last_version=Model.last_version + 1)
            .returning(Model.last_version)
        ).scalar_one_or_none()
    if number is None:
        raise NotFound(f"model {model_id} not found")
    return number, format_version(number)


def format_version(number: int) -> str:
    return f"v{number}"
