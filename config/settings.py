"""Settings: one pydantic-settings model, ``DEJA_*`` environment variables mirroring YAML keys.

Precedence, highest first: explicit overrides (CLI flags) > environment (``DEJA_*``) > the YAML
file (``--config`` / ``DEJA_CONFIG``) > defaults.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from config.caching import CacheSettings
from config.problems import Problem, Sources, problems_from, render, shown, unknown_setting
from config.rag import RagSettings
from config.replicas import UpstreamSettings
from config.values import Bytes, NonNegativeFloat, PositiveFloat

ENV_PREFIX = "DEJA_"
MASK = "********"


class ConfigError(ValueError):
    """The configuration cannot be used (bad YAML, unknown key, invalid value).

    Raised at start-up and by the CLI, never on a request; ``deja.errors`` re-exports it.
    ``problems`` names each bad setting as the user wrote it (:mod:`config.problems`); the
    message is their rendering, so ``str(exc)`` is what to print.
    """

    def __init__(self, message: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)

    @classmethod
    def of(cls, problems: Sequence[Problem]) -> ConfigError:
        return cls(render(problems), problems)


class Settings(BaseSettings, UpstreamSettings, CacheSettings, RagSettings):
    """Effective configuration of one gateway process: one model, its fields grouped by concern
    in sections (``config.replicas``, ``config.caching``, ``config.rag``) and here (the server,
    observability, secrets)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)
    _sources: Sources | None = PrivateAttr(None)

    # --- server -------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address the gateway listens on.")
    port: int = Field(8080, ge=0, le=65535, description="Port the gateway listens on.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level of the gateway's own logger."
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Worker processes sharing the listening socket. Above 1, every store must "
        "be shared (Redis, a Qdrant server): embedded stores are refused at start-up.",
    )
    api_docs: bool = Field(
        False,
        description="Serve the OpenAPI schema (/openapi.json) and its Swagger page (/docs; the "
        "page loads Swagger UI from a CDN in the browser). Both follow this one setting: off, "
        "both answer 404 naming it.",
    )
    header_timeout_seconds: PositiveFloat = Field(
        10.0,
        description="A connection must send a request's headers within this long of opening "
        "(or of its previous response), else it is closed: slow clients cannot hold it.",
    )
    max_connections: int = Field(
        1000,
        ge=16,
        description="Open client connections at most (kept 256 below the open-file limit, "
        "which deja serve raises to its hard limit); at the cap a new connection evicts the "
        "one waiting longest for its headers.",
    )
    max_body_bytes: Bytes = Field(
        4 * 1024 * 1024, description="Largest request body accepted; larger gets 413."
    )

    # --- observability -------------------------------------------------------------------------
    access_log: bool = Field(
        True,
        description="One JSON line per request on the deja.access logger (ids, tenant, "
        "outcome, similarity, replica, latency; never prompts or keys).",
    )
    models_require_key: bool = Field(
        False,
        description="GET /v1/models needs a client key (a keys file must be set) like the "
        "generation routes; off: anyone who reaches the port may list the models.",
    )
    metrics_tenant_label: bool = Field(
        False,
        description="Add a tenant label to deja_requests_total (bounded by your tenant count).",
    )
    console_sample_seconds: PositiveFloat = Field(
        10.0,
        description="How often the console's traffic history (/admin/timeline) takes a point; "
        "the last 360 points are kept.",
    )
    langfuse_host: str | None = Field(
        None,
        description="Langfuse base URL (https://cloud.langfuse.com, or your own): every request "
        "becomes a trace there, sent over OTLP/HTTP to {host}/api/public/otel/v1/traces in "
        "batches, off the request path. Needs langfuse_public_key and langfuse_secret_key.",
    )
    langfuse_public_key: str | None = Field(
        None, description="The Langfuse project's public key (pk-lf-...)."
    )

    # --- secrets (masked in --print-config) ---------------------------------------------------
    keys_file: Path | None = Field(
        None,
        description="YAML file of tenants and their key hashes (`deja keys add`); unset = open "
        "gateway, one `default` tenant.",
    )
    keys_reload_seconds: NonNegativeFloat = Field(
        2.0,
        description="How often the keys file is checked for changes (a revoked key stops "
        "working within this); 0: only on SIGHUP.",
    )
    admin_key: SecretStr | None = Field(
        None,
        description="Bearer key for /admin. Unset: /admin is open (logged loudly at start-up).",
    )
    metrics_key: SecretStr | None = Field(
        None,
        description="Bearer key GET /metrics requires (the admin key works too); unset: open, "
        "as Prometheus scrapers expect on a private network.",
    )
    replica_api_key: SecretStr | None = Field(
        None, description="Bearer key sent to the replicas (vLLM --api-key), if they need one."
    )
    langfuse_secret_key: SecretStr | None = Field(
        None, description="The Langfuse project's secret key (sk-lf-...)."
    )

    @model_validator(mode="after")
    def _check_langfuse(self) -> Settings:
        given = [self.langfuse_host, self.langfuse_public_key, self.langfuse_secret_key]
        if any(v is not None for v in given) and not all(v is not None for v in given):
            raise ValueError(
                "Langfuse needs all three of langfuse_host, langfuse_public_key and "
                "langfuse_secret_key"
            )
        if self.langfuse_host is not None:
            parts = urlsplit(self.langfuse_host)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"langfuse_host must be http(s)://host, got {self.langfuse_host!r}"
                )
        return self

    @field_validator("admin_key", "replica_api_key", "qdrant_api_key", "langfuse_secret_key")
    @classmethod
    def _no_empty_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("a key, when set, must not be empty")
        return value

    def written_as(self, field: str) -> str:
        """The name the user gave ``field`` (``DEJA_SEMANTIC_PRECISION``, a YAML key, a flag),
        for errors found after loading (e.g. a precision target the calibration table lacks)."""
        sources = self._sources or Sources(os.environ)
        return sources.name_of(field)

    def masked(self) -> dict[str, Any]:
        """The effective config as plain data, with secrets and URL passwords masked."""
        data = self.model_dump(mode="json")
        for name, field in type(self).model_fields.items():
            if field.annotation is not None and "SecretStr" in str(field.annotation):
                data[name] = MASK if data[name] is not None else None
        if self.redis_url:
            data["redis_url"] = mask_url(self.redis_url)
        return data


def mask_url(url: str) -> str:
    """Replace the password of ``scheme://user:password@host`` with a mask."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:{MASK}@{parts.hostname}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _read_yaml(path: Path) -> dict[str, Any]:
    where = f"config file {path}"
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError.of(
            [Problem(where, None, f"a readable file ({exc.strerror or exc})")]
        ) from None
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError.of(
            [Problem(where, None, f"valid YAML (the parser says: {reason})")]
        ) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError.of([Problem(where, None, "a mapping of setting: value")])
    return loaded


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Build the effective settings: overrides > ``DEJA_*`` env > YAML file > defaults.

    Every failure is a :class:`ConfigError` naming each bad setting as the user wrote it."""
    path = config_file or os.environ.get(f"{ENV_PREFIX}CONFIG")
    from_file = _read_yaml(Path(path)) if path else {}
    env_names = {name.upper() for name in os.environ}
    init = {
        key: value
        for key, value in from_file.items()
        if f"{ENV_PREFIX}{key}".upper() not in env_names
    }
    given = {key: value for key, value in overrides.items() if value is not None}
    init.update(given)
    sources = Sources(
        environ={k: v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)},
        yaml_keys=frozenset(init) - set(given),
        yaml_path=str(path),
        flags=frozenset(given),
    )
    fields = Settings.model_fields
    unknown = sorted(set(from_file) - set(fields))
    if unknown:
        raise ConfigError.of(
            [
                Problem(sources.name_of(k), shown(from_file[k]), unknown_setting(k, fields))
                for k in unknown
            ]
        )
    try:
        settings = Settings(**init)
    except (ValueError, SettingsError) as exc:
        raise ConfigError.of(problems_from(exc, Settings, sources)) from None
    settings._sources = sources
    return settings
