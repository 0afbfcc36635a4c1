"""Replayed traffic through a running gateway, with a SIMULATED labelled judge (issue 24).

    .venv/bin/python bench/replay.py [--requests 5000] [--zipf 1.1] [--accuracies 0.8 0.95 1.0]

The baseline a learning cache is measured against. Clusters are the connected components of the
duplicate pairs of ``qqp_train.jsonl.gz`` and ``qqp_dev.jsonl`` (a question with no duplicate is
a cluster of one). A stream draws a cluster by Zipf(``--zipf``) over the duplicate clusters
(``--min-cluster`` 2) in a seeded random order, then a random member of it. The simulator is
given the labels (``deja sim --judge-labels``): it answers judge prompts by cluster, right for a
share ``accuracy`` of the pairs, and every question of one cluster with one answer, so a served
answer is right exactly when its text is the request's own cluster's answer.

Variants, each a fresh simulator and gateway on the same stream: ``static`` (no judge: the
calibrated τ alone), and at each judge accuracy A (``DEJA_SEMANTIC_JUDGE=async``, the labelled
judge): ``judge@A`` (the judge alone), ``promote@A`` (judged paraphrases become aliases),
``learn@A`` (per-entry cut-offs and per-tenant correction from verdicts) and ``both@A``
(``--kinds`` picks them). Reported: exact + semantic hit rate over the stream's last half,
paraphrase hits (an answer stored for another question: semantic hits, and exact hits through
an alias) and their precision (Wilson 95%), wrong answers, judge calls and tokens per request
(``/metrics``), and p50/p99 latency of hits and of misses. Requests go ``--concurrency`` at a
time, in stream order. Shadow re-asks run at the gateway's default 2% in every variant
(``--shadow-rate``): they are the learning's evidence, and only measure elsewhere.

**A simulation of a judge, on Quora's labels:** it measures what the cache does with verdicts,
never how good a real model's verdicts are. The replica is SIMULATED.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import itertools
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from common import (
    MODEL_CACHE_DIR,
    Proc,
    log_dir,
    percentile,
    start_gateway,
    start_sim,
    stop_process,
    table,
)

from deja.semantic.curves import wilson
from sim.engine import answer_text
from sim.labels import Labels

BENCH_DIR = Path(__file__).resolve().parent
DATA = BENCH_DIR.parent.parent / "shared" / "data"
MODEL = "deja-sim-1"
CHAT = "/v1/chat/completions"


# --------------------------------------------------------------------------------------------
# clusters and streams


def clusters(paths: list[Path]) -> list[list[str]]:
    """Connected components of the duplicate pairs (union-find); every question of a pair is
    in one, a question with no duplicate alone. Sorted for a stable order."""
    parent: dict[str, str] = {}

    def find(q: str) -> str:
        parent.setdefault(q, q)
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                a, b = str(row["a"]).strip(), str(row["b"]).strip()
                root_a, root_b = find(a), find(b)
                if row.get("duplicate") and root_a != root_b:
                    parent[root_a] = root_b
    groups: dict[str, list[str]] = {}
    for q in parent:
        groups.setdefault(find(q), []).append(q)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def stream(
    groups: list[list[str]], n: int, s: float, seed: int, smallest: int = 2
) -> list[tuple[str, int]]:
    """``n`` (question, cluster index) drawn Zipf(``s``) over the clusters of at least
    ``smallest`` questions, in a seeded order."""
    rng = random.Random(seed)
    order = [i for i, group in enumerate(groups) if len(group) >= smallest]
    rng.shuffle(order)
    weights = [1.0 / (rank + 1) ** s for rank in range(len(order))]
    cumulative = list(itertools.accumulate(weights))
    out = []
    for _ in range(n):
        cluster = order[bisect.bisect(cumulative, rng.random() * cumulative[-1])]
        out.append((rng.choice(groups[cluster]), cluster))
    return out


def ceiling(drawn: list[tuple[str, int]]) -> str:
    """What any cache could serve over the stream's last half: a request whose cluster came
    before (a cluster's first question has nothing to match), one whose text came before, and
    a new text of a cluster that came before."""
    clusters_seen: set[int] = set()
    texts_seen: set[str] = set()
    half = len(drawn) // 2
    cluster = text = new_text = 0
    for index, (question, group) in enumerate(drawn):
        if index >= half:
            cluster += group in clusters_seen
            text += question in texts_seen
            new_text += group in clusters_seen and question not in texts_seen
        clusters_seen.add(group)
        texts_seen.add(question)
    n = len(drawn) - half
    return (
        f"last half: {cluster / n:.3f} of the requests belong to a cluster seen before (the "
        f"most any cache can serve), {text / n:.3f} repeat a text, {new_text / n:.3f} are a "
        "new text of a seen cluster"
    )


# --------------------------------------------------------------------------------------------
# one variant


@dataclass
class Reply:
    cache: str
    right: bool
    seconds: float
    alias: bool = False  # served through a promoted paraphrase (X-Deja-Alias-Of)


def ask_all(url: str, asks: list[tuple[str, str]], concurrency: int) -> list[Reply]:
    """Each (question, expected answer) in order, ``concurrency`` at a time."""
    local = threading.local()

    def one(ask: tuple[str, str]) -> Reply:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=url, timeout=60.0)
        question, expected = ask
        body = {"model": MODEL, "messages": [{"role": "user", "content": question}]}
        started = time.perf_counter()
        response = client.post(CHAT, json=body)
        seconds = time.perf_counter() - started
        if response.status_code != 200:
            return Reply("error", False, seconds)
        content = response.json()["choices"][0]["message"]["content"]
        cache = response.headers.get("x-deja-cache", "?")
        alias = "x-deja-alias-of" in response.headers
        return Reply(cache, content == expected, seconds, alias)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, asks))


def metric_total(text: str, name: str) -> float:
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


#: What each kind of variant turns on (the judge is async in all but ``static``).
KINDS: dict[str, dict[str, str]] = {
    "static": {"DEJA_SEMANTIC_PROMOTE": "false", "DEJA_SEMANTIC_LEARNING": "false"},
    "judge": {"DEJA_SEMANTIC_PROMOTE": "false", "DEJA_SEMANTIC_LEARNING": "false"},
    "promote": {"DEJA_SEMANTIC_PROMOTE": "true", "DEJA_SEMANTIC_LEARNING": "false"},
    "learn": {"DEJA_SEMANTIC_PROMOTE": "false", "DEJA_SEMANTIC_LEARNING": "true"},
    "both": {"DEJA_SEMANTIC_PROMOTE": "true", "DEJA_SEMANTIC_LEARNING": "true"},
}


def run_variant(
    name: str, labels: Path, accuracy: float | None, asks: list[tuple[str, str]], args: Any
) -> dict[str, Any]:
    sim_args = ["--speed", "0", "--judge-labels", str(labels)]
    sim_args += ["--judge-accuracy", str(accuracy if accuracy is not None else 1.0)]
    sim = start_sim(f"sim-{name}", cpu=None, args=sim_args)
    env = {
        "DEJA_SEMANTIC_ENABLED": "true",
        "DEJA_SEMANTIC_SHADOW_RATE": str(args.shadow_rate),
        "DEJA_TEMPORAL_BYPASS": "false",
        "DEJA_SEMANTIC_JUDGE": "async" if accuracy is not None else "off",
        **KINDS[name.split("@")[0]],
        "DEJA_MEMORY_CACHE_MAX_ENTRIES": str(max(10_000, 2 * len(asks))),
        "DEJA_MODEL_DIR": str(MODEL_CACHE_DIR),
        "DEJA_DATA_DIR": str(log_dir() / f"data-{name}"),  # each variant starts empty
        **dict(kv.split("=", 1) for kv in args.gateway_env),
    }
    gateway: Proc | None = None
    try:
        gateway = start_gateway(f"gateway-{name}", [sim.url], cpu=None, env=env)
        started = time.perf_counter()
        replies = ask_all(gateway.url, asks, args.concurrency)
        wall = time.perf_counter() - started
        metrics = httpx.get(gateway.url + "/metrics", timeout=10).text
    finally:
        if gateway is not None:
            stop_process(gateway)
        stop_process(sim)
    return summarise(name, replies, metrics, wall)


def summarise(name: str, replies: list[Reply], metrics: str, wall: float) -> dict[str, Any]:
    n = len(replies)
    late = replies[n // 2 :]
    # a paraphrase hit serves an answer stored for another question: semantic, or an alias
    semantic = [r for r in replies if r.cache == "semantic" or r.alias]
    hits = [r for r in replies if r.cache in ("exact", "semantic")]
    misses = [r for r in replies if r.cache == "miss"]
    right = sum(r.right for r in semantic)
    window = max(1, n // 20)

    chunks = [replies[i : i + window] for i in range(0, n, window)]

    def over_time(kinds: tuple[str, ...]) -> list[float]:
        return [sum(r.cache in kinds for r in chunk) / len(chunk) for chunk in chunks]

    wrong_so_far = list(
        itertools.accumulate(sum(not r.right and r.cache != "error" for r in c) for c in chunks)
    )

    def ms(of: list[Reply]) -> list[float] | None:
        return [percentile([r.seconds * 1e3 for r in of], p) for p in (50, 99)] if of else None

    return {
        "variant": name,
        "requests": n,
        "window": window,
        "hit_rate_over_time": over_time(("exact", "semantic")),
        "semantic_rate_over_time": over_time(("semantic",)),
        "paraphrase_rate_over_time": [
            sum(r.cache == "semantic" or r.alias for r in chunk) / len(chunk) for chunk in chunks
        ],
        "wrong_over_time": wrong_so_far,
        "errors": sum(r.cache == "error" for r in replies),
        "hit_rate_last_half": sum(r.cache in ("exact", "semantic") for r in late) / len(late),
        "exact_last_half": sum(r.cache == "exact" for r in late) / len(late),
        "semantic_hits": len(semantic),
        "alias_hits": sum(r.alias for r in replies),
        "semantic_precision": right / len(semantic) if semantic else None,
        "semantic_precision_ci": wilson(right, len(semantic), 1.96),
        "wrong_answers": sum(not r.right for r in replies if r.cache != "error"),
        "judge_calls_per_request": metric_total(metrics, "deja_judge_requests_total") / n,
        "judge_tokens_per_request": metric_total(metrics, "deja_judge_tokens_total") / n,
        "hit_ms": ms(hits),
        "miss_ms": ms(misses),
        "wall_s": wall,
    }


# --------------------------------------------------------------------------------------------
# main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=5000, help="per stream (5000)")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent (1.1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--min-cluster",
        type=int,
        default=2,
        help="draw from clusters of at least this many questions (2: the duplicate clusters; "
        "1 adds every question without a duplicate)",
    )
    parser.add_argument(
        "--accuracies", type=float, nargs="*", default=[0.8, 0.95, 1.0], help="judge variants"
    )
    parser.add_argument(
        "--kinds",
        nargs="*",
        choices=[k for k in KINDS if k != "static"],
        default=["promote", "learn", "both"],
        help="learning variants run at each accuracy besides static (judge: the judge alone)",
    )
    parser.add_argument(
        "--shadow-rate",
        type=float,
        default=0.02,
        help="share of semantic hits re-asked (the gateway's default; learning's evidence)",
    )
    parser.add_argument(
        "--ceiling-only",
        action="store_true",
        help="print what any cache could serve over the stream's last half, and stop",
    )
    parser.add_argument(
        "--reverse", action="store_true", help="run the variants in reverse order (latency A/B)"
    )
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--gateway-env", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--output", type=Path, default=BENCH_DIR / "results" / "replay.json")
    parser.add_argument(
        "--plot",
        type=Path,
        default=BENCH_DIR / "results" / "replay.png",
        help="hit rate over the stream, per variant (needs matplotlib, the deja[plot] extra)",
    )
    return parser.parse_args()


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    """Left: hit rate (exact + semantic, solid) and paraphrase hit rate (semantic or through an
    alias, dashed) per window; right: wrong answers served so far. One colour per variant."""
    from app.cli.plot import new_figure, save_png

    figure = new_figure(13, 5.5)
    rates, wrong = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    markers = "osD^v<>p*h"
    for index, r in enumerate(results):
        window = r["window"]
        xs = [(i + 0.5) * window for i in range(len(r["hit_rate_over_time"]))]
        ends = [(i + 1) * window for i in range(len(r["wrong_over_time"]))]
        style = {"linewidth": 3.0 if r["variant"] == "static" else 1.2}
        style["marker"] = markers[index % len(markers)]
        style["markersize"] = 4
        (line,) = rates.plot(xs, r["hit_rate_over_time"], label=r["variant"], **style)
        colour = line.get_color()
        rates.plot(xs, r["paraphrase_rate_over_time"], linestyle="--", color=colour, **style)
        wrong.plot(ends, r["wrong_over_time"], color=colour, label=r["variant"], **style)
    rates.set_xlabel("request in the stream")
    rates.set_ylabel(f"hit rate per window of {results[0]['window']:,} requests")
    rates.set_title(
        "solid: all hits; dashed: paraphrase hits (semantic, or through an alias)", fontsize=9
    )
    rates.set_ylim(0, 1)
    rates.grid(alpha=0.3)
    rates.legend(fontsize=8, ncol=2, loc="center right")
    wrong.set_xlabel("request in the stream")
    wrong.set_ylabel("wrong answers served so far")
    wrong.set_title("wrong answers (all hits)", fontsize=9)
    wrong.grid(alpha=0.3)
    wrong.legend(fontsize=8, ncol=2, loc="upper left")
    figure.suptitle(title, fontsize=10)
    save_png(figure, path)


def main() -> int:
    args = parse_args()
    groups = clusters([args.data / "qqp_train.jsonl.gz", args.data / "qqp_dev.jsonl"])
    sizes = [len(g) for g in groups]
    print(
        f"{len(groups):,} clusters of {sum(sizes):,} questions ({sum(s > 1 for s in sizes):,} "
        f"with duplicates, largest {max(sizes)}); Zipf {args.zipf}, {args.requests:,} requests"
        " - the replica and its judge are SIMULATED",
        flush=True,
    )
    labels_path = log_dir() / "replay_labels.jsonl"
    with labels_path.open("w", encoding="utf-8") as out:
        for index, group in enumerate(groups):
            out.writelines(json.dumps({"question": q, "cluster": index}) + "\n" for q in group)
    labels = Labels.load(labels_path)
    drawn = stream(groups, args.requests, args.zipf, args.seed, args.min_cluster)
    asks = [(q, answer_text(labels.answer_seed(q) or q)) for q, _ in drawn]
    print(f"distinct clusters drawn: {len({c for _, c in drawn}):,}", flush=True)
    print(ceiling(drawn), flush=True)
    if args.ceiling_only:
        return 0
    variants: list[tuple[str, float | None]] = [("static", None)]
    variants += [(f"{k}@{a:g}", a) for k in args.kinds for a in args.accuracies]
    if args.reverse:  # run again in the other order: drift over the run falls on both alike
        variants.reverse()
    results = []
    for name, accuracy in variants:
        print(f"--- {name}", flush=True)
        results.append(run_variant(name, labels_path, accuracy, asks, args))
    rows = [
        [
            r["variant"],
            r["hit_rate_last_half"],
            r["exact_last_half"],
            r["semantic_hits"],
            r["alias_hits"],
            r["semantic_precision"],
            "{:.3f}-{:.3f}".format(*r["semantic_precision_ci"]),
            r["wrong_answers"],
            r["judge_calls_per_request"],
            r["judge_tokens_per_request"],
            "/".join(f"{v:.1f}" for v in r["hit_ms"] or []),
            "/".join(f"{v:.1f}" for v in r["miss_ms"] or []),
            r["errors"],
        ]
        for r in results
    ]
    headers = [
        "variant",
        "hit rate (last half)",
        "exact (last half)",
        "paraphrase hits",
        "of them alias",
        "precision",
        "95% CI",
        "wrong",
        "judge calls/req",
        "judge tokens/req",
        "hit p50/p99 ms",
        "miss p50/p99 ms",
        "errors",
    ]
    print(table(headers, rows))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    title = (
        f"bench/replay.py: {args.requests:,} requests, Zipf {args.zipf} over Quora duplicate "
        "clusters; SIMULATED replica and judge"
    )
    plot(results, args.plot, title)
    print(f"written: {args.output}, {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
