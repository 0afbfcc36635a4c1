"""Command-line flags that stand for a setting: ``setting_option("workers")`` is ``--workers``,
with the setting's type, bounds, description and default taken from the settings model, so a
flag and its ``DEJA_*`` variable can never disagree. The flag's default is ``None``: a flag that
was not given leaves the setting to the environment, the YAML file or the model's default."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_args, get_origin

import click

from config.problems import ENV_PREFIX
from config.settings import Settings

__all__ = ["setting_option"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _click_type(name: str) -> click.ParamType[Any] | None:
    field = Settings.model_fields[name]
    if get_origin(field.annotation) is Literal:
        return click.Choice([str(choice) for choice in get_args(field.annotation)])
    if field.annotation is int:
        low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
        high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
        return click.IntRange(low, high)
    return None


def setting_option(name: str) -> Callable[[_F], _F]:
    """``--name`` (underscores as dashes) for the setting ``name``."""
    field = Settings.model_fields[name]
    env = f"{ENV_PREFIX}{name.upper()}"
    default = "" if field.annotation is bool else f", default {field.default}"
    help_text = f"{(field.description or name).rstrip('.')} (env: {env}{default})."
    flag = "--" + name.replace("_", "-")
    if field.annotation is bool:
        return click.option(flag, name, is_flag=True, default=None, help=help_text)
    return click.option(flag, name, type=_click_type(name), default=None, help=help_text)
