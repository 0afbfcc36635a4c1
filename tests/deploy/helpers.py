"""Shared by the deploy tests: the metric contract, a PromQL name extractor, file loaders."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
PROMETHEUS_DIR = DEPLOY / "prometheus"
RULES_DIR = PROMETHEUS_DIR / "rules"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "deja.json"
K8S = DEPLOY / "k8s"

PROMETHEUS_INSTALL = (
    "apt-get install -y --no-install-recommends prometheus "
    "(Debian's package: promtool and prometheus)"
)

#: Every DEJA_* environment variable the gateway reads.
SETTINGS_ENV = {f"DEJA_{name.upper()}" for name in Settings.model_fields}

# --- the metric contract ---------------------------------------------------------------------

CACHE = {"exact", "semantic", "miss", "bypass", "off"}
LAYER = {"exact", "semantic"}


@dataclass(frozen=True)
class Metric:
    kind: str  # counter | gauge | histogram
    labels: dict[str, set[str] | None]  # label -> allowed values (None: any)


#: The gateway's metrics, by family name (counters without the _total suffix), as agreed with
#: the observability issue. Dashboards and alert rules may use only these and vllm:* names.
DEJA_METRICS: dict[str, Metric] = {
    "deja_requests": Metric(
        "counter", {"route": {"chat", "completion"}, "cache": CACHE, "tenant": None}
    ),
    "deja_request_duration_seconds": Metric(
        "histogram", {"route": {"chat", "completion"}, "cache": CACHE}
    ),
    "deja_cache_lookup_duration_seconds": Metric("histogram", {"layer": LAYER}),
    "deja_embedding_duration_seconds": Metric("histogram", {}),
    "deja_upstream_ttfb_seconds": Metric("histogram", {"replica": None}),
    "deja_semantic_similarity": Metric("histogram", {}),
    "deja_semantic_threshold": Metric("gauge", {}),
    "deja_upstream_requests": Metric("counter", {"replica": None, "status": None}),
    "deja_replica_healthy": Metric("gauge", {"replica": None}),
    "deja_replica_breaker_open": Metric("gauge", {"replica": None}),
    "deja_replica_in_flight": Metric("gauge", {"replica": None}),
    "deja_routing_decisions": Metric(
        "counter",
        {
            "policy": {"prefix", "least_loaded", "round_robin"},
            "reason": {
                "home",
                "spill",
                "failover",
                "no_prefix",
                "least_loaded",
                "round_robin",
                "resident",
            },
        },
    ),
    "deja_cache_entries": Metric("gauge", {"layer": LAYER}),
    "deja_cached_completion_tokens": Metric("counter", {}),
    "deja_saved_model_seconds": Metric("counter", {}),
    "deja_bypass": Metric("counter", {"reason": None}),
    "deja_store_errors": Metric("counter", {"layer": LAYER}),
    "deja_semantic_errors": Metric("counter", {"kind": {"timeout", "embedder", "store"}}),
    "deja_semantic_orphans": Metric("counter", {}),
    "deja_admin_actions": Metric("counter", {"action": None}),
    "deja_corpus_chunks_ingested": Metric("counter", {"corpus": None}),
    "deja_corpus_documents": Metric(
        "counter",
        {"corpus": None, "action": {"added", "updated", "unchanged", "failed", "removed"}},
    ),
    "deja_corpus_invalidated": Metric("counter", {"corpus": None}),
}

#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
#: Series Prometheus itself writes.
BUILTIN = {"up"}


def sample_names() -> dict[str, tuple[str, Metric]]:
    """Sample name (as written in PromQL) -> (family, metric)."""
    names: dict[str, tuple[str, Metric]] = {}
    for family, metric in DEJA_METRICS.items():
        if metric.kind == "counter":
            names[f"{family}_total"] = (family, metric)
        elif metric.kind == "histogram":
            for suffix in ("_bucket", "_count", "_sum"):
                names[family + suffix] = (family, metric)
        else:
            names[family] = (family, metric)
    return names


# --- PromQL -----------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_SELECTOR = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^{}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "Inf", "NaN"}


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value)


def selectors(expr: str) -> list[Selector]:
    """The series selectors of a PromQL expression: metric names with their label matchers.

    A small scanner, not a parser: it knows string literals, ``{...}`` matchers, grouping
    clauses, range/offset brackets and function calls, which is all the expressions in deploy/
    use. A selector without a metric name (``{__name__=...}``) is reported with name "".
    """
    found: list[Selector] = []
    # Matchers first (they hold the only string literals that matter), then blank them out.
    text = expr
    for match in _SELECTOR.finditer(text):
        name = match.group(1) or ""
        if name in _KEYWORDS or name in {"by", "without", "on", "ignoring"}:
            name = ""
        matchers = tuple(
            (label, op, value) for label, op, value in _MATCHER.findall(match.group(2))
        )
        found.append(Selector(name, matchers))
    text = _SELECTOR.sub(" ", text)
    text = _STRING.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    for match in _IDENT.finditer(text):
        ident = match.group(1)
        rest = text[match.end() :].lstrip()
        if ident in _KEYWORDS or rest.startswith("("):
            continue
        found.append(Selector(ident, ()))
    return found


def contract_violations(expr: str, extra_names: frozenset[str] = frozenset()) -> list[str]:
    """What in ``expr`` is not in the contract: unknown metric names, labels or label values."""
    known = sample_names()
    problems = []
    sels = selectors(expr)
    if not any(s.name for s in sels):
        problems.append(f"no metric name found in {expr!r}")
    for sel in sels:
        if not sel.name:
            problems.append(f"selector without a metric name in {expr!r}")
            continue
        if sel.name.startswith("vllm:") or sel.name in BUILTIN or sel.name in extra_names:
            continue
        if sel.name not in known:
            problems.append(f"{sel.name} is not a contract metric (in {expr!r})")
            continue
        _family, metric = known[sel.name]
        allowed = dict(metric.labels)
        if sel.name.endswith("_bucket") and metric.kind == "histogram":
            allowed["le"] = None
        for label, op, value in sel.matchers:
            if label in TARGET_LABELS:
                continue
            if label not in allowed:
                problems.append(f"{sel.name} has no label {label!r} (in {expr!r})")
                continue
            values = allowed[label]
            if values is None or op in ("!=", "!~"):
                continue
            wanted = value.split("|") if op == "=~" else [value]
            for one in wanted:
                if one not in values:
                    problems.append(f"{sel.name}{{{label}}} is never {one!r} (in {expr!r})")
    return problems


GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
}


def grafana_to_promql(expr: str) -> str:
    """Replace the Grafana variables a dashboard query may use by plain durations."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


# --- files ------------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_yaml_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard_panels(dashboard)
        for target in panel.get("targets", [])
    ]


def alert_rules() -> list[dict[str, Any]]:
    rules = []
    for path in sorted(RULES_DIR.glob("*.yml")):
        for group in load_yaml(path)["groups"]:
            rules.extend(group["rules"])
    return rules


_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any) -> Any:
    """Compose variable interpolation with an empty environment: ``${X:-d}`` -> d,
    ``${X:?msg}`` -> ``<X>`` (a required value), ``${X}`` -> ''."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, op, arg = match.groups()
            if op in (":-", "-"):
                return str(arg)
            if op in (":?", "?"):
                return f"<{name}>"
            return ""

        return _INTERPOLATION.sub(sub, value.replace("$$", "\x00")).replace("\x00", "$")
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def load_compose() -> dict[str, Any]:
    data: dict[str, Any] = interpolate(load_yaml(COMPOSE_FILE))
    return data


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def active_services(compose: dict[str, Any], profiles: set[str]) -> dict[str, dict[str, Any]]:
    """The services `docker compose --profile P ... up` starts for the profiles given."""
    return {
        name: service
        for name, service in compose["services"].items()
        if not service.get("profiles") or set(service["profiles"]) & profiles
    }


def resolvable_names(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Host name -> service, for service names and network aliases."""
    names = {name: name for name in services}
    for name, service in services.items():
        networks = service.get("networks") or {}
        if isinstance(networks, dict):
            for net in networks.values():
                for alias in (net or {}).get("aliases", []):
                    names[alias] = name
    return names


def host_port(url: str, default_port: int | None = None) -> tuple[str, int | None]:
    parts = urlsplit(url.split(";")[0])
    return parts.hostname or "", parts.port or default_port


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} is not installed: {PROMETHEUS_INSTALL}")
    return path
