"""The base of the Dagster resources: the settings object from the environment, with pins.

Every field left unset comes from the environment, so production `Definitions` use the resources
with no arguments; tests pin a store with `from_settings(settings, **extra)`.

The pinnable fields are derived from `Settings` itself: every setting except the secrets, as an
optional field of the config type Dagster can hold (paths and choices as strings). A new
setting is pinnable with no change here; its value is checked where the settings are built
(`load_settings`), which names the variable when it is bad.
"""

from __future__ import annotations

from pathlib import Path
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Any, Literal, Self, Union, get_args, get_origin

import dagster as dg
from pydantic import SecretStr, create_model
from pydantic.fields import FieldInfo

from pipeline.core.config import Settings, load_settings

# What Dagster's config system holds as is; Settings types outside it are mapped or refused.
CONFIG_SCALARS = (bool, int, float, str)


def _config_type(name: str, field: FieldInfo) -> Any:
    """The Dagster config type of a setting, or None for a setting that must not be pinned."""
    annotation = field.annotation
    members = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ()
    if SecretStr in (annotation, *members):
        # Resource config is shown in the Dagster UI; secrets come from the environment only.
        return None
    inner = next((m for m in members if m is not NoneType), annotation)
    if inner is Path or get_origin(inner) is Literal:
        return str
    if inner in CONFIG_SCALARS or (get_origin(inner) is list and get_args(inner) == (str,)):
        return inner
    raise TypeError(f"setting {name} has type {annotation!r}: map it to a Dagster config type")


def _pinnable_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, field in Settings.model_fields.items():
        config_type = _config_type(name, field)
        if config_type is not None:
            fields[name] = (config_type | None, None)
    return fields


PIN_FIELDS = _pinnable_fields()
# Settings a deployment (or a test) may pin on a resource instead of the environment.
PINNABLE = tuple(PIN_FIELDS)


class _SettingsResourceBase(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings overrides (unset: from the environment, spec §8 defaults)."""

    @classmethod
    def from_settings(cls, settings: Settings, **extra: Any) -> Self:
        values: dict[str, Any] = {}
        for name in PINNABLE:
            value = getattr(settings, name)
            values[name] = str(value) if isinstance(value, Path) else value
        values["database_url"] = settings.resolved_database_url
        values.update(extra)
        return cls(**values)

    def settings(self) -> Settings:
        """The settings of this resource: the environment, then the pinned fields over it."""
        pinned = {name: getattr(self, name) for name in PINNABLE}
        return load_settings(**{k: v for k, v in pinned.items() if v is not None})


if TYPE_CHECKING:
    # The checker sees the methods; the pinned fields are read by name (PINNABLE).
    SettingsResource = _SettingsResourceBase
else:
    SettingsResource = create_model(
        "SettingsResource",
        __base__=_SettingsResourceBase,
        __module__=__name__,
        __doc__=_SettingsResourceBase.__doc__,
        **PIN_FIELDS,
    )
