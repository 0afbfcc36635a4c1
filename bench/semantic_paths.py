"""The semantic-hit path, measured side by side in ONE run against the embedder alone.

1. latency at concurrency 1: semantic hit (target p50 <= 6 ms), with exact hit and forced miss
   (``Cache-Control: no-cache, no-store``) for reference, the three kinds sent in turn by one
   client process (``bench/semantic_client.py latency``).
2. semantic-hit throughput at concurrency 16: 16 concurrent workers in the client process, each
   request a text never sent before (``bench/semantic_client.py throughput``).
3. the embedder alone: a separate process on the gateway's core loads the same embedder and
   embeds texts of the same shape one at a time on one thread, ``embed_batch([text])``, as the
   gateway's executor thread does (``bench/semantic_client.py embed``).
4. ratio = gateway semantic hits/s at c16 / embedder texts/s (target >= 0.7): how much of the
   embedder's own speed survives the HTTP, exact lookup, vector search and replay around it.
   2 and 3 run in interleaved rounds (E G, then G E, ...), so drift hits both alike.

    .venv/bin/python bench/semantic_paths.py [--duration 8] [--rounds 4] [--requests 300]

The gateway runs on cpu 0 (and so does the embedder-alone process, while the gateway idles),
clients and the simulated replica on cpu 1. θ is 0.90. The cache is primed with one question;
every semantic-hit request is ``"<question> #<n>"`` with a unique five-digit ``n``: never sent
before, so not an exact hit, and a paraphrase of the cached question (cosine 0.92-0.99 for this
question). Each response's ``X-Deja-Cache`` is checked: the run FAILS (exit status 1) when
fewer than 95% of them are ``semantic``. Writes ``bench/results/semantic_paths.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from common import (
    COMMANDS,
    CPUS,
    LOADGEN_CPU,
    MODEL_CACHE_DIR,
    RESULTS_DIR,
    SERVER_CPU,
    BenchError,
    Proc,
    banner,
    children_cpu_seconds,
    cpu_seconds,
    fmt,
    gateway_config,
    gateway_env,
    machine_busy_seconds,
    percentile,
    pinning_note,
    ratio,
    remove_logs,
    run_guarded,
    run_json_command,
    run_meta,
    start_gateway,
    start_sim,
    stop_process,
    table,
)

MODEL = "deja-sim-1"
CHAT = "/v1/chat/completions"
#: The cached question. A ~20-token question (a realistic length): with the short
#: "How do I configure the agent?" a "#<n>" suffix is too much of the text, and a quarter of
#: the five-digit variants fall below θ = 0.90 (cosine down to 0.78).
QUESTION = "How do I configure the retry policy of the agent when the upstream server times out?"
THRESHOLD = "0.90"
NO_CACHE = "no-cache, no-store"
SEMANTIC_SHARE_MIN = 0.95
TARGET_P50_MS = 6.0
TARGET_RATIO = 0.7
CLIENT = Path(__file__).with_name("semantic_client.py")
#: Warm-up requests per kind before the concurrency-1 measurement.
C1_WARMUP = 20
#: Ranges of text ids (``#<n>``, five digits) for the client and the embedder-alone process.
HTTP_IDS_START = 10_000
EMBED_IDS_START = 60_000


def verdict(ok: bool) -> str:
    return "PASS" if ok else "BELOW TARGET"


def stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0.0}
    return {
        "n": float(len(values)),
        "p50_ms": statistics.median(values),
        "p90_ms": percentile(values, 90),
        "p99_ms": percentile(values, 99),
        "mean_ms": statistics.fmean(values),
        "max_ms": max(values),
    }


def outcomes(runs: list[dict[str, Any]]) -> dict[str, int]:
    return dict(Counter(f"{r['status']} {r['cache']}" for r in runs))


def share(runs: list[dict[str, Any]], cache: str) -> float:
    hits = sum(1 for r in runs if r["status"] == 200 and r["cache"] == cache)
    return ratio(hits, len(runs))


def similarities(runs: list[dict[str, Any]]) -> dict[str, float]:
    values = [float(r["similarity"]) for r in runs if r["similarity"] is not None]
    if not values:
        return {}
    return {"min": min(values), "p50": statistics.median(values), "max": max(values)}


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each thread of ``pid`` so far (Linux ``/proc``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


class Window:
    """CPU seconds used by the watched processes, by this script's finished children (the
    client) and by everything else on the machine, between ``__init__`` and ``close``; with
    ``threads_of``, also per thread of that process: its main thread (the event loop), its
    busiest other thread (under semantic-hit load: the embedder's executor thread) and the
    remaining threads together (mostly Qdrant Edge's search thread)."""

    def __init__(self, watch: dict[str, int], threads_of: int | None = None) -> None:
        self.watch = watch
        self.threads_of = threads_of
        self.threads = thread_cpu_seconds(threads_of) if threads_of else {}
        self.before = {name: cpu_seconds(pid) for name, pid in watch.items()}
        self.busy = machine_busy_seconds()
        self.children = children_cpu_seconds()
        self.wall = time.monotonic()

    def close(self) -> dict[str, float]:
        wall = time.monotonic() - self.wall
        used = {f"{n}_cpu_s": cpu_seconds(p) - self.before[n] for n, p in self.watch.items()}
        children = children_cpu_seconds() - self.children
        other = machine_busy_seconds() - self.busy - children - sum(used.values())
        out = {
            **used,
            "child_cpu_s": children,
            "window_s": wall,
            "other_cpu_s": max(0.0, other),
            "other_cpu_pct": 100 * max(0.0, other) / (wall * max(1, len(CPUS))),
        }
        if self.threads_of:
            now = thread_cpu_seconds(self.threads_of)
            delta = {tid: secs - self.threads.get(tid, 0.0) for tid, secs in now.items()}
            main = delta.pop(self.threads_of, math.nan)
            workers = sorted(delta.values(), reverse=True)
            out["main_thread_cpu_s"] = main
            out["busiest_worker_cpu_s"] = workers[0] if workers else 0.0
            out["other_workers_cpu_s"] = sum(workers[1:])
        return out


# --------------------------------------------------------------------------------------------
# setup


def post(client: httpx.Client, url: str, text: str, headers: dict[str, str]) -> httpx.Response:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}]})
    return client.post(url, content=body, headers={"content-type": "application/json", **headers})


def prime(gateway: Proc, question: str) -> dict[str, Any]:
    """Store the question's answer (its vector too), wait until a repeat is an exact hit, then
    check that one paraphrase is a semantic hit and that a forced miss is a miss."""
    url = gateway.url + CHAT
    with httpx.Client(timeout=10.0) as client:
        first = post(client, url, question, {})
        if first.status_code != 200:
            raise BenchError(f"priming request failed: HTTP {first.status_code} {first.text}")
        print(
            f"  prime: HTTP {first.status_code}, X-Deja-Cache: {first.headers.get('x-deja-cache')}"
        )
        for _ in range(100):  # the store (answer + vector) runs after the response
            hit = post(client, url, question, {})
            if hit.headers.get("x-deja-cache") == "exact":
                break
            time.sleep(0.05)
        else:
            raise BenchError("the primed question never became an exact hit (X-Deja-Cache)")
        probe_text = f"{question} #99999"
        for _ in range(40):  # the vector upsert may land a moment after the exact entry
            probe = post(client, url, probe_text, {})
            if probe.headers.get("x-deja-cache") == "semantic":
                break
            time.sleep(0.05)
        else:
            raise BenchError(
                f"a paraphrase of the cached question is not a semantic hit: X-Deja-Cache "
                f"{probe.headers.get('x-deja-cache')}, X-Deja-Similarity "
                f"{probe.headers.get('x-deja-similarity')} (θ = {THRESHOLD})\n"
                f"gateway log tail:\n{gateway.log_tail()}"
            )
        miss = post(client, url, question, {"cache-control": NO_CACHE})
        if miss.headers.get("x-deja-cache") != "miss":
            raise BenchError(f"a no-cache request was {miss.headers.get('x-deja-cache')}")
    sim = probe.headers.get("x-deja-similarity")
    print(f"  exact hit OK; paraphrase probe: semantic, similarity {sim}; forced miss: miss")
    return {"probe_similarity": float(sim) if sim else math.nan}


# --------------------------------------------------------------------------------------------
# 1. latency at concurrency 1


def bench_latency(args: argparse.Namespace, gateway: Proc, sim: Proc) -> dict[str, Any]:
    banner("1. concurrency 1: semantic hit, exact hit, forced miss (sent in turn)")
    window = Window({"gateway": gateway.popen.pid, "sim": sim.popen.pid}, gateway.popen.pid)
    out = run_json_command(
        [
            sys.executable,
            str(CLIENT),
            "latency",
            "--url",
            gateway.url + CHAT,
            "--question",
            args.question,
            "--model",
            MODEL,
            "--kinds",
            "semantic,exact,miss",
            "--requests",
            str(args.requests),
            "--warmup",
            str(C1_WARMUP),
            "--id-start",
            str(HTTP_IDS_START),
        ],
        cpu=LOADGEN_CPU,
        timeout=60 + args.requests * 0.2,
    )
    cpu = window.close()
    result: dict[str, Any] = {"window": cpu, "id_next": out["id_next"]}
    rows = []
    for kind in ("semantic", "exact", "miss"):
        runs = out["runs"][kind]
        s = stats([float(r["ms"]) for r in runs])
        result[kind] = {
            **s,
            "outcomes": outcomes(runs),
            "share_expected": share(runs, kind),
            "similarity": similarities(runs),
            "runs": runs if kind == "semantic" else [],
        }
        rows.append(
            [
                kind,
                len(runs),
                s["p50_ms"],
                s["p90_ms"],
                s["p99_ms"],
                s["mean_ms"],
                s["max_ms"],
                ", ".join(f"{k}: {v}" for k, v in sorted(outcomes(runs).items())),
            ]
        )
    print()
    print(table(["kind", "reqs", "p50 ms", "p90 ms", "p99 ms", "mean ms", "max ms", "got"], rows))
    sem = result["semantic"]
    sims = sem["similarity"]
    if sims:
        print(
            f"  semantic-hit similarity: min {sims['min']:.4f}, p50 {sims['p50']:.4f}, "
            f"max {sims['max']:.4f}"
        )
    result["semantic_minus_exact_p50_ms"] = sem["p50_ms"] - result["exact"]["p50_ms"]
    # Only semantic requests embed and search (exact hits stop before; no-cache, no-store
    # misses skip the lookup and the store), so the worker threads' CPU is theirs alone.
    n_sem = len(out["runs"]["semantic"]) + C1_WARMUP
    n_all = sum(len(v) for v in out["runs"].values()) + C1_WARMUP * len(out["runs"])
    result["embed_thread_cpu_ms_per_hit"] = 1000 * ratio(cpu["busiest_worker_cpu_s"], n_sem)
    result["other_workers_cpu_ms_per_hit"] = 1000 * ratio(cpu["other_workers_cpu_s"], n_sem)
    result["main_thread_cpu_ms_per_request"] = 1000 * ratio(cpu["main_thread_cpu_s"], n_all)
    result["meets_target"] = sem["p50_ms"] <= TARGET_P50_MS
    print(
        f"  semantic hit p50 {sem['p50_ms']:.3f} ms (target <= {TARGET_P50_MS} ms: "
        f"{verdict(result['meets_target'])}); semantic - exact at p50: "
        f"{result['semantic_minus_exact_p50_ms']:+.3f} ms; other CPU {cpu['other_cpu_pct']:.1f}%"
    )
    print(
        f"  gateway CPU per semantic hit: embedder thread "
        f"{result['embed_thread_cpu_ms_per_hit']:.3f} ms, other worker threads (vector search) "
        f"{result['other_workers_cpu_ms_per_hit']:.3f} ms; event-loop thread "
        f"{result['main_thread_cpu_ms_per_request']:.3f} ms per request (all three kinds)"
    )
    return result


# --------------------------------------------------------------------------------------------
# 2 + 3. throughput at concurrency 16 vs the embedder alone, interleaved rounds


def gateway_round(
    args: argparse.Namespace, gateway: Proc, sim: Proc, per_round: float, id_start: int
) -> dict[str, Any]:
    window = Window({"gateway": gateway.popen.pid, "sim": sim.popen.pid}, gateway.popen.pid)
    out = run_json_command(
        [
            sys.executable,
            str(CLIENT),
            "throughput",
            "--url",
            gateway.url + CHAT,
            "--question",
            args.question,
            "--model",
            MODEL,
            "--concurrency",
            str(args.concurrency),
            "--duration",
            f"{per_round:g}",
            "--warmup",
            "0.5",
            "--id-start",
            str(id_start),
        ],
        cpu=LOADGEN_CPU,
        timeout=60 + per_round * 2,
    )
    cpu = window.close()
    runs: list[dict[str, Any]] = out["runs"]
    sent = int(out["id_next"]) - int(out["id_start"])  # warm-up included; all completed
    s = stats([float(r["ms"]) for r in runs])
    busy_s = float(out["wall_s"]) + 0.5
    return {
        "requests": len(runs),
        "wall_s": out["wall_s"],
        "rps": ratio(len(runs), float(out["wall_s"])),
        **s,
        "outcomes": outcomes(runs),
        "semantic_share": share(runs, "semantic"),
        "similarity": similarities(runs),
        "sent_incl_warmup": sent,
        "gateway_cpu_ms_per_request": 1000 * ratio(cpu["gateway_cpu_s"], sent),
        "main_thread_cpu_ms_per_request": 1000 * ratio(cpu["main_thread_cpu_s"], sent),
        "embed_thread_cpu_ms_per_request": 1000 * ratio(cpu["busiest_worker_cpu_s"], sent),
        "other_workers_cpu_ms_per_request": 1000 * ratio(cpu["other_workers_cpu_s"], sent),
        "gateway_busy_pct": 100 * ratio(cpu["gateway_cpu_s"], busy_s),
        "client_busy_pct": 100 * ratio(float(out["client_cpu_s"]), float(out["wall_s"])),
        "window": cpu,
        "id_next": out["id_next"],
        "_non_semantic": [r for r in runs if r["cache"] != "semantic" or r["status"] != 200][:20],
        "_n_semantic": sum(1 for r in runs if r["cache"] == "semantic" and r["status"] == 200),
    }


def embed_round(args: argparse.Namespace, per_round: float, id_start: int) -> dict[str, Any]:
    window = Window({})
    out = run_json_command(
        [
            sys.executable,
            str(CLIENT),
            "embed",
            "--model-dir",
            str(MODEL_CACHE_DIR),
            "--threads",
            str(args.embedder_threads),
            "--question",
            args.question,
            "--duration",
            f"{per_round:g}",
            "--id-start",
            str(id_start),
        ],
        cpu=SERVER_CPU,
        timeout=60 + per_round * 2,
    )
    cpu = window.close()
    lat = [float(x) for x in out["latencies_ms"]]
    return {
        "model_id": out["model_id"],
        "load_s": out["load_s"],
        "texts": out["texts"],
        "wall_s": out["wall_s"],
        "texts_per_s": ratio(out["texts"], float(out["wall_s"])),
        **stats(lat),
        "cpu_ms_per_text": 1000 * ratio(float(out["cpu_s"]), out["texts"]),
        "window": cpu,
        "id_next": out["id_next"],
    }


def bench_throughput(
    args: argparse.Namespace, gateway: Proc, sim: Proc, http_ids: int
) -> dict[str, Any]:
    per_round = max(1.0, args.duration / args.rounds)
    banner(
        f"2+3. semantic hits at c{args.concurrency} vs the embedder alone on cpu {SERVER_CPU}: "
        f"{args.rounds} rounds of {per_round:g}s"
    )
    gw_rounds: list[dict[str, Any]] = []
    emb_rounds: list[dict[str, Any]] = []
    embed_ids = EMBED_IDS_START
    for index in range(args.rounds):
        order = ["embed", "gateway"] if index % 2 == 0 else ["gateway", "embed"]
        for side in order:
            if side == "gateway":
                res = gateway_round(args, gateway, sim, per_round, http_ids)
                http_ids = int(res["id_next"])
                gw_rounds.append(res)
            else:
                res = embed_round(args, per_round, embed_ids)
                embed_ids = int(res["id_next"])
                emb_rounds.append(res)
    if http_ids >= EMBED_IDS_START or embed_ids >= 100_000:
        print("  WARNING: text id ranges overlapped (some texts repeated)")
    rows: list[list[Any]] = []
    for index, (g, e) in enumerate(zip(gw_rounds, emb_rounds, strict=True)):
        rows.append(
            [
                f"gateway c{args.concurrency}",
                index + 1,
                g["requests"],
                g["rps"],
                g["p50_ms"],
                g["p99_ms"],
                g["gateway_cpu_ms_per_request"],
                g["gateway_busy_pct"],
                f"{100 * g['semantic_share']:.1f}%",
                g["window"]["other_cpu_pct"],
            ]
        )
        rows.append(
            [
                "embedder alone",
                index + 1,
                e["texts"],
                e["texts_per_s"],
                e["p50_ms"],
                e["p99_ms"],
                e["cpu_ms_per_text"],
                100 * ratio(e["cpu_ms_per_text"] * e["texts"] / 1000, e["wall_s"]),
                "",
                e["window"]["other_cpu_pct"],
            ]
        )
    print()
    print(
        table(
            [
                "run",
                "round",
                "done",
                "per s",
                "p50 ms",
                "p99 ms",
                "cpu ms/each",
                "busy %",
                "semantic",
                "other cpu %",
            ],
            rows,
        )
    )
    print(
        "  (cpu ms/each: CPU time of the gateway per request / of the embedder process per text;"
        "\n   busy %: of one CPU; other cpu %: machine CPU used by anything else, of all CPUs)"
    )
    g_requests = sum(int(g["requests"]) for g in gw_rounds)
    g_wall = sum(float(g["wall_s"]) for g in gw_rounds)
    e_texts = sum(int(e["texts"]) for e in emb_rounds)
    e_wall = sum(float(e["wall_s"]) for e in emb_rounds)
    g_rps, e_tps = ratio(g_requests, g_wall), ratio(e_texts, e_wall)
    g_cpu = ratio(
        sum(g["window"]["gateway_cpu_s"] for g in gw_rounds),
        sum(int(g["sent_incl_warmup"]) for g in gw_rounds),
    )
    e_cpu = ratio(sum(e["cpu_ms_per_text"] * e["texts"] for e in emb_rounds) / 1000, e_texts)
    sent_all = sum(int(g["sent_incl_warmup"]) for g in gw_rounds)
    threads_ms = {
        key: 1000 * ratio(sum(g["window"][key] for g in gw_rounds), sent_all)
        for key in ("main_thread_cpu_s", "busiest_worker_cpu_s", "other_workers_cpu_s")
    }
    rps_ratio = ratio(g_rps, e_tps)
    cpu_ratio = ratio(e_cpu, g_cpu)
    n_sem = sum(int(g["_n_semantic"]) for g in gw_rounds)
    non_semantic = [r for g in gw_rounds for r in g.pop("_non_semantic")]
    for g in gw_rounds:
        g.pop("_n_semantic")
    all_outcomes: Counter[str] = Counter()
    for g in gw_rounds:
        all_outcomes.update(g["outcomes"])
    result = {
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "per_round_s": per_round,
        "gateway_rounds": gw_rounds,
        "embedder_rounds": emb_rounds,
        "gateway_rps": g_rps,
        "gateway_requests": g_requests,
        "gateway_semantic": n_sem,
        "gateway_semantic_share": ratio(n_sem, g_requests),
        "gateway_outcomes": dict(all_outcomes),
        "gateway_p50_ms": statistics.median(float(g["p50_ms"]) for g in gw_rounds),
        "gateway_p99_ms": max(float(g["p99_ms"]) for g in gw_rounds),
        "gateway_cpu_ms_per_request": 1000 * g_cpu,
        "non_semantic_examples": non_semantic,
        "gateway_thread_cpu_ms_per_hit": {
            "event_loop": threads_ms["main_thread_cpu_s"],
            "embedder": threads_ms["busiest_worker_cpu_s"],
            "other_workers": threads_ms["other_workers_cpu_s"],
        },
        "embedder_texts_per_s": e_tps,
        "embedder_texts": e_texts,
        "embedder_p50_ms": statistics.median(float(e["p50_ms"]) for e in emb_rounds),
        "embedder_cpu_ms_per_text": 1000 * e_cpu,
        "embedder_model_id": emb_rounds[0]["model_id"],
        "ratio_rps_gateway_over_embedder": rps_ratio,
        "ratio_cpu_embedder_over_gateway": cpu_ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": rps_ratio >= TARGET_RATIO,
    }
    print(
        f"\n  gateway semantic hits/s at c{args.concurrency} {fmt(g_rps, 1)} / embedder texts/s "
        f"{fmt(e_tps, 1)} = {rps_ratio:.3f} (target >= {TARGET_RATIO}: "
        f"{verdict(rps_ratio >= TARGET_RATIO)})"
    )
    print(
        f"  CPU per item: embedder {1000 * e_cpu:.3f} ms/text, gateway {1000 * g_cpu:.3f} ms/hit"
        f" -> embedder/gateway {cpu_ratio:.3f} (the same ratio, robust to other load)"
    )
    print(
        f"  gateway CPU per hit by thread: event loop {threads_ms['main_thread_cpu_s']:.3f} ms, "
        f"embedder {threads_ms['busiest_worker_cpu_s']:.3f} ms, other workers (vector search) "
        f"{threads_ms['other_workers_cpu_s']:.3f} ms"
    )
    return result


# --------------------------------------------------------------------------------------------
# summary


def summary(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        "",
        "=" * 80,
        "SUMMARY (deja semantic-hit path; replica SIMULATED; one run, side by side)",
        "=" * 80,
        meta["pinning"],
        meta["load_at_start"],
        meta["gateway_caches"],
        f"question: {meta['question']!r}; hits: '<question> #<n>', n unique (five digits)",
    ]
    lat = results.get("latency")
    if lat:
        s, e, m = lat["semantic"], lat["exact"], lat["miss"]
        lines += [
            f"1. concurrency 1 ({int(s['n'])} requests per kind, sent in turn):",
            f"   semantic hit  p50 {fmt(s['p50_ms'])} ms  p99 {fmt(s['p99_ms'])} ms  "
            f"(target p50 <= {TARGET_P50_MS} ms: {verdict(lat['meets_target'])})",
            f"   exact hit     p50 {fmt(e['p50_ms'])} ms  p99 {fmt(e['p99_ms'])} ms",
            f"   forced miss   p50 {fmt(m['p50_ms'])} ms  p99 {fmt(m['p99_ms'])} ms",
            f"   semantic - exact at p50 {lat['semantic_minus_exact_p50_ms']:+.3f} ms "
            "(embedding + vector search + executor hop)",
        ]
        lines.append(
            f"   gateway CPU per semantic hit at c1: embedder thread "
            f"{fmt(lat['embed_thread_cpu_ms_per_hit'])} ms, vector search (other workers) "
            f"{fmt(lat['other_workers_cpu_ms_per_hit'])} ms; event loop "
            f"{fmt(lat['main_thread_cpu_ms_per_request'])} ms/request (avg of the three kinds)"
        )
    tp = results.get("throughput")
    if tp:
        lines += [
            f"2. semantic hits at c{tp['concurrency']}: {fmt(tp['gateway_rps'], 1)} req/s "
            f"(p50 {fmt(tp['gateway_p50_ms'])} ms, p99 {fmt(tp['gateway_p99_ms'])} ms; "
            f"gateway CPU {fmt(tp['gateway_cpu_ms_per_request'])} ms/hit)",
            f"   gateway CPU per hit by thread: event loop "
            f"{fmt(tp['gateway_thread_cpu_ms_per_hit']['event_loop'])} ms, embedder "
            f"{fmt(tp['gateway_thread_cpu_ms_per_hit']['embedder'])} ms, other workers (vector"
            f" search) {fmt(tp['gateway_thread_cpu_ms_per_hit']['other_workers'])} ms",
            f"3. embedder alone, cpu {SERVER_CPU}, one text at a time: "
            f"{fmt(tp['embedder_texts_per_s'], 1)} texts/s (p50 {fmt(tp['embedder_p50_ms'])} ms,"
            f" CPU {fmt(tp['embedder_cpu_ms_per_text'])} ms/text; {tp['embedder_model_id']})",
            f"4. ratio gateway/embedder = {tp['ratio_rps_gateway_over_embedder']:.3f} "
            f"(target >= {TARGET_RATIO}: {verdict(tp['meets_target'])}); from CPU per item "
            f"{tp['ratio_cpu_embedder_over_gateway']:.3f}",
        ]
    sem = results.get("semantic_share")
    if sem:
        lines.append(
            f"semantic share of hit requests: {100 * sem['share']:.2f}% of {sem['requests']} "
            f"(c1 {100 * sem['c1']:.2f}%, c{tp['concurrency'] if tp else '?'} "
            f"{100 * sem['concurrent']:.2f}%; required >= {100 * SEMANTIC_SHARE_MIN:.0f}%): "
            + ("OK" if sem["ok"] else "FAILED - the figures above are NOT semantic hits")
        )
    for warning in results.get("warnings", []):
        lines.append(f"WARNING: {warning}")
    lines.append("=" * 80)
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--requests", type=int, default=300, help="sequential requests per kind at c1 (300)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=8.0,
        help="seconds measured per side (gateway c16, embedder), split into --rounds (8)",
    )
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    parser.add_argument(
        "--question",
        default=QUESTION,
        help="the cached question; hits are '<question> #<n>' (must stay >= θ from it)",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="workers (default 16)")
    parser.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment of the gateway (repeatable)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "semantic_paths.json")
    args = parser.parse_args()
    extra: dict[str, str] = {}
    for item in args.gateway_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--gateway-env wants KEY=VALUE, got {item!r}")
        extra[key] = value
    args.gateway_env = extra
    args.rounds = max(1, args.rounds)
    return args


def cache_note(config: dict[str, Any] | None) -> str:
    if config is None:
        return "gateway config: unknown (deja serve --print-config failed)"
    keys = (
        "cache_enabled",
        "redis_url",
        "semantic_enabled",
        "semantic_threshold",
        "semantic_timeout_seconds",
        "embedder",
        "embedder_threads",
        "embedder_batching",
        "qdrant_url",
    )
    return "gateway config: " + ", ".join(f"{k}={config[k]}" for k in keys if k in config)


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {**run_meta(args, "SIMULATED (deja sim --speed 0)"), "question": args.question},
        "warnings": [],
    }
    print("deja semantic-hit path benchmark -- the replica is SIMULATED (deja sim)")
    print(pinning_note())
    print(results["meta"]["load_at_start"])
    gw_extra = {
        "DEJA_CACHE_ENABLED": "true",
        "DEJA_SEMANTIC_ENABLED": "true",
        "DEJA_SEMANTIC_THRESHOLD": THRESHOLD,
        "DEJA_MODEL_DIR": str(MODEL_CACHE_DIR),
        **args.gateway_env,
    }
    env = gateway_env(["http://127.0.0.1:1"], gw_extra)
    config = gateway_config(env)
    results["meta"]["gateway_env"] = {k: v for k, v in env.items() if k != "DEJA_REPLICAS"}
    results["meta"]["gateway_config"] = config
    results["meta"]["gateway_caches"] = cache_note(config)
    print(results["meta"]["gateway_caches"])
    if config is not None and config.get("embedder") != "onnx":
        print("BENCHMARK FAILED: the gateway's embedder is not onnx", file=sys.stderr)
        return 1
    args.embedder_threads = int(config.get("embedder_threads", 1)) if config else 1

    def body() -> None:
        banner("setup: simulated replica (speed 0) + gateway, prime the cache")
        sim = start_sim("sim", cpu=LOADGEN_CPU, args=["--speed", "0"])
        gateway = start_gateway("gateway", [sim.url], cpu=SERVER_CPU, env=gw_extra)
        try:
            results["prime"] = prime(gateway, args.question)
            results["latency"] = bench_latency(args, gateway, sim)
            results["throughput"] = bench_throughput(
                args, gateway, sim, int(results["latency"].pop("id_next"))
            )
        finally:
            stop_process(gateway)
            stop_process(sim)

    failed = run_guarded(body)
    if failed is not None:
        return failed

    lat, tp = results["latency"], results["throughput"]
    c1_runs = lat["semantic"].pop("runs")
    c1_sem = sum(1 for r in c1_runs if r["status"] == 200 and r["cache"] == "semantic")
    total = len(c1_runs) + int(tp["gateway_requests"])
    semantic = c1_sem + int(tp["gateway_semantic"])
    results["semantic_share"] = {
        "requests": total,
        "semantic": semantic,
        "share": ratio(semantic, total),
        "c1": ratio(c1_sem, len(c1_runs)),
        "concurrent": tp["gateway_semantic_share"],
        "required": SEMANTIC_SHARE_MIN,
        "ok": ratio(semantic, total) >= SEMANTIC_SHARE_MIN,
    }
    for kind in ("exact", "miss"):
        if lat[kind]["share_expected"] < 1.0:
            results["warnings"].append(
                f"c1 {kind} requests got {lat[kind]['outcomes']} (expected all 200 {kind})"
            )
    results["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    results["meta"]["commands"] = list(COMMANDS)
    print("\ncommands:")
    for line in COMMANDS:
        print(f"  $ {line}")
    print(summary(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, allow_nan=True) + "\n")
    print(f"results written to {args.output} (wall time {results['meta']['wall_s']} s)")
    if not results["semantic_share"]["ok"]:
        share_pct = 100 * results["semantic_share"]["share"]
        print(
            f"\nBENCHMARK FAILED: only {share_pct:.2f}% of the semantic-hit requests came back "
            f"X-Deja-Cache: semantic (need >= {100 * SEMANTIC_SHARE_MIN:.0f}%); outcomes c1 "
            f"{lat['semantic']['outcomes']}, c{tp['concurrency']} {tp['gateway_outcomes']}; "
            f"examples: {tp['non_semantic_examples'][:5]}",
            file=sys.stderr,
        )
        return 1
    remove_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
