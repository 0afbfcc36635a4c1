"""Exact hits from a Redis Cluster vs one Redis, side by side in ONE run, and the failover window.

Two backends are started on loopback: one ``redis-server``, and a local Redis Cluster of three
masters and three replicas (the suite's ``tests/rediscluster.py``). For each backend one
``deja serve --workers N`` (N gateway processes sharing a socket; the semantic layer and the
corpora off) fronts one SIMULATED replica at ``--speed 0``. ``--questions`` distinct questions
are asked once (stored), then ``wrk`` cycles through them (exact hits; on the cluster their
keys spread over all three masters), node and cluster interleaved round by round.

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

    .venv/bin/python bench/redis_cluster.py [--duration 10] [--workers 2] [--connections 32]

Writes ``bench/results/redis_cluster.json``. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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
    RESULTS_DIR,
    SERVER_CPU,
    WRK_DONE_LUA,
    Proc,
    Target,
    _lua_string,
    banner,
    deja_bin,
    free_port,
    gateway_env,
    log_dir,
    ratio,
    run_guarded,
    run_interleaved,
    run_meta,
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


def throughput(
    args: argparse.Namespace,
    replica: str,
    urls: dict[str, str],
    variant: str,
    extra: dict[str, str],
) -> dict[str, Any]:
    """Exact hits through ``args.workers`` gateway processes per backend, interleaved."""
    banner(f"exact hits, {args.workers} gateway processes per backend, {variant}")
    gateways = {
        name: start_gateway(f"gw-{name}-{variant}", replica, url, args.workers, extra)
        for name, url in urls.items()
    }
    try:
        targets = []
        for name, gw in gateways.items():
            prime(gw.url, bodies(args.questions, f"{variant}"))
            lua = cycling_lua(bodies(args.questions, f"{variant}"))
            pids = [gw.popen.pid, *children(gw.popen.pid)]
            targets.append(Target(name, gw.url + CHAT, lua, {f"pid{p}": p for p in pids}))
        combined, _ = run_interleaved(
            targets, connections=args.connections, duration=args.duration, rounds=args.rounds
        )
    finally:
        for gw in gateways.values():
            stop_process(gw)
    node, cluster = combined
    cpu = {
        r.label: sum(r.cpu_s.values()) / r.requests * 1e6 if r.requests else 0.0 for r in combined
    }
    return {
        "cpu_us_per_hit": cpu,
        "cpu_ratio": ratio(cpu["cluster"], cpu["node"]),
        "variant": variant,
        "runs": {r.label: r.as_dict() for r in combined},
        "per_process_rps": {r.label: r.rps / args.workers for r in combined},
        "ratio": ratio(cluster.rps, node.rps),
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
    return parser.parse_args()


def summary(results: dict[str, Any], args: argparse.Namespace) -> None:
    banner("summary (machine shared with other work: read the ratios)")
    rows = []
    for run in results["throughput"]:
        for name in ("node", "cluster"):
            r: dict[str, Any] = run["runs"][name]
            rows.append(
                [
                    run["variant"],
                    name,
                    r["rps"],
                    run["per_process_rps"][name],
                    r["p50_ms"],
                    r["p99_ms"],
                    run["cpu_us_per_hit"][name],
                    r["non_2xx"] + r["socket_errors"],
                ]
            )
    print(
        table(
            [
                "variant",
                "backend",
                "req/s",
                "req/s/process",
                "p50 ms",
                "p99 ms",
                "CPU µs/hit",
                "errors",
            ],
            rows,
        )
    )
    for run in results["throughput"]:
        ok = run["ratio"] >= 0.8
        name, value, cpu = run["variant"], run["ratio"], run["cpu_ratio"]
        print(
            f"cluster / one Redis, {name}: throughput {value:.3f} ({verdict(ok)}: target >= 0.8),"
            f" gateway CPU per hit {cpu:.3f}"
        )
    f = results["failover"]
    back = f["promotion_to_hits_s"]
    ok = f["status_5xx"] == 0 and f["wrong_answers"] == 0 and back is not None and back <= 10
    print(
        f"failover: promotion {f['kill_to_promotion_s']:.2f} s after the kill; exact hits on the "
        f"moved slots {back if back is None else round(back, 2)} s after promotion; "
        f"{f['replies']} replies, {f['status_5xx']} 5xx, {f['wrong_answers']} wrong; in the "
        f"window: {f['outcomes_in_window']} ({verdict(ok)})"
    )


def main() -> int:
    args = parse_args()
    results: dict[str, Any] = {"meta": run_meta(args, "deja sim --speed 0 (SIMULATED)")}

    def body() -> None:
        node = RedisServer()
        node.start()
        cluster = LocalRedisCluster()
        try:
            cluster.start()
            sim = start_sim("sim", cpu=None)
            replica = f"http://{HOST}:{sim.port}"
            urls = {"node": node.url, "cluster": cluster.url}
            results["throughput"] = [
                throughput(args, replica, urls, "tier off", {"DEJA_REDIS_CLIENT_CACHE": "false"}),
                throughput(args, replica, urls, "tier on", {}),
            ]
            results["failover"] = failover(args, replica, cluster)
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
