"""The base of the Dagster resources: the deployment's settings, which a run cannot change.

A resource's config fields are what a run's config may set, and a run's config is whatever the
caller of Dagster's GraphQL sends (the Launchpad, a script, a web page that reached the
webserver). So the settings are not config fields: they come from the environment of the
process (production `Definitions` use the resources with no arguments) or, in tests and
benchmarks, from a `Settings` object pinned in code with `from_settings(settings, **extra)`.

Run config may set only `RUN_CONFIGURABLE`: settings that change what a run logs, never what it
pays, where it stores, how it isolates owner code or which credentials it uses. Any other
setting in a run's config is refused when the run is launched (Dagster's config check:
`Received unexpected config entry "reward_max_tokens_per_contribution"`), before a step runs.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, ClassVar, Self

import dagster as dg
from pydantic import create_model

from pipeline.core.config import Settings, load_settings


class LogLevel(enum.Enum):
    """PIPELINE_LOG_LEVEL's values, as a choice Dagster checks when a run is launched."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


# The settings a run's config may set (the Launchpad's `resources: marketplace: config:`).
RUN_CONFIGURABLE: dict[str, Any] = {"pipeline_log_level": (LogLevel | None, None)}


class _SettingsResourceBase(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The deployment's settings (the environment, or pinned in code); see the module docstring."""

    # Set on the subclass `from_settings` makes; None: the environment of this process.
    pinned_settings: ClassVar[Settings | None] = None

    @classmethod
    def from_settings(cls, settings: Settings, **extra: Any) -> Self:
        """This resource on `settings` (with `extra` settings over them), fixed in code.

        The pins live on a subclass, not in config fields, so no run config can reach them;
        Dagster rebuilds a resource from its class, so every copy of it keeps them.
        """
        own = {name: value for name, value in extra.items() if name in cls.model_fields}
        changed = {name: value for name, value in extra.items() if name not in own}
        if changed:
            settings = load_settings(**{**dict(settings), **changed})
        pinned: type[Self] = type(cls.__name__, (cls,), {"__module__": cls.__module__})
        pinned.pinned_settings = settings
        return pinned(**own)

    def settings(self) -> Settings:
        """The deployment's settings with what the run's config may set over them."""
        from_run = {name: getattr(self, name) for name in RUN_CONFIGURABLE}
        from_run = {name: value.value for name, value in from_run.items() if value is not None}
        base = type(self).pinned_settings
        if base is None:
            return load_settings(**from_run)
        return load_settings(**{**dict(base), **from_run}) if from_run else base


if TYPE_CHECKING:
    # The checker sees the methods; the run-configurable fields are read by name.
    SettingsResource = _SettingsResourceBase
else:
    SettingsResource = create_model(
        "SettingsResource",
        __base__=_SettingsResourceBase,
        __module__=__name__,
        __doc__=_SettingsResourceBase.__doc__,
        **RUN_CONFIGURABLE,
    )
