"""Client keys and tenants.

The keys file (``DEJA_KEYS_FILE``, YAML) maps tenants to the sha256 hashes of their API keys and
their own cache settings; raw keys are never stored. A presented key is hashed, then looked up by
its hash and confirmed with ``hmac.compare_digest`` — no comparison ever touches raw key bytes,
and keys are never logged. With no keys file the gateway is open, as the single ``default``
tenant; a keys file is authoritative, so one that holds no keys lets no client in (revoking the
last key must not open the gateway). ``deja.tenancy.keywatch`` reloads the file while the
gateway runs.

```yaml
tenants:
  acme:
    key_hashes: ["<sha256 hex of the key>"]
    cache: true          # optional: this tenant's cache on/off
    ttl_seconds: 3600    # optional: default TTL of its entries
    threshold: 0.95      # optional: its θ (admin overrides win)
    rate_limit_rpm: 600  # optional: requests per minute per key
```
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from deja.errors import AuthenticationError, ConfigError

DEFAULT_TENANT = "default"


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Tenant:
    """One application, with its own cache settings (None = the gateway's default)."""

    name: str
    cache: bool | None = None
    ttl_seconds: int | None = None
    threshold: float | None = None
    rate_limit_rpm: int | None = None
    #: The corpus this tenant's requests retrieve from when they name none.
    corpus: str | None = None
    #: When retrieval fails: "answer" without context or "error" (None: the gateway's setting).
    rag_on_failure: Literal["answer", "error"] | None = None
    #: Opt out of the per-tenant vLLM ``cache_salt``: the tenant's prompts may share cached
    #: blocks with other tenants' (a deliberately shared system prompt).
    share_prefix_cache: bool = False
    #: Judged paraphrases of this tenant's questions become aliases (None: the gateway's
    #: ``semantic_promote``).
    promote: bool | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the tenant, and an id of the key (its hash) for rate limiting."""

    tenant: Tenant
    key_id: str


class KeyRing:
    """Key hash → tenant. Empty and not ``closed`` means open mode (every caller is the default
    tenant); a ring read from a keys file is ``closed``: with no keys, nobody gets in."""

    def __init__(
        self, tenants: dict[str, tuple[Tenant, list[str]]] | None = None, *, closed: bool = False
    ) -> None:
        self.closed = closed
        self._by_hash: dict[str, tuple[str, Tenant]] = {}
        self.tenants: dict[str, Tenant] = {}
        for name, (tenant, hashes) in (tenants or {}).items():
            self.tenants[name] = tenant
            for digest in hashes:
                self._by_hash[digest.lower()] = (digest.lower(), tenant)
        self.default = Tenant(DEFAULT_TENANT)

    @property
    def open(self) -> bool:
        return not self._by_hash and not self.closed

    @property
    def key_count(self) -> int:
        return len(self._by_hash)

    def authenticate(self, authorization: str | None) -> Caller:
        """The caller behind an ``Authorization`` header; 401 for a missing or unknown key."""
        token = bearer_token(authorization)
        if self.open:
            return Caller(self.default, key_hash(token) if token else "anonymous")
        if not token:
            raise AuthenticationError("Missing API key: send it as 'Authorization: Bearer <key>'.")
        digest = key_hash(token)
        # The lookup is by the key's sha256, never by the key: timing can at most reveal
        # something about a hash, which does not lead back to any key.
        found = self._by_hash.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            raise AuthenticationError("Incorrect API key provided.")
        return Caller(found[1], digest)


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or ""."""
    if not authorization:
        return ""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


_KEY_HASH = re.compile(r"[0-9a-f]{64}")


def read_keys_document(path: Path, *, missing_ok: bool = False) -> tuple[dict[str, Any], str]:
    """The keys file's YAML document, shape-checked, and its text (``({"tenants": {}}, "")``
    for a missing file when ``missing_ok``). The one parser of the keys file: the gateway and
    ``deja keys`` both read it here. Raises ``ConfigError`` saying what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if missing_ok:
            return {"tenants": {}}, ""
        raise ConfigError(
            f"keys file {path} does not exist (create it with `deja keys add TENANT`)"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"keys file {path} is not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read keys file {path}: {exc.strerror or exc}") from exc
    return parse_keys_document(text, path), text


def parse_keys_document(text: str, path: Path) -> dict[str, Any]:
    """``text`` (the keys file at ``path``, named in errors) as a shape-checked document."""
    try:
        doc: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"keys file {path} is not valid YAML: {exc}") from exc
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise ConfigError(f"keys file {path}: the top level must be a mapping")
    tenants = doc.get("tenants")
    doc["tenants"] = tenants = {} if tenants is None else tenants
    if not isinstance(tenants, dict):
        raise ConfigError(f"keys file {path}: 'tenants' must be a mapping of tenant -> settings")
    for name, entry in tenants.items():
        if entry is not None and not isinstance(entry, dict):
            raise ConfigError(f"keys file {path}: tenant {name!r} must be a mapping")
        hashes = (entry or {}).get("key_hashes")
        if hashes is None:
            continue
        if not isinstance(hashes, list):
            raise ConfigError(f"keys file {path}: {name}.key_hashes must be a list")
        if not all(_KEY_HASH.fullmatch(str(h).lower()) for h in hashes):
            raise ConfigError(f"keys file {path}: {name}.key_hashes must be sha256 hex digests")
    return doc


def load_keys(path: Path | None) -> KeyRing:
    """Read the keys file; a missing setting means open mode, a broken file is an error."""
    if path is None:
        return KeyRing()
    doc, _ = read_keys_document(path)
    return keyring_from_document(doc, path)


def keyring_from_document(doc: dict[str, Any], path: Path) -> KeyRing:
    """The (closed) ring of a document ``parse_keys_document`` accepted."""
    tenants: dict[str, tuple[Tenant, list[str]]] = {}
    for name, spec in doc["tenants"].items():
        spec = spec or {}
        hashes = [str(h) for h in spec.get("key_hashes") or []]
        try:
            tenant = Tenant(
                name=str(name),
                cache=None if spec.get("cache") is None else bool(spec["cache"]),
                ttl_seconds=None if spec.get("ttl_seconds") is None else int(spec["ttl_seconds"]),
                threshold=None if spec.get("threshold") is None else float(spec["threshold"]),
                rate_limit_rpm=(
                    None if spec.get("rate_limit_rpm") is None else int(spec["rate_limit_rpm"])
                ),
                corpus=None if spec.get("corpus") is None else str(spec["corpus"]),
                rag_on_failure=_rag_on_failure(spec.get("rag_on_failure")),
                share_prefix_cache=spec.get("share_prefix_cache") is True,
                promote=_optional_bool(spec.get("promote"), "promote"),
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"tenant {name!r} in {path}: {exc}") from exc
        tenants[str(name)] = (tenant, hashes)
    return KeyRing(tenants, closed=True)


def _optional_bool(value: Any, name: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{name} must be true or false, got {value!r}")


def _rag_on_failure(value: Any) -> Literal["answer", "error"] | None:
    if value is None:
        return None
    if value == "answer" or value == "error":
        return value  # type: ignore[no-any-return]
    raise ValueError(f"rag_on_failure must be 'answer' or 'error', got {value!r}")
