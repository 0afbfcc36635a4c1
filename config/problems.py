"""Bad settings, said the way the user wrote them.

pydantic's own report names the Python field (``semantic_precision``), an error code and a
documentation URL; the person who typed ``DEJA_SEMANTIC_PRECISION=1.5`` needs the variable they
wrote, the value, and what would have been accepted. :func:`problems_from` turns any pydantic or
pydantic-settings failure on the settings model into :class:`Problem` rows, generic over every
field (its constraints and type come from the model), and :func:`render` prints them, one line
each. ``deja serve`` exits 2 with that text.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

__all__ = [
    "Problem",
    "Sources",
    "allowed_for",
    "problems_from",
    "render",
    "shown",
    "unknown_setting",
]

ENV_PREFIX = "DEJA_"


@dataclass(frozen=True, slots=True)
class Problem:
    """One setting that cannot be used: ``name`` as the user wrote it (``DEJA_PORT``,
    ``port (in deja.yaml)``, ``--port``), the ``value`` given (None: not shown), what is
    ``allowed``."""

    name: str
    value: str | None
    allowed: str


@dataclass(frozen=True, slots=True)
class Sources:
    """Where each setting came from, so a problem names what the user typed."""

    environ: Mapping[str, str]
    yaml_keys: frozenset[str] = frozenset()
    yaml_path: str | None = None
    flags: frozenset[str] = frozenset()

    def name_of(self, field: str) -> str:
        """The spelling of ``field`` the user wrote: a flag, an env var, a YAML key."""
        if field in self.flags:
            return f"--{field.replace('_', '-')}"
        wanted = f"{ENV_PREFIX}{field}".upper()
        for key in self.environ:
            if key.upper() == wanted:
                return key
        if field in self.yaml_keys:
            return f"{field} (in {self.yaml_path})"
        return wanted

    def raw(self, field: str) -> str | None:
        """The environment's text for ``field`` when the environment is what set it."""
        if field in self.flags:
            return None
        wanted = f"{ENV_PREFIX}{field}".upper()
        for key, value in self.environ.items():
            if key.upper() == wanted:
                return value
        return None


def render(problems: Sequence[Problem], header: str = "deja: bad setting") -> str:
    """``header``, then per problem three lines: the setting, its value, what is allowed."""
    lines = [header if len(problems) < 2 else f"{header}s ({len(problems)})"]
    for p in problems:
        lines.append(f"  setting: {p.name}")
        if p.value is not None:
            lines.append(f"  value:   {p.value}")
        lines.append(f"  allowed: {p.allowed}")
    return "\n".join(lines)


def shown(value: Any) -> str:
    """A value as the user typed it (strings bare unless blank-padded, the rest as JSON)."""
    if isinstance(value, str):
        return value if value and value == value.strip() else repr(value)
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _base_type(annotation: Any) -> Any:
    """``float | None`` -> ``float``; anything else unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _bounds(info: FieldInfo) -> str:
    parts = []
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Ge):
            parts.append(f">= {meta.ge}")
        elif isinstance(meta, annotated_types.Gt):
            parts.append(f"> {meta.gt}")
        elif isinstance(meta, annotated_types.Le):
            parts.append(f"<= {meta.le}")
        elif isinstance(meta, annotated_types.Lt):
            parts.append(f"< {meta.lt}")
    return " and ".join(parts)


def allowed_for(info: FieldInfo) -> str:
    """What a field accepts, from its type and constraints (``a number >= 0.5 and <= 1``)."""
    kind = _base_type(info.annotation)
    optional = kind is not info.annotation
    if typing.get_origin(kind) is typing.Literal:
        text = "one of " + ", ".join(str(a) for a in typing.get_args(kind))
    elif kind is bool:
        text = "true or false (also 1/0, yes/no, on/off)"
    elif kind is int:
        text = "an integer"
    elif kind is float:
        text = "a number"
    elif typing.get_origin(kind) in (dict, Mapping):
        text = 'a JSON object (in the environment), e.g. {"name": "value"}'
    elif typing.get_origin(kind) in (list, tuple, set, frozenset, Sequence):
        text = 'a JSON list (in the environment), e.g. ["a", "b"]'
    else:
        text = f"a {getattr(kind, '__name__', str(kind))}"
    bounds = _bounds(info)
    if bounds:
        text = f"{text} {bounds}"
    return f"{text}, or unset" if optional and info.default is None else text


def unknown_setting(key: str, known: Iterable[str]) -> str:
    """What to say about a key no setting has, with the nearest known name."""
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"a known setting (deja serve --print-config lists them){hint}"


def _field_allowed(model: type[BaseModel], field: str, error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    message = str(error.get("msg", ""))
    info = model.model_fields.get(field)
    if kind == "extra_forbidden":
        return unknown_setting(field, model.model_fields)
    if kind in ("value_error", "assertion_error") or info is None:
        return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return allowed_for(info)


_SETTINGS_FIELD = re.compile(r'field "([^"]+)"')


def problems_from(exc: Exception, model: type[BaseModel], sources: Sources) -> list[Problem]:
    """The rows for a failure building ``model``: a pydantic ``ValidationError`` (one row per
    error), or pydantic-settings' ``SettingsError`` for an env value that is not JSON."""
    if isinstance(exc, ValidationError):
        return list(_validation_problems(exc.errors(include_url=False), model, sources))
    match = _SETTINGS_FIELD.search(str(exc))
    cause = exc.__cause__
    if match is None:
        return [Problem("settings", None, str(exc))]
    field = match.group(1)
    info = model.model_fields.get(field)
    reason = f" (not valid JSON: {cause})" if isinstance(cause, json.JSONDecodeError) else ""
    allowed = allowed_for(info) if info is not None else "valid JSON"
    return [Problem(sources.name_of(field), shown(sources.raw(field)), allowed + reason)]


def _validation_problems(
    errors: Iterable[Mapping[str, Any]], model: type[BaseModel], sources: Sources
) -> Iterable[Problem]:
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        if not loc:  # a check across fields (a model validator): no single value to show
            yield Problem("settings (checked together)", None, _field_allowed(model, "", error))
            continue
        field = loc[0]
        name = sources.name_of(field)
        if len(loc) > 1:
            name += f" [{'.'.join(loc[1:])}]"
        raw = sources.raw(field)
        value = shown(raw if raw is not None else error.get("input"))
        yield Problem(name, value, _field_allowed(model, field, error))
