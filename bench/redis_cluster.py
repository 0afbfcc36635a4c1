"""Exact hits from a Redis Cluster vs one Redis, side by side in ONE run, and the failover window.

Two backends are started on loopback: one ``redis-server``, and a local Redis Cluster of three
masters and three replicas (the suite's ``tests/rediscluster.py``). For each backend one
``deja serve --workers N`` (N gateway processes sharing a socket; the semantic layer and the
corpora off) fronts one SIMULATED replica at ``--speed 0``. ``--questions`` distinct questions
are asked once (stored), then ``wrk`` cycles through them (exact hits; on the cluster their
keys spread over all three masters), node and cluster interleaved round by round (A B, B A).
The gateways run on the server CPU; wrk, the replica and every redis-server (the node and all
six of the cluster) on the load generator's CPU, so what differs between the backends on the
gateways' CPU is the client's own work. Both backends stay up for the whole run: idle, the
other backend's gateways and redis-servers cost under 2% of one CPU (measured: the cluster's
six redis-servers 12-14 ms/s, either pair of idle gateways 5-8 ms/s).

Two variants: the client-side tier off (``DEJA_REDIS_CLIENT_CACHE=false``: every hit reads
Redis, so the figure is the client cost of cluster routing: per-node pipelines, slot lookups)
and the default (the tier on: most hits never leave the process). Throughput per gateway process
is total req/s over N.

Then the failover: one gateway on the cluster, ``--clients`` asking the stored questions over
and over; the master holding some of them is killed (SIGKILL). Reported: the kill-to-promotion
time, promotion to the first exact hit on the moved slots, and every reply's outcome (5xx and
wrong answers must be zero).

Targets (issue 25): cluster >= 0.8x single-Redis exact-hit throughput per gateway process;
zero wrong answers and zero 5xx through the kill; hits back within 10 s of the promotion.

    .venv/bin/python bench/redis_cluster.py --duration 40 --rounds 4   # ~3.5 min
    .venv/bin/python bench/redis_cluster.py [--duration 10] [--workers 2] [--connections 32]

Writes ``bench/results/redis_cluster.json``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (
    HOST,
    LOADGEN_CPU,
    PINNING,
    RESULTS_DIR,
    SERVER_CPU,
    WRK_DONE_LUA,
    Proc,
    Target,
    _lua_string,
    banner,
    combine,
    deja_bin,
    free_port,
    gateway_env,
    load_note,
    log_dir,
    pinning_note,
    ratio,
    run_guarded,
    run_meta,
    run_wrk,
    start_process,
    start_sim,
    stop_process,
    table,
    verdict,
    wait_ready,
)

from tests.rediscluster import LocalRedisCluster
from tests.support import RedisServer

MODEL = "deja-sim-1"
KEY_PREFIX = "deja:x:"
CHAT = "/v1/chat/completions"
#: ``--gateway-env`` settings, for every gateway of the run.
EXTRA_ENV: dict[str, str] = {}


def children(pid: int) -> list[int]:
    """The worker processes of ``deja serve --workers N`` (their CPU counts too)."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def start_gateway(
    name: str, replica: str, redis_url: str, workers: int, extra: dict[str, str]
) -> Proc:
    port = free_port()
    env = gateway_env(
        [replica],
        {
            "DEJA_REDIS_URL": redis_url,
            "DEJA_SEMANTIC_ENABLED": "false",
            "DEJA_CORPORA_ENABLED": "false",
            "DEJA_WORKERS": str(workers),
            **EXTRA_ENV,
            **extra,
        },
    )
    proc = start_process(
        name,
        [deja_bin(), "serve", "--host", HOST, "--port", str(port)],
        cpu=SERVER_CPU,
        env=env,
        port=port,
    )
    wait_ready(proc, "/readyz", timeout=90)
    return proc


def bodies(count: int, tag: str) -> list[bytes]:
    return [
        json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": f"{tag} question {i}"}]}
        ).encode()
        for i in range(count)
    ]


def prime(url: str, requests: list[bytes]) -> dict[str, tuple[bytes, str]]:
    """Ask each question once (stored), then until it is an exact hit; returns entry id ->
    (body, answer text)."""
    headers = {"content-type": "application/json"}
    found: dict[str, tuple[bytes, str]] = {}
    with httpx.Client(base_url=url, timeout=30, headers=headers) as http:
        for raw in requests:
            first = http.post(CHAT, content=raw)
            first.raise_for_status()
            found[first.headers["x-deja-entry"]] = (
                raw,
                first.json()["choices"][0]["message"]["content"],
            )
        deadline = time.monotonic() + 20
        for raw, _ in found.values():
            while http.post(CHAT, content=raw).headers.get("x-deja-cache") != "exact":
                if time.monotonic() > deadline:
                    raise RuntimeError("stored answers did not become exact hits")
                time.sleep(0.05)
    return found


def cycling_lua(requests: list[bytes]) -> Path:
    """A wrk script that cycles through ``requests`` (one per call) and prints exact
    percentiles on one ``DEJA_STATS`` line (as ``common.write_lua``)."""
    lines = ["local bodies = {"]
    lines += [f"  {_lua_string(raw)}," for raw in requests]
    lines += [
        "}",
        "local i = 0",
        'wrk.method = "POST"',
        'wrk.headers["content-type"] = "application/json"',
        "request = function()",
        "  i = i % #bodies + 1",
        "  return wrk.format(nil, nil, nil, bodies[i])",
        "end",
        *WRK_DONE_LUA,
    ]
    path = log_dir() / f"cycle-{uuid.uuid4().hex[:8]}.lua"
    path.write_text("\n".join(lines) + "\n")
    return path


def replica_requests(replica: str) -> float:
    """Requests the simulated replica has answered so far: every reply during a round that was
    not an exact hit (``off`` after a Redis timeout, a miss) reached it."""
    text = httpx.get(replica + "/metrics", timeout=10).text
    return sum(
        float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M)
    )


def redis_pids(node: RedisServer, cluster: LocalRedisCluster) -> dict[str, list[int]]:
    """The redis-server processes of each backend (the cluster's replicas too)."""
    return {
        "node": [node.proc.pid] if node.proc else [],
        "cluster": [n.proc.pid for n in cluster.nodes if n.proc is not None],
    }


def pin_backends(pids: dict[str, list[int]]) -> None:
    """Every redis-server on the load generator's CPU (as bench/exact_stores.py does): the
    gateways' CPU then runs gateways only, so what differs between the backends there is the
    client's work, not six redis-servers scheduled next to the gateways."""
    if PINNING:
        for pid in (p for group in pids.values() for p in group):
            os.sched_setaffinity(pid, {LOADGEN_CPU})


def cluster_epoch(cluster: LocalRedisCluster) -> int:
    """The cluster's config epoch: it grows with every failover (a node timed out under load
    during the rounds would make the figures incomparable)."""
    info = cluster.masters()[0].client().execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    found = re.search(r"cluster_current_epoch:(\d+)", text)
    return int(found.group(1)) if found else -1


def rounds(
    args: argparse.Namespace, targets: list[Target], replica: str
) -> tuple[list[list[Any]], dict[str, list[float]]]:
    """``args.rounds`` rounds, node and cluster alternating A B, B A, ...; per round and
    backend the wrk result and how many replies the replica answered (not exact hits)."""
    runs: list[list[Any]] = [[] for _ in targets]
    uncached: dict[str, list[float]] = {t.label: [] for t in targets}
    per_round = max(1.0, args.duration / max(1, args.rounds))
    for index in range(max(1, args.rounds)):
        order = list(range(len(targets)))[:: -1 if index % 2 else 1]
        for i in order:
            target, before = targets[i], replica_requests(replica)
            runs[i].append(
                run_wrk(
                    target.label,
                    target.url,
                    lua=target.lua,
                    connections=args.connections,
                    duration=per_round,
                    watch=target.watch,
                )
            )
            uncached[target.label].append(replica_requests(replica) - before)
    return runs, uncached


def throughput(
    args: argparse.Namespace,
    replica: str,
    backends: dict[str, tuple[str, list[int]]],
    variant: str,
    extra: dict[str, str],
) -> dict[str, Any]:
    """Exact hits through ``args.workers`` gateway processes per backend, interleaved."""
    banner(f"exact hits, {args.workers} gateway processes per backend, {variant}")
    gateways = {
        name: start_gateway(f"gw-{name}-{variant}", replica, url, args.workers, extra)
        for name, (url, _) in backends.items()
    }
    try:
        targets = []
        for name, gw in gateways.items():
            prime(gw.url, bodies(args.questions, f"{variant}"))
            lua = cycling_lua(bodies(args.questions, f"{variant}"))
            watch = {f"gw{p}": p for p in [gw.popen.pid, *children(gw.popen.pid)]}
            watch.update({f"redis{p}": p for p in backends[name][1]})
            targets.append(Target(name, gw.url + CHAT, lua, watch))
        runs, uncached = rounds(args, targets, replica)
    finally:
        for gw in gateways.values():
            stop_process(gw)
    logs = {name: gw.log_path.read_text(errors="replace") for name, gw in gateways.items()}
    combined = [combine(t.label, r) for t, r in zip(targets, runs, strict=True)]
    node, cluster = combined

    def per_hit(r: Any, prefix: str) -> float:
        used = sum(v for k, v in r.cpu_s.items() if k.startswith(prefix))
        return float(used / r.requests * 1e6) if r.requests else math.nan

    cpu = {r.label: per_hit(r, "gw") for r in combined}
    return {
        "variant": variant,
        "runs": {r.label: r.as_dict() for r in combined},
        "rounds": {t.label: [r.as_dict() for r in rs] for t, rs in zip(targets, runs, strict=True)},
        "per_process_rps": {r.label: r.rps / args.workers for r in combined},
        "ratio": ratio(cluster.rps, node.rps),
        "round_ratios": [ratio(c.rps, n.rps) for n, c in zip(runs[0], runs[1], strict=True)],
        "cpu_us_per_hit": cpu,
        "cpu_ratio": ratio(cpu["cluster"], cpu["node"]),
        "redis_cpu_us_per_hit": {r.label: per_hit(r, "redis") for r in combined},
        "not_cached": {k: sum(v) for k, v in uncached.items()},
        # Warnings in the gateways' logs: the store cooling down after a Redis timeout (its
        # answers go out ``off`` meanwhile), the tier's subscription lost (hits read Redis).
        "cache_off_events": {k: v.count("exact cache off for now") for k, v in logs.items()},
        "tier_lost_events": {k: v.count("invalidations lost") for k, v in logs.items()},
        "p99_ms": {r.label: r.p99_ms for r in combined},
        "errors": {r.label: r.errors for r in combined},
    }


async def failover_load(
    url: str, questions: dict[str, tuple[bytes, str]], clients: int, cluster: LocalRedisCluster
) -> dict[str, Any]:
    """Kill the master of some stored answers while ``clients`` ask them all."""
    victim = cluster.master_of(KEY_PREFIX + next(iter(questions)))
    moved = {e for e in questions if cluster.master_of(KEY_PREFIX + e) == victim}
    replies: list[tuple[float, int, str, str, bool]] = []
    stop, hits_back = asyncio.Event(), asyncio.Event()
    promoted = float("inf")
    order = list(questions.items())

    async def client(offset: int, http: httpx.AsyncClient) -> None:
        i = offset
        while not stop.is_set():
            entry, (raw, text) = order[i % len(order)]
            i += 1
            resp = await http.post(CHAT, content=raw)
            right = (
                resp.status_code != 200 or resp.json()["choices"][0]["message"]["content"] == text
            )
            hit = resp.headers.get("x-deja-cache") == "exact"
            if hit and entry in moved and time.monotonic() >= promoted:
                hits_back.set()
            replies.append(
                (
                    time.monotonic(),
                    resp.status_code,
                    resp.headers.get("x-deja-cache", ""),
                    entry,
                    right,
                )
            )

    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as http:
        tasks = [asyncio.create_task(client(i, http)) for i in range(clients)]
        await asyncio.sleep(2.0)
        killed = time.monotonic()
        cluster.kill(victim)
        promoted = await asyncio.to_thread(cluster.wait_promoted, victim)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hits_back.wait(), 15.0)
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*tasks)
    hits = [t for t, _, o, e, _ in replies if t >= promoted and o == "exact" and e in moved]
    first_hit = min(hits) if hits else None
    during = [r for r in replies if killed <= r[0] <= (first_hit or promoted)]
    return {
        "moved_entries": len(moved),
        "entries": len(questions),
        "kill_to_promotion_s": promoted - killed,
        "promotion_to_hits_s": (first_hit - promoted) if first_hit else None,
        "replies": len(replies),
        "status_5xx": sum(1 for r in replies if r[1] >= 500),
        "non_200": sum(1 for r in replies if r[1] != 200),
        "wrong_answers": sum(1 for r in replies if not r[4]),
        "outcomes_in_window": {
            o: sum(1 for r in during if r[2] == o) for o in {r[2] for r in during}
        },
    }


def failover(args: argparse.Namespace, replica: str, cluster: LocalRedisCluster) -> dict[str, Any]:
    banner("failover: SIGKILL on a master under load (client-side tier on)")
    gw = start_gateway("gw-failover", replica, cluster.url, 1, {})
    try:
        questions = prime(gw.url, bodies(args.questions, "failover"))
        return asyncio.run(failover_load(gw.url, questions, args.clients, cluster))
    finally:
        stop_process(gw)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=10, help="seconds per variant and backend"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="gateway processes per backend")
    parser.add_argument("--questions", type=int, default=64, help="distinct stored questions")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients in the failover")
    parser.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a DEJA_* setting for every gateway, e.g. DEJA_REDIS_TIMEOUT_SECONDS=1 (repeatable)",
    )
    return parser.parse_args()


def summary(results: dict[str, Any], args: argparse.Namespace) -> None:
    banner("summary (machine shared with other work: read the ratios)")
    rows = []
    for run in results["throughput"]:
        for name in ("node", "cluster"):
            r: dict[str, Any] = run["runs"][name]
            per_round = [x["rps"] / args.workers for x in run["rounds"][name]]
            rows.append(
                [
                    run["variant"],
                    name,
                    r["rps"],
                    run["per_process_rps"][name],
                    f"{min(per_round):,.0f}-{max(per_round):,.0f}",
                    r["p50_ms"],
                    r["p99_ms"],
                    run["cpu_us_per_hit"][name],
                    run["redis_cpu_us_per_hit"][name],
                    run["not_cached"][name],
                    run["cache_off_events"][name],
                    run["tier_lost_events"][name],
                    r["non_2xx"] + r["socket_errors"],
                ]
            )
    headers = ["variant", "backend", "req/s", "req/s/process", "rounds/process", "p50 ms"]
    headers += ["p99 ms", "gw CPU µs/hit", "redis CPU µs/hit", "not cached", "cache off"]
    headers += ["tier lost", "errors"]
    print(table(headers, rows))
    for run in results["throughput"]:
        ok = run["ratio"] >= 0.8
        spread = ", ".join(f"{x:.2f}" for x in run["round_ratios"])
        print(
            f"cluster / one Redis, {run['variant']}: throughput per process {run['ratio']:.3f}"
            f" ({verdict(ok)}: target >= 0.8; rounds {spread}), gateway CPU per hit"
            f" {run['cpu_ratio']:.3f}"
        )
    epochs = results["cluster_epochs"]
    if epochs[0] != epochs[1]:
        print(f"WARNING: the cluster failed over during the rounds (epoch {epochs}): rerun")
    f = results["failover"]
    back = f["promotion_to_hits_s"]
    ok = f["status_5xx"] == 0 and f["wrong_answers"] == 0 and back is not None and back <= 10
    print(
        f"failover: promotion {f['kill_to_promotion_s']:.2f} s after the kill; exact hits on the "
        f"moved slots {back if back is None else round(back, 2)} s after promotion; "
        f"{f['replies']} replies, {f['status_5xx']} 5xx, {f['wrong_answers']} wrong; in the "
        f"window: {f['outcomes_in_window']} ({verdict(ok)})"
    )
    print(results["meta"]["load_at_start"])
    print(results["load_at_end"])


def main() -> int:
    args = parse_args()
    EXTRA_ENV.update(item.split("=", 1) for item in args.gateway_env)
    results: dict[str, Any] = {"meta": run_meta(args, "deja sim --speed 0 (SIMULATED)")}
    print(pinning_note() + " Every redis-server is pinned there too.")
    print(results["meta"]["load_at_start"])

    def body() -> None:
        node = RedisServer()
        node.start()
        cluster = LocalRedisCluster()
        try:
            cluster.start()
            pids = redis_pids(node, cluster)
            pin_backends(pids)
            sim = start_sim("sim", cpu=LOADGEN_CPU)
            replica = f"http://{HOST}:{sim.port}"
            backends = {"node": (node.url, pids["node"]), "cluster": (cluster.url, pids["cluster"])}
            epoch = cluster_epoch(cluster)
            results["throughput"] = [
                throughput(
                    args, replica, backends, "tier off", {"DEJA_REDIS_CLIENT_CACHE": "false"}
                ),
                throughput(args, replica, backends, "tier on", {}),
            ]
            results["cluster_epochs"] = [epoch, cluster_epoch(cluster)]
            results["failover"] = failover(args, replica, cluster)
            results["load_at_end"] = load_note().replace("before start", "at the end")
            summary(results, args)
            RESULTS_DIR.mkdir(exist_ok=True)
            (RESULTS_DIR / "redis_cluster.json").write_text(
                json.dumps(results, indent=2, default=str)
            )
        finally:
            cluster.stop()
            node.stop()

    return run_guarded(body) or 0


if __name__ == "__main__":
    raise SystemExit(main())
