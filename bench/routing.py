"""Routing policies side by side in ONE run: prefix-cache hit rate, TTFT and load balance.

Four simulated vLLM replicas (``deja sim``), each with a KV budget (``--kv-blocks``) that holds
about a twelfth of all the system prompts' blocks, behind one gateway with the caches off
(``DEJA_CACHE_ENABLED=false``: every request goes to a replica). The same seeded request
sequence is sent through each configuration:

1. ``round_robin``
2. ``least_loaded``
3. ``prefix`` without the bound (``DEJA_ROUTING_EPSILON`` = 1e6: plain consistent hashing)
4. ``prefix`` with bounded loads (ε = ``--epsilon``, default 0.25)
5. ideal reference: ONE replica with 4x the KV budget and 4x ``--max-num-seqs``

Workload: ``--prompts`` distinct system prompts (seeded pseudo-text, ``--min-prompt-tokens`` to
``--max-prompt-tokens`` tokens), Zipf popularity (``--zipf``), a short unique user message per
request, ``--max-tokens`` generated tokens, streamed; Poisson arrivals at ``--rate`` req/s. A
warm-up pass (``--warmup-requests``) fills the prefix caches; then ``--requests`` are measured.
A second workload sends ``--hot-share`` of its requests with ONE system prompt, through
``prefix`` unbounded and bounded, to show how the bound spreads a hot prompt.

Figures per configuration (measured phase only):
- prefix-cache token hit rate = Σ Δ``vllm:prefix_cache_hits_total`` / Σ Δ``..._queries_total``
  over the replicas (``/metrics`` read before and after the measured phase);
- client TTFT p50/p90: send -> first content chunk, through the gateway (routing_client.py);
- replica TTFT p50/p90: the replicas' own ``vllm:time_to_first_token_seconds`` histogram deltas
  (arrival at the replica -> first token, slot queueing included), bucket-interpolated;
- in flight per replica: the gateway's own ``in_flight`` from ``GET /admin/replicas`` sampled
  every ``--sample-ms`` while requests are being sent; mean (time average) and max per replica.
  **max/mean** (the target measure) = max over replicas of the time-averaged in flight / the
  mean of them. The router's guarantee is per placement: right after placing a request, no
  replica holds more than ⌈(1+ε)·average⌉ (as the router sees loads). Two checks of it are
  reported too: the share of sampled instants (average >= 1) where some replica held more
  (between placements, completions elsewhere can push an instant past it), and the share of
  placements after which the chosen replica held more, from the client's open requests
  (headers -> end of body; the client's timestamps lag the gateway's by up to ~20 ms when its
  CPU is busy, so a few % of off-by-one cases are measurement noise);
- share of requests per replica, and the routes (``X-Deja-Route``: home / spill / ...).

Targets for bounded ``prefix``: hit rate >= 0.9 x ideal; hit rate >= 3 x round_robin; max/mean
in flight <= 1 + ε; client TTFT p90 below round_robin's. Each prints PASS or BELOW TARGET.
An offline replay of the same sequence through the simulator's own PrefixCache (no timing, no
HTTP) shows the hit rates round robin, perfect prefix affinity and the ideal replica can reach.

    .venv/bin/python bench/routing.py [--rate 40] [--requests 600] [--skip hot]

Processes: the gateway on cpu 0; the replicas and the client (``bench/routing_client.py``, its
own process) on cpu 1. Replicas and gateway are restarted for every configuration (empty prefix
caches), the replicas on the same ports (``--base-port``): their URLs are their ids on the hash
ring, so every ``prefix`` run places the keys alike. ``/admin/replicas`` needs an admin key: the
caller's ``DEJA_ADMIN_KEY``, else a random one for the run, passed through the environment.

The replicas are SIMULATED; all times are simulated engine times x ``--speed``. Writes
``bench/results/routing.json``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import itertools
import json
import math
import os
import platform
import random
import re
import secrets
import shlex
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import (
    COMMANDS,
    HOST,
    LOADGEN_CPU,
    PINNING,
    RESULTS_DIR,
    SERVER_CPU,
    BenchError,
    Proc,
    banner,
    cpu_seconds,
    deja_bin,
    fmt,
    free_port,
    gateway_config,
    gateway_env,
    load_note,
    log_dir,
    percentile,
    pinning_note,
    ratio,
    remove_logs,
    run_guarded,
    run_json_command,
    start_process,
    stop_process,
    table,
    wait_ready,
)

MODEL = "deja-sim-1"
CLIENT = Path(__file__).with_name("routing_client.py")
#: The client reads the gateway's admin key from this variable.
ADMIN_KEY_ENV = "ROUTING_BENCH_ADMIN_KEY"
REPLICAS = 4
BLOCK_SIZE = 16
UNBOUNDED_EPSILON = "1000000"
TARGET_VS_IDEAL = 0.9
TARGET_VS_ROUND_ROBIN = 3.0
#: Float slack of the bound's ceiling, as in middleware/ring.py.
CEIL_SLACK = 1e-9
TOKEN_RE = re.compile(r"\w+|[^\w\s]")
SYLLABLES = (
    "ka", "lo", "mi", "ren", "sa", "tu", "vor", "el", "an", "is", "ob", "ur", "qua", "zen",
    "dra", "pel", "ti", "mor", "ga", "nex", "ol", "ri", "fen", "ba", "cu", "ver", "sho", "lin",
)  # fmt: skip
SENTENCE_ENDS = (".", ".", ".", "?", "!", ";", ":")


def routing_note(config: dict[str, Any] | None) -> str:
    """The gateway settings that shape routing, and what the router takes as a replica's load."""
    if config is None:
        return "gateway config: unknown (deja serve --print-config failed)"
    keys = ("prefix_mode", "health_check_interval_seconds", "cache_enabled", "semantic_enabled")
    shown = ", ".join(f"{k}={config[k]}" for k in keys if k in config)
    return (
        f"gateway (defaults + the policy's DEJA_ROUTING_*, caches off): {shown}; the router's "
        "load of a replica is its in_flight plus other gateways' share of running+waiting at "
        "the replica's last /metrics scrape (taken every health_check_interval_seconds)"
    )


def verdict(ok: bool) -> str:
    return "PASS" if ok else "BELOW TARGET"


# --------------------------------------------------------------------------------------------
# workload


def count_tokens(text: str) -> int:
    return len(TOKEN_RE.findall(text))


def make_vocab(rng: random.Random, size: int = 1500) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
    return sorted(words)


def make_prompt(index: int, tokens: int, vocab: Sequence[str], rng: random.Random) -> str:
    """Pseudo-text of exactly ``tokens`` tokens (words and punctuation), unique from token 1."""
    parts = [f"You are assistant {index} of the {rng.choice(vocab)} team."]
    count = count_tokens(parts[0])
    while count < tokens:
        length = min(rng.randint(6, 20), tokens - count)
        words = rng.choices(vocab, k=length)
        if length >= 10 and rng.random() < 0.5:
            cut = rng.randint(3, length - 4)
            words[cut] += ","
            length += 1
        sentence = " ".join(words)
        count += length
        if count < tokens:
            sentence += rng.choice(SENTENCE_ENDS)
            count += 1
        parts.append(sentence[0].upper() + sentence[1:])
    text = " ".join(parts)
    while count_tokens(text) > tokens:  # a trailing comma pushed one sentence one token over
        text = text.rsplit(" ", 1)[0]
    return text


@dataclass(frozen=True)
class Workload:
    """Prompts, their popularity ranks, and the request sequences (same for every config)."""

    prompts: list[str]
    prompt_tokens: list[int]
    by_rank: list[int]  # prompt index of popularity rank 1, 2, ...
    phases: dict[str, list[dict[str, Any]]]  # "main" / "hot" -> phases of the client
    hot_prompt: int


def zipf_cdf(n: int, s: float) -> list[float]:
    weights = [1.0 / (k**s) for k in range(1, n + 1)]
    total = sum(weights)
    cdf, acc = [], 0.0
    for w in weights:
        acc += w / total
        cdf.append(acc)
    cdf[-1] = 1.0
    return cdf


def request_phase(
    name: str,
    count: int,
    rate: float,
    rng: random.Random,
    pick: Callable[[random.Random], int],
    vocab: Sequence[str],
    first_id: int,
    *,
    measure: bool,
) -> dict[str, Any]:
    """``count`` requests with Poisson send offsets; ``pick(rng)`` chooses the prompt."""
    offset = 0.0
    requests: list[list[Any]] = []
    for n in range(count):
        words = " ".join(rng.choices(vocab, k=rng.randint(8, 15)))
        user = f"Question {first_id + n}: {words}?"
        requests.append([round(offset, 6), pick(rng), user])
        offset += rng.expovariate(rate)
    return {"name": name, "measure": measure, "requests": requests}


def build_workload(args: argparse.Namespace) -> Workload:
    rng = random.Random(args.seed)
    vocab = make_vocab(rng)
    lengths = [
        rng.randint(args.min_prompt_tokens, args.max_prompt_tokens) for _ in range(args.prompts)
    ]
    prompts = [make_prompt(i, n, vocab, rng) for i, n in enumerate(lengths)]
    n_prompts: int = args.prompts
    by_rank = list(range(n_prompts))
    rng.shuffle(by_rank)  # popularity independent of length
    cdf = zipf_cdf(args.prompts, args.zipf)
    hot_prompt = by_rank[0]
    rest_cdf = zipf_cdf(args.prompts - 1, args.zipf)

    def zipf_pick(r: random.Random) -> int:
        return by_rank[min(bisect.bisect_left(cdf, r.random()), n_prompts - 1)]

    def hot_pick(r: random.Random) -> int:
        if r.random() < args.hot_share:
            return hot_prompt
        rank = min(bisect.bisect_left(rest_cdf, r.random()), n_prompts - 2)
        return by_rank[1 + rank]

    main_rng = random.Random(args.seed + 1)
    hot_rng = random.Random(args.seed + 2)
    phases = {
        "main": [
            request_phase(
                "warmup", args.warmup_requests, args.rate, main_rng, zipf_pick, vocab, 10_000,
                measure=False,
            ),
            request_phase(
                "measure", args.requests, args.rate, main_rng, zipf_pick, vocab, 20_000,
                measure=True,
            ),
        ],
        "hot": [
            request_phase(
                "warmup", args.hot_warmup_requests, args.rate, hot_rng, hot_pick, vocab, 30_000,
                measure=False,
            ),
            request_phase(
                "measure", args.hot_requests, args.rate, hot_rng, hot_pick, vocab, 40_000,
                measure=True,
            ),
        ],
    }  # fmt: skip
    return Workload(
        prompts=prompts,
        prompt_tokens=[count_tokens(p) for p in prompts],
        by_rank=by_rank,
        phases=phases,
        hot_prompt=hot_prompt,
    )


def write_workload(workload: Workload, kind: str, max_tokens: int) -> Path:
    path = log_dir() / f"workload-{kind}.json"
    if not path.exists():
        document = {
            "model": MODEL,
            "max_tokens": max_tokens,
            "prompts": workload.prompts,
            "phases": workload.phases[kind],
        }
        path.write_text(json.dumps(document))
    return path


def prompt_blocks(workload: Workload) -> int:
    """KV blocks of all system prompts as the replica renders them (``<|system|>\\n...``)."""
    return sum((n + 5) // BLOCK_SIZE for n in workload.prompt_tokens)


# --------------------------------------------------------------------------------------------
# offline replay through the simulator's prefix cache (no timing, no HTTP)


def offline_replay(
    workload: Workload, urls: list[str], kv_blocks: int, max_tokens: int
) -> dict[str, Any]:
    """The main sequence, in order, through the simulator's own ``PrefixCache``: round robin
    over 4 caches, perfect prefix affinity (every request on its key's home replica of the
    gateway's ring, never spilled) over 4 caches, and one cache of 4x the budget. Token hit
    rates over the measured phase: what each routing can reach at best, whatever the timing."""
    from deja.upstream.prefix import prefix_hash
    from deja.upstream.ring import HashRing
    from sim.engine import PrefixCache, render_chat, tokenize

    ring = HashRing(urls)
    home_of: dict[int, int] = {}
    rr = [PrefixCache(BLOCK_SIZE, kv_blocks) for _ in urls]
    aff = [PrefixCache(BLOCK_SIZE, kv_blocks) for _ in urls]
    ideal = [PrefixCache(BLOCK_SIZE, kv_blocks * len(urls))]
    policies = {"round_robin": rr, "prefix_affinity": aff, "ideal": ideal}
    snapshots: dict[str, list[tuple[int, int]]] = {}
    homes: Counter[int] = Counter()
    index = 0
    for phase in workload.phases["main"]:
        if phase["measure"]:
            snapshots = {
                name: [(c.queries, c.hits) for c in caches] for name, caches in policies.items()
            }
        for _offset, prompt, user in phase["requests"]:
            messages = [
                {"role": "system", "content": workload.prompts[prompt]},
                {"role": "user", "content": user},
            ]
            if prompt not in home_of:
                body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens}
                key = prefix_hash("chat", body)
                assert key is not None
                home_of[prompt] = urls.index(ring.home(key))
            tokens = tokenize(render_chat(messages))
            rr[index % len(rr)].lookup_and_insert(tokens)
            aff[home_of[prompt]].lookup_and_insert(tokens)
            ideal[0].lookup_and_insert(tokens)
            if phase["measure"]:
                homes[home_of[prompt]] += 1
            index += 1
    out: dict[str, Any] = {}
    for name, caches in policies.items():
        before = snapshots[name]
        queries = sum(c.queries - q for c, (q, _h) in zip(caches, before, strict=True))
        hits = sum(c.hits - h for c, (_q, h) in zip(caches, before, strict=True))
        out[name] = ratio(hits, queries)
    measured = sum(homes.values())
    out["affinity_share"] = [ratio(homes[i], measured) for i in range(len(urls))]
    return out


# --------------------------------------------------------------------------------------------
# processes


@dataclass(frozen=True)
class Config:
    key: str
    label: str
    policy: str
    epsilon: str | None  # None: the gateway's default is irrelevant (not prefix)
    workload: str  # "main" or "hot"
    single: bool = False


CONFIGS = (
    Config("round_robin", "round_robin", "round_robin", None, "main"),
    Config("least_loaded", "least_loaded", "least_loaded", None, "main"),
    Config("prefix_unbounded", "prefix, no bound", "prefix", UNBOUNDED_EPSILON, "main"),
    Config("prefix_bounded", "prefix, bounded", "prefix", "eps", "main"),
    Config("ideal", "ideal: 1 replica x4", "round_robin", None, "main", single=True),
    Config("hot_unbounded", "hot: prefix, no bound", "prefix", UNBOUNDED_EPSILON, "hot"),
    Config("hot_bounded", "hot: prefix, bounded", "prefix", "eps", "hot"),
)


def sim_args(args: argparse.Namespace, scale: int) -> list[str]:
    return [
        "--speed", f"{args.speed:g}",
        "--kv-blocks", str(args.kv_blocks * scale),
        "--block-size", str(BLOCK_SIZE),
        "--base-ttft-ms", f"{args.base_ttft_ms:g}",
        "--prefill-ms-per-token", f"{args.prefill_ms_per_token:g}",
        "--decode-ms-per-token", f"{args.decode_ms_per_token:g}",
        "--max-num-seqs", str(args.max_num_seqs * scale),
        *shlex.split(args.sim_extra),
    ]  # fmt: skip


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As uvicorn binds: a port with only TIME_WAIT connections left from the last run is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def pick_ports(base: int, count: int) -> list[int]:
    """``count`` free ports from ``base`` up (0: any free ports). The replicas' URLs are their
    ids on the gateway's hash ring, so fixed ports give the same key placement run after run."""
    if base <= 0:
        return [free_port() for _ in range(count)]
    ports: list[int] = []
    port = base
    while len(ports) < count and port < 65536:
        if port_is_free(port):
            ports.append(port)
        port += 1
    if len(ports) < count:
        raise BenchError(f"no {count} free ports from {base} up")
    return ports


def start_sims(args: argparse.Namespace, ports: list[int], scale: int) -> list[Proc]:
    """One fresh ``deja sim`` per port (empty prefix cache), started together, then awaited."""
    procs = [
        start_process(
            f"sim-{port}",
            [
                deja_bin(), "sim", "--host", HOST, "--port", str(port),
                "--replica-name", f"r{i + 1}", *sim_args(args, scale),
            ],
            cpu=LOADGEN_CPU,
            port=port,
        )
        for i, port in enumerate(ports)
    ]  # fmt: skip
    for proc in procs:
        wait_ready(proc, "/health")
    return procs


def config_epsilon(config: Config, args: argparse.Namespace) -> str | None:
    """``DEJA_ROUTING_EPSILON`` of a configuration (None: not a prefix policy)."""
    if config.epsilon == "eps":
        return f"{args.epsilon:g}"
    return config.epsilon


def start_routing_gateway(name: str, urls: list[str], env: dict[str, str]) -> Proc:
    """``deja serve`` on a free port (cpu 0), ready when ``/healthz`` and ``/readyz`` answer.

    Like ``common.start_gateway``, but ``DEJA_ADMIN_KEY`` (needed for ``/admin/replicas``)
    reaches it through this process's environment, so the printed command does not show it."""
    port = free_port()
    gw_env = gateway_env(urls, env)
    gw_env.pop("DEJA_ADMIN_KEY", None)
    proc = start_process(
        name,
        [deja_bin(), "serve", "--host", HOST, "--port", str(port)],
        cpu=SERVER_CPU,
        env=gw_env,
        port=port,
    )
    wait_ready(proc, "/healthz")
    wait_ready(proc, "/readyz")
    return proc


# --------------------------------------------------------------------------------------------
# analysis


_SAMPLE_RE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)")
_LE_RE = re.compile(r'le="([^"]+)"')


def parse_metrics(text: str) -> dict[str, Any]:
    """Prefix-cache counters and the TTFT histogram's cumulative buckets from ``/metrics``."""
    out: dict[str, Any] = {"queries": 0.0, "hits": 0.0, "ttft_buckets": {}, "ttft_count": 0.0}
    for line in text.splitlines():
        match = _SAMPLE_RE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name == "vllm:prefix_cache_queries_total":
            out["queries"] += value
        elif name == "vllm:prefix_cache_hits_total":
            out["hits"] += value
        elif name == "vllm:time_to_first_token_seconds_bucket":
            le = _LE_RE.search(labels)
            if le:
                out["ttft_buckets"][le.group(1)] = value
        elif name == "vllm:time_to_first_token_seconds_count":
            out["ttft_count"] += value
    return out


def histogram_quantile(buckets: dict[str, float], q: float) -> float:
    """Prometheus-style quantile (linear within a bucket) of cumulative ``le`` buckets, in s."""
    items = sorted((math.inf if le == "+Inf" else float(le), n) for le, n in buckets.items())
    if not items or items[-1][1] <= 0:
        return math.nan
    rank = q * items[-1][1]
    lower, below = 0.0, 0.0
    for le, cumulative in items:
        if cumulative >= rank:
            if math.isinf(le):
                return lower  # beyond the last finite bucket: its bound, as Prometheus does
            span = cumulative - below
            return lower + (le - lower) * ((rank - below) / span if span else 1.0)
        lower, below = le, cumulative
    return lower


def replica_deltas(before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
    per: dict[str, dict[str, float]] = {}
    buckets: Counter[str] = Counter()
    for sim, text in after.items():
        a, b = parse_metrics(text), parse_metrics(before[sim])
        per[sim] = {"queries": a["queries"] - b["queries"], "hits": a["hits"] - b["hits"]}
        for le, n in a["ttft_buckets"].items():
            buckets[le] += n - b["ttft_buckets"].get(le, 0.0)
    queries = sum(p["queries"] for p in per.values())
    hits = sum(p["hits"] for p in per.values())
    return {
        "per_replica": per,
        "queries_tokens": queries,
        "hits_tokens": hits,
        "hit_rate": ratio(hits, queries),
        "ttft_p50_ms": 1000 * histogram_quantile(dict(buckets), 0.5),
        "ttft_p90_ms": 1000 * histogram_quantile(dict(buckets), 0.9),
        "ttft_count": buckets.get("+Inf", 0.0),
    }


def ceil_bound(avg: float, epsilon: float) -> int:
    return math.ceil((1 + epsilon) * avg - CEIL_SLACK)


def in_flight_stats(
    admin: dict[str, Any], names: list[str], window_s: float, epsilon: float
) -> dict[str, Any]:
    """From the gateway's sampled ``in_flight`` while requests were being sent."""
    order = admin["names"]
    samples = [s for s in admin["samples"] if s[0] <= window_s]
    if not samples or not order:
        return {"samples": 0}
    columns = [order.index(n) if n in order else -1 for n in names]
    rows = [[s[1][c] if c >= 0 else 0 for c in columns] for s in samples]
    mean = [statistics.fmean(r[i] for r in rows) for i in range(len(names))]
    peak = [max(r[i] for r in rows) for i in range(len(names))]
    overall = statistics.fmean(mean)
    busy = [r for r in rows if sum(r) / len(r) >= 1.0]
    instant = [max(r) / (sum(r) / len(r)) for r in busy]
    exceeded = [r for r in busy if max(r) > ceil_bound(sum(r) / len(r), epsilon)]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(samples)]
    return {
        "samples": len(rows),
        "sample_gap_ms_p50": 1000 * statistics.median(gaps) if gaps else math.nan,
        "mean": mean,
        "max": peak,
        "overall_mean": overall,
        "max_over_mean": ratio(max(mean), overall),
        "busy_samples": len(busy),
        "instant_max_over_mean_p50": statistics.median(instant) if instant else math.nan,
        "instant_max_over_mean_p99": percentile(instant, 99),
        "instant_max_over_mean_max": max(instant) if instant else math.nan,
        "bound_epsilon": epsilon,
        "bound_exceeded_share": ratio(len(exceeded), len(busy)),
    }


def placement_stats(runs: list[dict[str, Any]], names: list[str], epsilon: float) -> dict[str, Any]:
    """The bound at each placement, from the client's view of what is open on each replica:
    right after request k is placed, does the replica that took it hold more than
    ⌈(1+ε)·average⌉ (average = all open requests / replicas, k included)? That is the
    invariant the bounded-load router keeps at every placement (with its own load signal).

    A request counts as open from its response headers (the gateway has placed it and the
    replica answered; ``X-Deja-Replica`` says where) to the end of its body: the gateway's
    ``in_flight`` interval shifted by a loopback hop or two at each end, plus however late the
    client's event loop gets to it (up to ~20 ms on a busy CPU), so off-by-one cases near the
    bound can be noise. The send time would be worse: it includes the wait for the gateway's
    CPU before routing."""
    events: list[tuple[float, int, str]] = []
    for r in runs:
        events.append((float(r["start_s"]) + float(r["headers_ms"]) / 1000, 1, r["replica"]))
        events.append((float(r["end_s"]), -1, r["replica"]))
    events.sort(key=lambda e: (e[0], e[1]))  # at equal times an end comes before a start
    level = dict.fromkeys(names, 0)
    peaks = dict.fromkeys(names, 0)
    total = placements = over = 0
    worst = 0.0
    for _t, step, name in events:
        if name not in level:
            continue
        level[name] += step
        total += step
        peaks[name] = max(peaks[name], level[name])
        if step > 0:
            placements += 1
            avg = total / len(names)
            if level[name] > ceil_bound(avg, epsilon):
                over += 1
            if avg >= 1:
                worst = max(worst, level[name] / avg)
    return {
        "placements": placements,
        "over_bound": over,
        "over_bound_share": ratio(over, placements),
        "worst_ratio_avg_ge_1": worst,
        "peak": [peaks[n] for n in names],
    }


def analyse(
    config: Config, client: dict[str, Any], names: list[str], args: argparse.Namespace, hot: int
) -> dict[str, Any]:
    phase = next(p for p in client["phases"] if p["measure"])
    runs: list[dict[str, Any]] = phase["runs"]
    ok = [r for r in runs if r["status"] == 200 and r["ttft_ms"] is not None]
    errors = len(runs) - len(ok)
    ttft = [float(r["ttft_ms"]) for r in ok]
    lag = [max(0.0, r["start_s"] - r["scheduled_s"]) * 1000 for r in runs]
    window = float(phase["sent_s"])
    by_replica = Counter(r["replica"] for r in ok)
    routes = Counter(str(r["route"]) for r in ok)
    metrics = replica_deltas(phase["metrics_before"], phase["metrics_after"])
    flight = in_flight_stats(phase["admin"], names, window, args.epsilon)
    hot_runs = [r for r in ok if r["prompt"] == hot]
    hot_by_replica = Counter(r["replica"] for r in hot_runs)
    result: dict[str, Any] = {
        "label": config.label,
        "policy": config.policy,
        "epsilon": None if (eps := config_epsilon(config, args)) is None else float(eps),
        "replicas": names,
        "requests": len(runs),
        "errors": errors,
        "error_examples": [r["error"] for r in runs if r["error"]][:5],
        "hit_rate": metrics["hit_rate"],
        "replica_metrics": metrics,
        "ttft_ms_p50": statistics.median(ttft) if ttft else math.nan,
        "ttft_ms_p90": percentile(ttft, 90),
        "ttft_ms_p99": percentile(ttft, 99),
        "total_ms_p50": statistics.median(float(r["total_ms"]) for r in ok) if ok else math.nan,
        "replica_ttft_ms_p50": metrics["ttft_p50_ms"],
        "replica_ttft_ms_p90": metrics["ttft_p90_ms"],
        "share": [ratio(by_replica[n], len(ok)) for n in names],
        "routes": dict(routes),
        "spill_share": ratio(routes.get("spill", 0), len(ok)),
        "in_flight": flight,
        "placement": placement_stats(ok, names, args.epsilon),
        "send_lag_ms_p99": percentile(lag, 99),
        "send_lag_ms_max": max(lag) if lag else math.nan,
        "sent_s": window,
        "wall_s": phase["wall_s"],
        "offered_rate": ratio(len(runs), window),
        "client_cpu_s": phase["client_cpu_s"],
        "admin_errors": phase["admin"]["errors"],
        "hot_prompt_requests": len(hot_runs),
        "hot_prompt_share": [ratio(hot_by_replica[n], len(hot_runs)) for n in names],
        "hot_ttft_ms_p90": percentile([float(r["ttft_ms"]) for r in hot_runs], 90),
        "runs": runs,
        "samples": phase["admin"]["samples"],
        "sample_names": phase["admin"]["names"],
    }
    return result


def per(values: Sequence[float], digits: int = 1, pct: bool = False) -> str:
    if pct:
        return "/".join(f"{100 * v:.0f}" for v in values)
    return "/".join(f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in values)


# --------------------------------------------------------------------------------------------
# one configuration


def run_config(
    config: Config,
    args: argparse.Namespace,
    workload: Workload,
    ports: list[int],
    ideal_port: int,
) -> dict[str, Any]:
    banner(f"{config.key}: {config.label}")
    scale = REPLICAS if config.single else 1
    use_ports = [ideal_port] if config.single else ports
    sims = start_sims(args, use_ports, scale)
    urls = [s.url for s in sims]
    names = [u.split("://", 1)[1] for u in urls]
    env = {
        "DEJA_ROUTING_POLICY": config.policy,
        "DEJA_CACHE_ENABLED": "false",
        "DEJA_SEMANTIC_ENABLED": "false",
        **args.gateway_env,
    }
    epsilon = config_epsilon(config, args)
    if epsilon is not None:
        env["DEJA_ROUTING_EPSILON"] = epsilon
    gateway = start_routing_gateway(f"gateway-{config.key}", urls, env)
    wl_path = write_workload(workload, config.workload, args.max_tokens)
    n_req = sum(len(p["requests"]) for p in workload.phases[config.workload])
    try:
        cpu_before = cpu_seconds(gateway.popen.pid)
        sim_cpu_before = sum(cpu_seconds(s.popen.pid) for s in sims)
        out = run_json_command(
            [
                sys.executable, str(CLIENT),
                "--url", gateway.url,
                "--workload", str(wl_path),
                "--sims", ",".join(urls),
                "--sample-ms", f"{args.sample_ms:g}",
            ],
            cpu=LOADGEN_CPU,
            timeout=120 + 3 * n_req / args.rate,
        )  # fmt: skip
        gateway_cpu = cpu_seconds(gateway.popen.pid) - cpu_before
        sim_cpu = sum(cpu_seconds(s.popen.pid) for s in sims) - sim_cpu_before
    finally:
        stop_process(gateway)
        for sim in sims:
            stop_process(sim)
    result = analyse(config, out, names, args, workload.hot_prompt)
    walls = sum(float(p["wall_s"]) for p in out["phases"])
    result["gateway_cpu_ms_per_request"] = 1000 * ratio(gateway_cpu, n_req)
    result["gateway_cpu_pct"] = 100 * ratio(gateway_cpu, walls)
    result["sims_cpu_pct"] = 100 * ratio(sim_cpu, walls)
    result["sim_args"] = sim_args(args, scale)
    result["slot_utilization"] = ratio(
        result["in_flight"].get("overall_mean", math.nan), args.max_num_seqs * scale
    )
    result["gateway_env"] = env
    flight = result["in_flight"]
    print(
        f"  {result['requests']} measured requests ({result['errors']} errors), "
        f"{result['offered_rate']:.1f} req/s offered; hit rate {result['hit_rate']:.3f}; "
        f"client TTFT p50 {fmt(result['ttft_ms_p50'], 1)} / p90 {fmt(result['ttft_ms_p90'], 1)} "
        f"ms; replica TTFT p50 {fmt(result['replica_ttft_ms_p50'], 1)} / p90 "
        f"{fmt(result['replica_ttft_ms_p90'], 1)} ms"
    )
    if flight.get("samples"):
        print(
            f"  in flight (gateway, {flight['samples']} samples): mean "
            f"{per(flight['mean'], 2)}, max {per(flight['max'])}, max/mean "
            f"{flight['max_over_mean']:.2f}; share of requests {per(result['share'], pct=True)} %; "
            f"routes {dict(sorted(result['routes'].items()))}"
        )
    print(
        f"  send lag p99 {result['send_lag_ms_p99']:.1f} ms; gateway CPU "
        f"{result['gateway_cpu_pct']:.0f}% ({result['gateway_cpu_ms_per_request']:.2f} ms/req), "
        f"sims {result['sims_cpu_pct']:.0f}% of one CPU"
    )
    return result


# --------------------------------------------------------------------------------------------
# summary


def summary(results: dict[str, Any], args: argparse.Namespace) -> str:
    meta = results["meta"]
    runs: dict[str, Any] = results["configs"]
    eps = args.epsilon
    lines = [
        "",
        "=" * 100,
        "SUMMARY (deja routing policies; replicas SIMULATED; one run, same request sequence each)",
        "=" * 100,
        meta["pinning"],
        meta["load_at_start"],
        f"workload: {meta['workload']}",
        f"replicas: {meta['replicas']}",
        meta["gateway"],
        "hit = prefix-cache token hit rate (replicas' counter deltas); client TTFT = send -> "
        "first content chunk via the gateway;",
        "replica TTFT = replicas' own histogram (arrival -> first token, slot wait included; "
        "bucket-interpolated); in flight = gateway's",
        f"in_flight sampled every {args.sample_ms:g} ms while sending; max/mean = max over "
        "replicas of the time-averaged in flight / their mean;",
        f">bound = share of samples (avg >= 1) where a replica held > ⌈(1+{eps:g})·avg⌉; "
        "placed>bound = share of requests whose replica held more than that right after",
        "the request was placed (client's view of open requests); slots = mean in flight / "
        "--max-num-seqs; spill = X-Deja-Route spill.",
    ]
    rows = []
    for key in ("round_robin", "least_loaded", "prefix_unbounded", "prefix_bounded", "ideal"):
        r = runs.get(key)
        if not r:
            continue
        f = r["in_flight"]
        rows.append(
            [
                r["label"],
                r["requests"],
                r["errors"],
                r["hit_rate"],
                r["ttft_ms_p50"],
                r["ttft_ms_p90"],
                r["replica_ttft_ms_p50"],
                r["replica_ttft_ms_p90"],
                per(f.get("mean", []), 2),
                per(f.get("max", [])),
                f"{100 * r['slot_utilization']:.0f}%",
                f.get("max_over_mean", math.nan),
                f"{100 * f.get('bound_exceeded_share', math.nan):.1f}%",
                f"{100 * r['placement']['over_bound_share']:.1f}%",
                per(r["share"], pct=True),
                f"{100 * r['spill_share']:.1f}%",
            ]
        )
    headers = [
        "config",
        "reqs",
        "err",
        "hit",
        "TTFT p50",
        "TTFT p90",
        "repl p50",
        "repl p90",
        "in-flight mean/replica",
        "max/replica",
        "slots",
        "max/mean",
        ">bound",
        "placed>bound",
        "share %",
        "spill",
    ]
    lines += ["", "main workload (TTFT in ms):", table(headers, rows, digits=3)]
    model = results.get("offline_replay")
    if model:
        lines.append(
            f"offline replay (same sequence, simulator PrefixCache, no timing): round robin "
            f"{model['round_robin']:.3f}, perfect prefix affinity {model['prefix_affinity']:.3f}"
            f", ideal {model['ideal']:.3f}; affinity/round robin "
            f"{ratio(model['prefix_affinity'], model['round_robin']):.2f}x; home share of "
            f"requests {per(model['affinity_share'], pct=True)} %"
        )
    targets = results.get("targets")
    if targets:
        lines.append(f"targets for prefix bounded (ε = {eps:g}):")
        for t in targets:
            lines.append(f"  {t['name']}: {t['detail']} -> {verdict(t['ok'])}")
    hot = results.get("hot")
    if hot:
        lines += ["", f"hot prompt workload ({hot['note']}):"]
        hrows = []
        for key in ("hot_unbounded", "hot_bounded"):
            r = runs.get(key)
            if not r:
                continue
            f = r["in_flight"]
            hrows.append(
                [
                    r["label"],
                    r["requests"],
                    r["errors"],
                    r["hit_rate"],
                    r["ttft_ms_p50"],
                    r["ttft_ms_p90"],
                    r["hot_ttft_ms_p90"],
                    per(r["hot_prompt_share"], pct=True),
                    per(f.get("mean", []), 2),
                    per(f.get("max", [])),
                    f.get("max_over_mean", math.nan),
                    f"{100 * f.get('bound_exceeded_share', math.nan):.1f}%",
                    f"{100 * r['placement']['over_bound_share']:.1f}%",
                    f"{100 * r['spill_share']:.1f}%",
                ]
            )
        lines.append(
            table(
                [
                    "config",
                    "reqs",
                    "err",
                    "hit",
                    "TTFT p50",
                    "TTFT p90",
                    "hot p90",
                    "hot prompt share %",
                    "in-flight mean/replica",
                    "max/replica",
                    "max/mean",
                    ">bound",
                    "placed>bound",
                    "spill",
                ],
                hrows,
            )
        )
        for line in hot["findings"]:
            lines.append(f"  {line}")
    for warning in results.get("warnings", []):
        lines.append(f"WARNING: {warning}")
    lines.append("=" * 100)
    return "\n".join(lines)


def evaluate(results: dict[str, Any], args: argparse.Namespace) -> None:
    runs = results["configs"]
    b = runs.get("prefix_bounded")
    if not b:
        return
    targets = []
    unbounded = runs.get("prefix_unbounded")
    unbounded_note = f"; unbounded prefix {unbounded['hit_rate']:.3f}" if unbounded else ""
    replay = results.get("offline_replay")
    replay_note = (
        f"; perfect affinity in the offline replay: "
        f"{ratio(replay['prefix_affinity'], replay['round_robin']):.2f}x"
        if replay
        else ""
    )
    ideal = runs.get("ideal")
    if ideal:
        goal = TARGET_VS_IDEAL * ideal["hit_rate"]
        targets.append(
            {
                "name": f"hit rate >= {TARGET_VS_IDEAL} x ideal",
                "detail": f"{b['hit_rate']:.3f} vs {goal:.3f} (ideal {ideal['hit_rate']:.3f}; "
                f"{ratio(b['hit_rate'], ideal['hit_rate']):.2f}x; {100 * b['spill_share']:.0f}% "
                f"of requests spilled off their home replica{unbounded_note})",
                "ok": b["hit_rate"] >= goal,
            }
        )
    rr = runs.get("round_robin")
    if rr:
        goal = TARGET_VS_ROUND_ROBIN * rr["hit_rate"]
        targets.append(
            {
                "name": f"hit rate >= {TARGET_VS_ROUND_ROBIN:g} x round_robin",
                "detail": f"{b['hit_rate']:.3f} vs {goal:.3f} (round_robin {rr['hit_rate']:.3f};"
                f" {ratio(b['hit_rate'], rr['hit_rate']):.2f}x{replay_note})",
                "ok": b["hit_rate"] >= goal,
            }
        )
    f, pl = b["in_flight"], b["placement"]
    if f.get("samples"):
        targets.append(
            {
                "name": f"max/mean in flight <= 1 + ε = {1 + args.epsilon:g}",
                "detail": f"{f['max_over_mean']:.3f} (time-averaged in flight per replica "
                f"{per(f['mean'], 2)}); above ⌈(1+ε)·avg⌉: "
                f"{100 * f['bound_exceeded_share']:.1f}% of {f['busy_samples']} sampled instants"
                f" (instantaneous max/avg p50 {f['instant_max_over_mean_p50']:.2f}, p99 "
                f"{f['instant_max_over_mean_p99']:.2f}), {100 * pl['over_bound_share']:.1f}% of "
                f"{pl['placements']} placements (client view)",
                "ok": f["max_over_mean"] <= 1 + args.epsilon,
            }
        )
    if rr:
        targets.append(
            {
                "name": "client TTFT p90 below round_robin's",
                "detail": f"{b['ttft_ms_p90']:.1f} ms vs {rr['ttft_ms_p90']:.1f} ms "
                f"(replica TTFT p90 {fmt(b['replica_ttft_ms_p90'], 1)} vs "
                f"{fmt(rr['replica_ttft_ms_p90'], 1)} ms)",
                "ok": b["ttft_ms_p90"] < rr["ttft_ms_p90"],
            }
        )
    results["targets"] = targets


def evaluate_hot(results: dict[str, Any], args: argparse.Namespace, workload: Workload) -> None:
    runs = results["configs"]
    u, b = runs.get("hot_unbounded"), runs.get("hot_bounded")
    if not u or not b:
        return
    findings = []
    for r in (u, b):
        top = max(r["hot_prompt_share"])
        f = r["in_flight"]
        findings.append(
            f"{r['label']}: {100 * top:.0f}% of the hot prompt's {r['hot_prompt_requests']} "
            f"requests on one replica; peak in flight {max(f.get('max', [0]))} "
            f"(mean {f.get('overall_mean', math.nan):.2f} per replica); max/mean "
            f"{f.get('max_over_mean', math.nan):.2f}"
        )
    spread = max(b["hot_prompt_share"]) < max(u["hot_prompt_share"]) and b["in_flight"].get(
        "max_over_mean", math.inf
    ) < u["in_flight"].get("max_over_mean", math.inf)
    findings.append(
        "the bound spreads the hot prompt: "
        + ("yes" if spread else "NO")
        + f" (bounded max/mean {b['in_flight'].get('max_over_mean', math.nan):.2f} vs "
        f"{u['in_flight'].get('max_over_mean', math.nan):.2f} unbounded; hit rate "
        f"{b['hit_rate']:.3f} vs {u['hit_rate']:.3f}; client TTFT p90 "
        f"{b['ttft_ms_p90']:.1f} vs {u['ttft_ms_p90']:.1f} ms)"
    )
    hot_tokens = workload.prompt_tokens[workload.hot_prompt]
    results["hot"] = {
        "note": f"{100 * args.hot_share:.0f}% of requests with one {hot_tokens}-token system "
        f"prompt, the rest Zipf over the others; {args.hot_requests} measured after "
        f"{args.hot_warmup_requests} warm-up",
        "findings": findings,
        "spread": spread,
    }


# --------------------------------------------------------------------------------------------
# main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--rate", type=float, default=40.0, help="Poisson arrival rate, req/s (default 40)")
    add("--requests", type=int, default=600, help="measured requests per config (600)")
    add("--warmup-requests", type=int, default=300, help="warm-up requests per config (300)")
    add("--prompts", type=int, default=250, help="distinct system prompts (250)")
    add("--min-prompt-tokens", type=int, default=1000)
    add("--max-prompt-tokens", type=int, default=4000)
    add("--zipf", type=float, default=1.1, help="Zipf exponent of prompt popularity (1.1)")
    add("--max-tokens", type=int, default=12, help="generated tokens per request (12)")
    add("--kv-blocks", type=int, default=3200, help="KV budget per replica, blocks (3200)")
    add("--max-num-seqs", type=int, default=6, help="running requests per replica (6)")
    add("--speed", type=float, default=2.0, help="simulated time multiplier (2)")
    add("--base-ttft-ms", type=float, default=20.0)
    # The simulator batches prefills into one step (their tokens add up), so a replica's
    # prefill rate is 1 / prefill-ms-per-token; 0.02 keeps four replicas below saturation at
    # 40 req/s of ~2,500-token prompts, as 0.1 did when each request slept on its own.
    add("--prefill-ms-per-token", type=float, default=0.02)
    add("--decode-ms-per-token", type=float, default=5.0)
    add("--epsilon", type=float, default=0.25, help="ε of the bounded prefix policy (0.25)")
    add("--hot-share", type=float, default=0.5, help="share of the hot prompt (0.5)")
    add("--hot-requests", type=int, default=400, help="measured requests, hot workload (400)")
    add("--hot-warmup-requests", type=int, default=150)
    add("--sample-ms", type=float, default=20.0, help="/admin/replicas sampling period (20)")
    add("--seed", type=int, default=7)
    add(
        "--base-port",
        type=int,
        default=18400,
        help="replicas listen on the first free ports from here (0: random); the URLs place the "
        "keys on the ring, so fixed ports keep placement the same between runs (18400)",
    )
    add(
        "--skip",
        action="append",
        default=[],
        choices=[c.key for c in CONFIGS] + ["hot", "replay"],
        help="skip a configuration, the hot workload or the offline replay (repeatable)",
    )
    add(
        "--gateway-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment of the gateways (repeatable)",
    )
    add(
        "--sim-extra",
        default="",
        help="more `deja sim` flags for every replica, e.g. a serving profile's limits "
        "(bench/tune.py: '--max-num-batched-tokens 32768 --decode-ms-per-seq 0.03')",
    )
    add("--output", type=Path, default=RESULTS_DIR / "routing.json")
    args = parser.parse_args()
    extra: dict[str, str] = {}
    for item in args.gateway_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--gateway-env wants KEY=VALUE, got {item!r}")
        extra[key] = value
    args.gateway_env = extra
    if not 0 < args.min_prompt_tokens <= args.max_prompt_tokens:
        parser.error("need 0 < --min-prompt-tokens <= --max-prompt-tokens")
    return args


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    print("deja routing benchmark -- the replicas are SIMULATED (deja sim)")
    print(pinning_note())
    note = load_note()
    print(note)
    # /admin/replicas needs an admin key: the caller's DEJA_ADMIN_KEY, else a random one for
    # this run; the gateways and the client get it through the environment (never printed).
    admin_key = os.environ.get("DEJA_ADMIN_KEY") or secrets.token_urlsafe(24)
    os.environ["DEJA_ADMIN_KEY"] = admin_key
    os.environ[ADMIN_KEY_ENV] = admin_key
    workload = build_workload(args)
    blocks = prompt_blocks(workload)
    tokens = workload.prompt_tokens
    ranks = zipf_cdf(args.prompts, args.zipf)
    workload_note = (
        f"{args.prompts} system prompts of {min(tokens)}-{max(tokens)} tokens (mean "
        f"{statistics.fmean(tokens):.0f}), Zipf s={args.zipf:g} (top 1 / 10 / 50 prompts: "
        f"{100 * ranks[0]:.0f} / {100 * ranks[min(9, len(ranks) - 1)]:.0f} / "
        f"{100 * ranks[min(49, len(ranks) - 1)]:.0f}% of requests), unique 12-19-token user "
        f"messages, max_tokens {args.max_tokens}, streamed; Poisson {args.rate:g} req/s; "
        f"{args.warmup_requests} warm-up + {args.requests} measured requests, seed {args.seed}"
    )
    replicas_note = (
        f"{REPLICAS} x deja sim --kv-blocks {args.kv_blocks} (all prompts: {blocks} blocks = "
        f"{ratio(blocks, args.kv_blocks):.1f}x one replica's budget, "
        f"{ratio(blocks, REPLICAS * args.kv_blocks):.1f}x four) --max-num-seqs "
        f"{args.max_num_seqs} --speed {args.speed:g} --base-ttft-ms {args.base_ttft_ms:g} "
        f"--prefill-ms-per-token {args.prefill_ms_per_token:g} --decode-ms-per-token "
        f"{args.decode_ms_per_token:g} (times x speed); ideal: 1 replica, --kv-blocks "
        f"{REPLICAS * args.kv_blocks} --max-num-seqs {REPLICAS * args.max_num_seqs}"
    )
    print(f"workload: {workload_note}")
    print(f"replicas: {replicas_note}")
    off = {"DEJA_CACHE_ENABLED": "false", "DEJA_SEMANTIC_ENABLED": "false", **args.gateway_env}
    settings = gateway_config(gateway_env(["http://127.0.0.1:1"], off))
    gateway_note = routing_note(settings)
    print(gateway_note)
    results: dict[str, Any] = {
        "meta": {
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "pinning": pinning_note(),
            "load_at_start": note,
            "pinned": PINNING,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "replica": "SIMULATED (deja sim)",
            "workload": workload_note,
            "replicas": replicas_note,
            "gateway": gateway_note,
            "gateway_config": settings,
            "prompt_tokens": tokens,
            "prompt_blocks": blocks,
            "hot_prompt": workload.hot_prompt,
        },
        "configs": {},
        "warnings": [],
    }
    ports = pick_ports(args.base_port, REPLICAS + 1)
    ideal_port = ports.pop()
    urls = [f"http://{HOST}:{p}" for p in ports]

    def body() -> None:
        if "replay" not in args.skip:
            banner("offline replay of the main sequence through the simulator's PrefixCache")
            t0 = time.monotonic()
            replay = offline_replay(workload, urls, args.kv_blocks, args.max_tokens)
            results["offline_replay"] = replay
            print(
                f"  hit rates: round robin {replay['round_robin']:.3f}, perfect prefix affinity "
                f"{replay['prefix_affinity']:.3f}, ideal {replay['ideal']:.3f} "
                f"({time.monotonic() - t0:.1f}s)"
            )
        for config in CONFIGS:
            if config.key in args.skip or (config.workload == "hot" and "hot" in args.skip):
                continue
            results["configs"][config.key] = run_config(config, args, workload, ports, ideal_port)

    failed = run_guarded(body)
    if failed is not None:
        return failed
    evaluate(results, args)
    evaluate_hot(results, args, workload)
    for key, r in results["configs"].items():
        if r["errors"]:
            results["warnings"].append(
                f"{key}: {r['errors']} failed requests {r['error_examples']}"
            )
        if r["send_lag_ms_p99"] > 20:
            results["warnings"].append(
                f"{key}: the client sent late (p99 lag {r['send_lag_ms_p99']:.0f} ms): the "
                "arrivals were not quite Poisson"
            )
        if r["gateway_cpu_pct"] > 85:
            results["warnings"].append(
                f"{key}: the gateway used {r['gateway_cpu_pct']:.0f}% of its CPU (near saturation)"
            )
        if r["admin_errors"]:
            results["warnings"].append(f"{key}: {r['admin_errors']} failed /admin samples")
    results["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    results["meta"]["commands"] = list(COMMANDS)
    print(summary(results, args))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1, allow_nan=True) + "\n")
    print(f"results written to {args.output} (wall time {results['meta']['wall_s']} s)")
    remove_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
