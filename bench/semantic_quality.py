"""Semantic-cache quality THROUGH THE RUNNING GATEWAY, on labelled Quora question pairs.

Real ``deja serve`` processes on real sockets, in front of a SIMULATED replica (``deja sim``).
For each gateway variant a fresh gateway (its own data dir, an admin key) is started, and:

1. INSERT: every distinct ``a`` of the data is sent once as a chat request with
   ``Cache-Control: no-cache`` (skip the lookup, store the answer: so an ``a`` that is a
   paraphrase of an earlier one is still stored under its own entry). Its ``X-Deja-Entry`` is
   mapped to the ``a`` text; then ``/admin/cache/stats`` is polled until every entry has landed
   in both layers (stores run after the response).
2. QUERY, per setting (set live with ``PUT /admin/threshold``): every ``b`` is sent with
   ``Cache-Control: no-store`` (look up, never store) and classified from ``X-Deja-Cache`` and
   ``X-Deja-Entry`` as ``shared/data/README.md`` defines it:

   * a hit (``exact`` or ``semantic``) served from the row's own ``a`` is right iff the row is a
     ``duplicate``; a hit on a text identical to the query is right; both are *labelled*;
   * a hit on another row's ``a`` is *unjudged* (no label), counted apart;
   * labelled precision = right / labelled hits; duplicate hit rate = duplicate rows served from
     their own ``a`` (or an identical text) / duplicate rows; strict precision = right / all hits
     (unjudged counted wrong: the README's stricter-than-true cache-mode precision).

Variants (``--skip`` any of them):

* ``cosine``: ``DEJA_SEMANTIC_VERIFIER=off`` (cosine alone decides); θ ∈ 0.80 … 0.99.
* ``verifier``: the shipped cross-encoder verifier (θ = the calibration table's cosine floor);
  precision target ∈ 0.80 … 0.97 (``{"precision": {"global": t}}``): measured labelled
  precision against the target, |measured − target|.
* ``judge``: the verifier plus ``DEJA_SEMANTIC_JUDGE=sync`` at target 0.92. The replica is the
  SIMULATOR, which answers judge prompts by a word-overlap rule: its hit rate and precision show
  the MECHANICS only (never a quality claim); its cost, the judge's extra upstream calls and
  tokens per query, comes from ``GET /admin/semantic``.

Every gateway runs with ``DEJA_SEMANTIC_SHADOW_RATE=0`` (no background re-asks),
``DEJA_TEMPORAL_BYPASS=false`` (time-dependent questions are looked up like any other: the data
holds some, and a bypass would be neither a hit nor a miss of the semantic layer; with
``--temporal-bypass`` it stays on, as users run it, and a bypassed pair is a miss) and a lookup
budget of ``--semantic-timeout`` seconds (default 5, instead of 0.25: a lookup that times out
under this benchmark's load would be a plain miss and bias the hit rate down; quality is what is
measured here, not latency). Lookup failures per setting (from ``/metrics``) are reported.

    .venv/bin/python bench/semantic_quality.py [--data PATH] [--concurrency 4] [--limit N]
        [--skip cosine|verifier|judge] [--temporal-bypass]
        [--output bench/results/semantic_quality.json]

Processes are not pinned (the gateway may use both CPUs; nothing here measures time). All
traffic goes to 127.0.0.1. Writes ``bench/results/semantic_quality.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from common import (
    COMMANDS,
    MODEL_CACHE_DIR,
    REPO_ROOT,
    RESULTS_DIR,
    BenchError,
    Proc,
    banner,
    log_dir,
    remove_logs,
    run_guarded,
    run_meta,
    start_gateway,
    start_sim,
    stop_process,
    table,
)

MODEL = "deja-sim-1"
CHAT = "/v1/chat/completions"
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "qqp_dev.jsonl"
SHIPPED_VERIFIER_DIR = REPO_ROOT / "deja" / "models" / "verifier"
THETAS = (0.80, 0.85, 0.90, 0.92, 0.95, 0.97, 0.98, 0.99)
TARGETS = (0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.95, 0.97)
JUDGE_TARGET = 0.92
VARIANTS = ("cosine", "verifier", "judge")
#: How long to wait for the inserted answers (and their vectors) to land.
STORE_WAIT_S = 120.0
#: Tries per request on a transport error (the gateway answering non-200 is not retried).
TRIES = 3
EXAMPLES = 8


class Refused(BenchError):
    """The gateway answered 400 to a setting (a precision target its table never reaches)."""


@dataclass(frozen=True)
class Row:
    a: str
    b: str
    duplicate: bool


@dataclass(frozen=True)
class Answer:
    """What the gateway said about one request."""

    status: int
    cache: str | None
    entry: str | None
    similarity: float | None
    verifier_score: float | None
    error: str | None = None


def load_rows(path: Path, limit: int | None) -> list[Row]:
    rows: list[Row] = []
    with path.open() as handle:
        for line in handle:
            if not line.strip():
                continue
            doc = json.loads(line)
            rows.append(Row(a=doc["a"], b=doc["b"], duplicate=bool(doc["duplicate"])))
            if limit is not None and len(rows) >= limit:
                break
    return rows


def ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def wilson(right: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a proportion ``right / n``."""
    if n == 0:
        return (math.nan, math.nan)
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def header_float(response: httpx.Response, name: str) -> float | None:
    raw = response.headers.get(name)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# HTTP


class Client:
    """Chat requests from a pool of ``concurrency`` threads, one keep-alive client per thread;
    admin calls with the gateway's admin key."""

    def __init__(self, gateway: Proc, admin_key: str, concurrency: int) -> None:
        self.base = gateway.url
        self.admin_headers = {"authorization": f"Bearer {admin_key}"}
        self.concurrency = concurrency
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()
        self.admin = httpx.Client(base_url=self.base, timeout=30.0)

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self.base, timeout=60.0)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def chat(self, text: str, cache_control: str) -> Answer:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}]})
        headers = {"content-type": "application/json", "cache-control": cache_control}
        error = "not sent"
        for attempt in range(TRIES):
            try:
                response = self._client().post(CHAT, content=body, headers=headers)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.2 * (attempt + 1))
                continue
            return Answer(
                status=response.status_code,
                cache=response.headers.get("x-deja-cache"),
                entry=response.headers.get("x-deja-entry"),
                similarity=header_float(response, "x-deja-similarity"),
                verifier_score=header_float(response, "x-deja-verifier-score"),
                error=None if response.status_code == 200 else response.text[:200],
            )
        return Answer(
            status=0, cache=None, entry=None, similarity=None, verifier_score=None, error=error
        )

    def chat_all(self, texts: Sequence[str], cache_control: str) -> list[Answer]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda t: self.chat(t, cache_control), texts))

    def get(self, path: str) -> Any:
        response = self.admin.get(path, headers=self.admin_headers)
        if response.status_code != 200:
            raise BenchError(f"GET {path}: HTTP {response.status_code} {response.text[:300]}")
        return response.json()

    def put_threshold(self, change: dict[str, Any]) -> dict[str, Any]:
        response = self.admin.put("/admin/threshold", json=change, headers=self.admin_headers)
        if response.status_code == 400:
            raise Refused(response.json()["error"]["message"])
        if response.status_code != 200:
            raise BenchError(
                f"PUT /admin/threshold {change}: HTTP {response.status_code} {response.text[:300]}"
            )
        result: dict[str, Any] = response.json()
        return result

    def semantic_errors(self) -> Counter[str]:
        """``deja_semantic_errors_total`` by kind, from ``/metrics``."""
        text = self.admin.get("/metrics").text
        out: Counter[str] = Counter()
        for line in text.splitlines():
            if line.startswith("deja_semantic_errors_total{"):
                labels, _, value = line.rpartition(" ")
                kind = labels.split('kind="', 1)[-1].split('"', 1)[0]
                out[kind] += int(float(value))
        return out

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self.admin.close()


# --------------------------------------------------------------------------------------------
# insert and classify


def insert(client: Client, texts: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Store every text (``no-cache``: no lookup, store); entry id → text."""
    started = time.monotonic()
    answers = client.chat_all(texts, "no-cache")
    entries: dict[str, str] = {}
    failed: list[dict[str, Any]] = []
    outcomes: Counter[str] = Counter()
    for text, answer in zip(texts, answers, strict=True):
        outcomes[f"{answer.status} {answer.cache}"] += 1
        if answer.status != 200 or answer.cache != "miss" or answer.entry is None:
            failed.append(
                {
                    "text": text,
                    "status": answer.status,
                    "cache": answer.cache,
                    "error": answer.error,
                }
            )
            continue
        if answer.entry in entries:
            failed.append(
                {"text": text, "error": f"entry id shared with {entries[answer.entry]!r}"}
            )
            continue
        entries[answer.entry] = text
    wait_started = time.monotonic()
    deadline = wait_started + STORE_WAIT_S
    layers: dict[str, Any] = {}
    while time.monotonic() < deadline:
        layers = client.get("/admin/cache/stats")["layers"]
        exact = layers["exact"]["entries"] or 0
        vectors = layers["semantic"]["entries"] or 0
        if exact >= len(entries) and vectors >= len(entries):
            break
        time.sleep(0.25)
    else:
        raise BenchError(
            f"after {STORE_WAIT_S:.0f}s the gateway holds {layers} entries; "
            f"{len(entries)} answers were inserted"
        )
    # Spot check: a few inserted texts asked again are exact hits on their own entry.
    probes = list(entries.items())[:: max(1, len(entries) // 5)][:5]
    for entry, text in probes:
        again = client.chat(text, "no-store")
        if again.cache != "exact" or again.entry != entry:
            raise BenchError(
                f"an inserted text asked again was {again.cache} on {again.entry} "
                f"(expected exact on {entry}): {text!r}"
            )
    record = {
        "texts": len(texts),
        "stored": len(entries),
        "outcomes": dict(outcomes),
        "failed": failed[:EXAMPLES],
        "failed_count": len(failed),
        "seconds": round(time.monotonic() - started, 1),
        "store_wait_s": round(time.monotonic() - wait_started, 2),
        "layers": layers,
    }
    print(
        f"  inserted {len(entries)}/{len(texts)} distinct a in {record['seconds']} s "
        f"(outcomes {dict(outcomes)}); both layers hold them after {record['store_wait_s']} s"
    )
    if failed:
        print(f"  WARNING: {len(failed)} inserts failed, e.g. {failed[:2]}")
    return entries, record


def classify(rows: list[Row], answers: list[Answer], entries: dict[str, str]) -> dict[str, Any]:
    """Counts of one query pass, as ``shared/data/README.md`` defines them."""
    n_dup = sum(1 for r in rows if r.duplicate)
    count: Counter[str] = Counter()
    dup_served = 0
    wrong: list[dict[str, Any]] = []
    unjudged: list[dict[str, Any]] = []
    for row, answer in zip(rows, answers, strict=True):
        if answer.status != 200:
            count["errors"] += 1
            continue
        if answer.cache not in ("exact", "semantic"):
            count[f"outcome_{answer.cache}"] += 1
            continue
        count["hits"] += 1
        count[answer.cache] += 1
        served = entries.get(answer.entry or "")
        example = {
            "query": row.b,
            "own_a": row.a,
            "served": served,
            "duplicate": row.duplicate,
            "cache": answer.cache,
            "similarity": answer.similarity,
            "verifier_score": answer.verifier_score,
        }
        if served is None:
            count["unknown_entry"] += 1
            count["unjudged"] += 1
            unjudged.append(example)
        elif served == row.b:
            count["labelled"] += 1
            count["right"] += 1
            count["identical"] += 1
            if row.duplicate:
                dup_served += 1
        elif served == row.a:
            count["labelled"] += 1
            if row.duplicate:
                count["right"] += 1
                dup_served += 1
            else:
                count["wrong"] += 1
                wrong.append(example)
        else:
            count["unjudged"] += 1
            unjudged.append(example)
    low, high = wilson(count["right"], count["labelled"])
    return {
        "queries": len(rows),
        "duplicates": n_dup,
        "hits": count["hits"],
        "exact_hits": count["exact"],
        "semantic_hits": count["semantic"],
        "labelled_hits": count["labelled"],
        "right": count["right"],
        "wrong": count["wrong"],
        "identical": count["identical"],
        "unjudged": count["unjudged"],
        "unknown_entry": count["unknown_entry"],
        "misses": count["outcome_miss"],
        "other_outcomes": {
            k: v for k, v in count.items() if k.startswith("outcome_") and k != "outcome_miss"
        },
        "errors": count["errors"],
        "labelled_precision": ratio(count["right"], count["labelled"]),
        "labelled_precision_ci95": [low, high],
        "strict_precision": ratio(count["right"], count["hits"]),
        "duplicate_hit_rate": ratio(dup_served, n_dup),
        "duplicate_rows_served": dup_served,
        "hit_share": ratio(count["hits"], len(rows)),
        "wrong_examples": wrong[:EXAMPLES],
        "unjudged_examples": unjudged[:EXAMPLES],
    }


# --------------------------------------------------------------------------------------------
# variants


@dataclass(frozen=True)
class Variant:
    name: str
    env: dict[str, str]
    settings: tuple[float, ...]
    change: Callable[[float], dict[str, Any]]
    label: str


def variants(targets: Sequence[float] = TARGETS) -> list[Variant]:
    def theta(v: float) -> dict[str, Any]:
        return {"global": v}

    def precision(v: float) -> dict[str, Any]:
        return {"precision": {"global": v}}

    return [
        Variant("cosine", {"DEJA_SEMANTIC_VERIFIER": "off"}, THETAS, theta, "θ"),
        Variant(
            "verifier", {"DEJA_SEMANTIC_VERIFIER": "onnx"}, tuple(targets), precision, "target"
        ),
        Variant(
            "judge",
            {
                "DEJA_SEMANTIC_VERIFIER": "onnx",
                "DEJA_SEMANTIC_JUDGE": "sync",
                "DEJA_SEMANTIC_PRECISION": str(JUDGE_TARGET),
            },
            (JUDGE_TARGET,),
            precision,
            "target",
        ),
    ]


def bypass_setting(args: dict[str, Any]) -> str:
    """``DEJA_TEMPORAL_BYPASS`` as the gateways ran (a record written before the flag: false)."""
    return "true" if args.get("temporal_bypass") else "false"


def base_env(args: argparse.Namespace, admin_key: str, rows: int) -> dict[str, str]:
    return {
        "DEJA_CACHE_ENABLED": "true",
        "DEJA_SEMANTIC_ENABLED": "true",
        "DEJA_SEMANTIC_SHADOW_RATE": "0",
        "DEJA_TEMPORAL_BYPASS": "true" if args.temporal_bypass else "false",
        "DEJA_SEMANTIC_TIMEOUT_SECONDS": str(args.semantic_timeout),
        "DEJA_SEMANTIC_JUDGE": "off",
        "DEJA_ACCESS_LOG": "false",
        "DEJA_ADMIN_KEY": admin_key,
        "DEJA_MEMORY_CACHE_MAX_ENTRIES": str(max(10_000, 2 * rows)),
        "DEJA_MODEL_DIR": str(MODEL_CACHE_DIR),
    }


def semantic_report(client: Client) -> dict[str, Any]:
    report: dict[str, Any] = client.get("/admin/semantic")
    return report


def run_setting(
    client: Client,
    variant: Variant,
    value: float,
    rows: list[Row],
    entries: dict[str, str],
) -> dict[str, Any]:
    applied = client.put_threshold(variant.change(value))
    report = semantic_report(client)
    judge_before = dict(report.get("judge") or {})
    errors_before = client.semantic_errors()
    started = time.monotonic()
    answers = client.chat_all([r.b for r in rows], "no-store")
    seconds = time.monotonic() - started
    errors = client.semantic_errors() - errors_before
    after = semantic_report(client)
    result = classify(rows, answers, entries)
    calibration = after.get("calibration") or {}
    result.update(
        setting=value,
        applied=applied,
        active_tau=calibration.get("active_tau"),
        theta=(after.get("theta") or {}).get("global"),
        seconds=round(seconds, 1),
        queries_per_s=round(ratio(len(rows), seconds), 1),
        semantic_errors=dict(errors),
    )
    judge_after = after.get("judge") or {}
    if "calls" in judge_after:
        calls = int(judge_after["calls"]) - int(judge_before.get("calls", 0))
        tokens = int(judge_after["tokens"]) - int(judge_before.get("tokens", 0))
        tau_now = calibration.get("active_tau")
        below = [
            a
            for a in answers
            if a.cache == "semantic"
            and a.verifier_score is not None
            and isinstance(tau_now, int | float)
            and a.verifier_score < tau_now
        ]
        result["judge"] = {
            "hits_below_tau": len(below),
            "calls": calls,
            "tokens": tokens,
            "calls_per_query": ratio(calls, len(rows)),
            "tokens_per_query": ratio(tokens, len(rows)),
            "report": judge_after,
        }
    tau = result["active_tau"]
    tau_note = f", τ {tau:.4f}" if isinstance(tau, int | float) else ""
    print(
        f"  {variant.label} {value:.2f}{tau_note}: {result['hits']} hits "
        f"({result['exact_hits']} exact), labelled precision "
        f"{result['labelled_precision']:.3f} over {result['labelled_hits']}, duplicate hit rate "
        f"{result['duplicate_hit_rate']:.3f}, {result['unjudged']} unjudged, "
        f"{result['errors']} errors, lookup failures {dict(errors) or 0} ({seconds:.1f} s)",
        flush=True,
    )
    return result


def run_variant(
    args: argparse.Namespace,
    variant: Variant,
    sim: Proc,
    rows: list[Row],
) -> dict[str, Any]:
    banner(f"variant {variant.name}: fresh gateway, insert every distinct a, query every b")
    admin_key = secrets.token_urlsafe(18)
    env = {
        **base_env(args, admin_key, len(rows)),
        "DEJA_DATA_DIR": str(log_dir() / f"data-{variant.name}"),
        **variant.env,
    }
    gateway = start_gateway(f"gateway-{variant.name}", [sim.url], cpu=None, env=env)
    client = Client(gateway, admin_key, args.concurrency)
    try:
        report = semantic_report(client)
        distinct = list(dict.fromkeys(r.a for r in rows))
        entries, inserted = insert(client, distinct)
        settings, refused = [], []
        for value in variant.settings:
            try:
                settings.append(run_setting(client, variant, value, rows, entries))
            except Refused as exc:  # a target the shipped table never reaches
                refused.append({"setting": value, "reason": str(exc)})
                print(f"  {variant.label} {value:.2f}: refused by the gateway: {exc}", flush=True)
        final = semantic_report(client)
    finally:
        client.close()
        stop_process(gateway)
    masked = {k: ("***" if k == "DEJA_ADMIN_KEY" else v) for k, v in env.items()}
    return {
        "env": masked,
        "semantic_at_start": report,
        "semantic_at_end": final,
        "insert": inserted,
        "settings": settings,
        "refused": refused,
    }


# --------------------------------------------------------------------------------------------
# output


def pct(value: Any) -> Any:
    return value if isinstance(value, int | float) and not math.isnan(value) else math.nan


def ci(r: dict[str, Any]) -> str:
    low, high = r["labelled_precision_ci95"]
    if math.isnan(low):
        return "n/a"
    return f"{low:.2f}-{high:.2f}"


def cosine_table(result: dict[str, Any]) -> str:
    return table(
        [
            "θ",
            "hits",
            "exact",
            "labelled",
            "lab prec",
            "95% CI",
            "dup hit",
            "unjudged",
            "wrong",
            "strict prec",
            "errors",
        ],
        [
            [
                f"{r['setting']:.2f}",
                r["hits"],
                r["exact_hits"],
                r["labelled_hits"],
                pct(r["labelled_precision"]),
                ci(r),
                pct(r["duplicate_hit_rate"]),
                r["unjudged"],
                r["wrong"],
                pct(r["strict_precision"]),
                r["errors"] + sum(r["semantic_errors"].values()),
            ]
            for r in result["settings"]
        ],
    )


def verifier_table(result: dict[str, Any]) -> str:
    return table(
        [
            "target",
            "τ",
            "hits",
            "exact",
            "labelled",
            "lab prec",
            "95% CI",
            "|meas-target|",
            "met",
            "dup hit",
            "unjudged",
            "wrong",
            "strict prec",
            "errors",
        ],
        [
            [
                f"{r['setting']:.2f}",
                pct(r["active_tau"]),
                r["hits"],
                r["exact_hits"],
                r["labelled_hits"],
                pct(r["labelled_precision"]),
                ci(r),
                pct(abs(r["labelled_precision"] - r["setting"])),
                "yes" if r["labelled_precision"] >= r["setting"] else "no",
                pct(r["duplicate_hit_rate"]),
                r["unjudged"],
                r["wrong"],
                pct(r["strict_precision"]),
                r["errors"] + sum(r["semantic_errors"].values()),
            ]
            for r in result["settings"]
        ],
        digits=4,
    )


def best_cosine_at(curve: list[dict[str, Any]], precision: float) -> dict[str, Any] | None:
    """The cosine setting with the highest duplicate hit rate whose labelled precision is at
    least ``precision`` (None when no θ reaches it)."""
    ok = [
        c
        for c in curve
        if not math.isnan(c["labelled_precision"]) and c["labelled_precision"] >= precision
    ]
    return max(ok, key=lambda c: c["duplicate_hit_rate"], default=None)


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    variants_ = results["variants"]
    cosine = variants_.get("cosine", {}).get("settings", [])
    verifier = variants_.get("verifier", {}).get("settings", [])
    if verifier:
        gaps = [
            abs(r["labelled_precision"] - r["setting"])
            for r in verifier
            if not math.isnan(r["labelled_precision"])
        ]
        out["verifier"] = {
            "mean_abs_gap": ratio(sum(gaps), len(gaps)),
            "max_abs_gap": max(gaps, default=math.nan),
            "targets_met": sum(1 for r in verifier if r["labelled_precision"] >= r["setting"]),
            "targets": len(verifier),
        }
        if cosine:
            rows = []
            for r in verifier:
                match = best_cosine_at(cosine, r["labelled_precision"])
                rows.append(
                    {
                        "target": r["setting"],
                        "verifier_precision": r["labelled_precision"],
                        "verifier_dup_hit_rate": r["duplicate_hit_rate"],
                        "cosine_theta": match["setting"] if match else None,
                        "cosine_precision": match["labelled_precision"] if match else None,
                        "cosine_dup_hit_rate": match["duplicate_hit_rate"] if match else None,
                    }
                )
            out["equal_precision"] = rows
    judge = variants_.get("judge", {}).get("settings", [])
    if judge:
        j = judge[0]
        same = next((r for r in verifier if r["setting"] == JUDGE_TARGET), None)
        out["judge"] = {
            "SIMULATED": "the replica is deja sim: judge verdicts come from a word-overlap rule; "
            "mechanics only, no quality claim",
            "target": JUDGE_TARGET,
            "hits": j["hits"],
            "labelled_precision": j["labelled_precision"],
            "duplicate_hit_rate": j["duplicate_hit_rate"],
            "judge_calls": (j.get("judge") or {}).get("calls"),
            "judge_served_hits": (j.get("judge") or {}).get("hits_below_tau"),
            "judge_calls_per_query": (j.get("judge") or {}).get("calls_per_query"),
            "judge_tokens_per_query": (j.get("judge") or {}).get("tokens_per_query"),
            "verifier_only_hits": same["hits"] if same else None,
        }
    return out


def print_summary(results: dict[str, Any]) -> None:
    variants_ = results["variants"]
    rows_n = results["data"]["rows"]
    banner("summary")
    print(
        f"data: {results['data']['path']} — {rows_n} rows, {results['data']['duplicates']} "
        f"duplicates, {results['data']['distinct_a']} distinct a inserted per gateway"
    )
    print(
        f"gateways: DEJA_TEMPORAL_BYPASS={bypass_setting(results['meta']['args'])}, "
        "DEJA_SEMANTIC_SHADOW_RATE=0, "
        f"DEJA_SEMANTIC_TIMEOUT_SECONDS={results['meta']['args']['semantic_timeout']}; "
        "replica SIMULATED (deja sim --speed 0)"
    )
    verifier_meta = results["meta"].get("verifier_files", {})
    print(f"verifier files: {verifier_meta.get('summary', 'unknown')}")
    if "cosine" in variants_:
        banner("cosine alone (DEJA_SEMANTIC_VERIFIER=off), θ set live")
        print(cosine_table(variants_["cosine"]))
    if "verifier" in variants_:
        banner("verifier, precision target set live (θ = calibration floor)")
        print(verifier_table(variants_["verifier"]))
    summary = results["summary"]
    if "verifier" in summary:
        s = summary["verifier"]
        print(
            f"\nlabelled precision vs target: mean |measured − target| {s['mean_abs_gap']:.4f}, "
            f"max {s['max_abs_gap']:.4f}; target reached at {s['targets_met']} of "
            f"{s['targets']} settings"
        )
    if "equal_precision" in summary:
        banner("duplicate hit rate at equal labelled precision: verifier vs best cosine θ")
        print(
            table(
                [
                    "target",
                    "verifier prec",
                    "verifier dup hit",
                    "cosine θ",
                    "cosine prec",
                    "cosine dup hit",
                ],
                [
                    [
                        f"{r['target']:.2f}",
                        pct(r["verifier_precision"]),
                        pct(r["verifier_dup_hit_rate"]),
                        f"{r['cosine_theta']:.2f}" if r["cosine_theta"] is not None else "none",
                        pct(r["cosine_precision"]),
                        pct(r["cosine_dup_hit_rate"]),
                    ]
                    for r in summary["equal_precision"]
                ],
            )
        )
        print("(cosine θ: the tested θ with the highest duplicate hit rate whose labelled")
        print(" precision is at least the verifier's measured one; 'none': no θ reached it)")
    if "judge" in summary:
        j = summary["judge"]
        banner("judge (DEJA_SEMANTIC_JUDGE=sync, target 0.92) — SIMULATED judge, mechanics only")
        print(
            table(
                [
                    "target",
                    "hits",
                    "judge-approved",
                    "verifier-only hits",
                    "lab prec (SIM)",
                    "dup hit (SIM)",
                    "judge calls",
                    "calls/query",
                    "tokens/query",
                ],
                [
                    [
                        f"{j['target']:.2f}",
                        j["hits"],
                        j["judge_served_hits"] if j["judge_served_hits"] is not None else "-",
                        j["verifier_only_hits"] if j["verifier_only_hits"] is not None else "-",
                        pct(j["labelled_precision"]),
                        pct(j["duplicate_hit_rate"]),
                        j["judge_calls"] if j["judge_calls"] is not None else "-",
                        pct(j["judge_calls_per_query"]),
                        pct(j["judge_tokens_per_query"]),
                    ]
                ],
                digits=4,
            )
        )
        print(
            "The simulator answers judge prompts by word overlap: these hit/precision figures "
            "show the\njudge path works (calls made, verdicts used), NOT how good a real model's "
            "verdicts are."
        )
    print(
        "\nlabelled precision: right / hits on the row's own a or an identical text; unjudged: "
        "hits on\nanother row's a (no label); strict prec: right / all hits; 95% CI: Wilson, "
        "labelled hits only."
    )


def verifier_files() -> dict[str, Any]:
    """Which verifier files were measured: name, size, mtime, sha256 prefix. The gateways
    inherit this environment, so ``DEJA_SEMANTIC_VERIFIER_DIR`` names their folder when set."""
    folder = Path(os.environ.get("DEJA_SEMANTIC_VERIFIER_DIR") or SHIPPED_VERIFIER_DIR)
    out: dict[str, Any] = {"dir": str(folder), "files": {}}
    if not folder.is_dir():
        out["summary"] = f"{folder} missing"
        return out
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        stat = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        out["files"][path.name] = {
            "bytes": stat.st_size,
            "mtime_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stat.st_mtime)),
            "sha256_16": digest,
        }
    model = out["files"].get("verifier-int8.onnx", {})
    out["summary"] = (
        f"verifier-int8.onnx sha256 {model.get('sha256_16', '?')}…, "
        f"modified {model.get('mtime_utc', '?')}"
    )
    return out


# --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="labelled pairs (JSONL)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N rows")
    parser.add_argument(
        "--skip", action="append", choices=VARIANTS, default=[], help="skip a variant"
    )
    parser.add_argument(
        "--semantic-timeout",
        type=float,
        default=5.0,
        help="the gateways' DEJA_SEMANTIC_TIMEOUT_SECONDS (default 5: quality, not latency)",
    )
    parser.add_argument(
        "--temporal-bypass",
        action="store_true",
        help="keep the gateways' temporal bypass on, as it is by default: a time-dependent "
        "question is neither stored nor served, so a pair counts as users see it (off by "
        "default here: Quora holds time-bound questions, and a bypass is neither a hit nor a "
        "miss of the semantic layer)",
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS_DIR / "semantic_quality.json", help="JSON record"
    )
    parser.add_argument(
        "--targets",
        type=float,
        nargs="+",
        default=list(TARGETS),
        help="precision targets of the verifier variant",
    )
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    if not args.data.is_file():
        print(f"BENCHMARK FAILED: no data file {args.data}", file=sys.stderr)
        return 1
    rows = load_rows(args.data, args.limit)
    meta = run_meta(args, "SIMULATED (deja sim --speed 0)")
    meta["verifier_files"] = verifier_files()
    results: dict[str, Any] = {
        "meta": meta,
        "data": {
            "path": str(args.data),
            "rows": len(rows),
            "duplicates": sum(1 for r in rows if r.duplicate),
            "distinct_a": len(set(r.a for r in rows)),
        },
        "variants": {},
    }
    print("deja semantic-cache quality through the gateway -- the replica is SIMULATED")
    print(meta["load_at_start"])
    print(
        f"{args.data}: {len(rows)} rows, {results['data']['duplicates']} duplicates, "
        f"{results['data']['distinct_a']} distinct a; concurrency {args.concurrency}"
    )
    print(f"verifier files: {meta['verifier_files']['summary']}")
    print(
        f"gateways run with DEJA_TEMPORAL_BYPASS={bypass_setting(vars(args))}, "
        f"DEJA_SEMANTIC_SHADOW_RATE=0, DEJA_SEMANTIC_TIMEOUT_SECONDS={args.semantic_timeout}"
    )

    def body() -> None:
        banner("setup: simulated replica (speed 0)")
        sim = start_sim("sim", cpu=None, args=["--speed", "0"])
        try:
            for variant in variants(tuple(args.targets)):
                if variant.name in args.skip:
                    continue
                results["variants"][variant.name] = run_variant(args, variant, sim, rows)
        finally:
            stop_process(sim)

    failed = run_guarded(body)
    if failed is not None:
        return failed
    results["summary"] = summarise(results)
    results["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    results["meta"]["commands"] = [
        " ".join(
            "DEJA_ADMIN_KEY=***" if p.startswith("DEJA_ADMIN_KEY=") else p for p in line.split(" ")
        )
        for line in COMMANDS
    ]
    print_summary(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, allow_nan=True) + "\n")
    print(f"\nresults written to {args.output} (wall time {results['meta']['wall_s']} s)")
    remove_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
