"""Verified vs unverified semantic-hit latency, side by side in ONE run.

Two gateways in front of one SIMULATED replica (``deja sim --speed 0``):

* **verified**: the shipped cross-encoder verifier on (the default), precision target
  ``--precision`` (default 0.92, the default of ``DEJA_SEMANTIC_PRECISION``): embed, top-k
  search above the calibration floor, one verifier call (the candidates scored pair by pair on
  its thread), cut-off τ;
* **unverified**: ``DEJA_SEMANTIC_VERIFIER=off`` with ``DEJA_SEMANTIC_THRESHOLD=0.80``: embed,
  search, cosine alone decides.

Each gateway is primed with one question (``"How do I configure the agent?"``, sent with
``Cache-Control: no-cache`` so it is stored under its own entry); its paraphrase (``"What is the
process for configuring the agent?"``) is then sent with ``Cache-Control: no-store`` (look up,
never store) again and again. Every answer's ``X-Deja-Cache`` must be ``semantic`` and its
``X-Deja-Entry`` the primed question's entry. When the verified gateway does not serve the
first pair as a semantic hit (the verifier judges it below τ), the next pair of a short list
(``PAIRS``) is tried until one hits on both gateways; the pair used is printed and recorded.

1. concurrency 1: ``--requests`` (default 300, after 20 warm-up rounds) of each kind, sent in
   turn by one client process over keep-alive connections: verified semantic, unverified
   semantic, and as a reference an exact hit (the primed question itself, ``no-store``) on each
   gateway. p50/p90/p99; target: verified semantic hit p50 <= 12 ms.
2. concurrency 16: 16 workers send the paraphrase back to back for ``--duration`` seconds per
   gateway (default 10, after 1 s of warm-up), in interleaved rounds (V U, then U V), so drift
   hits both alike. p50/p99, hits/s and the gateway's CPU milliseconds per request.
3. ratios verified / unverified of p50 and p99 at c=1 and c=16, of hits/s and CPU per request.

Pinned like ``semantic_paths.py``: both gateways on cpu 0 (only one is driven at a time), the
replica and the client (this script in ``client`` mode, its own process, aiohttp) on cpu 1.
Shadow checks are off (``DEJA_SEMANTIC_SHADOW_RATE=0``); everything else is the default (the
temporal bypass and its classifier included: they are part of a real hit's path).

    .venv/bin/python bench/semantic_latency.py [--requests 300] [--duration 10] [--precision 0.92]

Exit status 1 when a gateway did not come up, no pair hit on both, or any measured answer was
not the expected kind. Writes ``bench/results/semantic_latency.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from common import (
    COMMANDS,
    LOADGEN_CPU,
    MODEL_CACHE_DIR,
    RESULTS_DIR,
    SERVER_CPU,
    BenchError,
    Proc,
    banner,
    cpu_seconds,
    log_dir,
    percentile,
    pinning_note,
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
#: (cached question, paraphrase), tried in order until the verified gateway serves one.
PAIRS = (
    ("How do I configure the agent?", "What is the process for configuring the agent?"),
    ("How do I configure the agent?", "How can I configure the agent?"),
    ("How do I reset my password?", "How can I reset my password?"),
    ("How do I install Python on Windows?", "How can I install Python on Windows?"),
    (
        "What is the best way to learn Spanish?",
        "What is the best way to learn the Spanish language?",
    ),
    ("How do I change the font size in Word?", "How can I change the font size in Microsoft Word?"),
)
#: Suffixes that make close but different questions of the chosen one: primed in phase 3 so the
#: paraphrase's scope holds several candidates above θ and the verifier scores ``k`` of them.
DENSE_SUFFIXES = (" on my phone", " without losing data", " for my work account", " in 2015")
UNVERIFIED_THETA = "0.80"
TARGET_P50_MS = 12.0
C1_WARMUP = 20
LOAD_WARMUP_S = 1.0
SELF = Path(__file__).resolve()


# --------------------------------------------------------------------------------------------
# client mode (its own process, pinned to the load-generator CPU)


def chat_body(text: str) -> bytes:
    payload = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    return json.dumps(payload, separators=(",", ":")).encode()


async def send(session: Any, target: dict[str, Any]) -> tuple[float, str]:
    """One POST; milliseconds to the end of the body and ``"<status> <cache>"`` (``-wrong-entry``
    appended when the hit came from another entry than expected)."""
    headers = {"content-type": "application/json", "cache-control": "no-store"}
    start = time.perf_counter()
    async with session.post(target["url"], data=target["body"], headers=headers) as response:
        await response.read()
        ms = (time.perf_counter() - start) * 1000
        outcome = f"{response.status} {response.headers.get('x-deja-cache')}"
        if response.headers.get("x-deja-entry") != target["entry"]:
            outcome += "-wrong-entry"
    return ms, outcome


async def client_c1(spec: dict[str, Any]) -> dict[str, Any]:
    """Every target in turn, one request at a time, ``requests`` rounds after ``warmup``."""
    import aiohttp

    targets = spec["targets"]
    for t in targets:
        t["body"] = chat_body(t["text"])
    sessions = [
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), auto_decompress=False)
        for _ in targets
    ]
    runs: dict[str, list[float]] = {t["name"]: [] for t in targets}
    outcomes: dict[str, Counter[str]] = {t["name"]: Counter() for t in targets}
    try:
        for i in range(spec["warmup"] + spec["requests"]):
            for session, target in zip(sessions, targets, strict=True):
                ms, outcome = await send(session, target)
                if i >= spec["warmup"]:
                    runs[target["name"]].append(ms)
                    outcomes[target["name"]][outcome] += 1
    finally:
        for session in sessions:
            await session.close()
    return {"runs": runs, "outcomes": {k: dict(v) for k, v in outcomes.items()}}


async def client_load(spec: dict[str, Any]) -> dict[str, Any]:
    """``concurrency`` workers on one target for ``warmup + duration`` seconds."""
    import aiohttp

    target = spec["target"]
    target["body"] = chat_body(target["text"])
    connector = aiohttp.TCPConnector(limit=spec["concurrency"])
    ms_measured: list[float] = []
    outcomes: Counter[str] = Counter()
    sent = 0
    started = time.perf_counter()
    measure_from = started + spec["warmup"]
    deadline = measure_from + spec["duration"]
    cpu_at: list[float] = []

    async def worker(session: Any) -> None:
        nonlocal sent
        while time.perf_counter() < deadline:
            begin = time.perf_counter()
            ms, outcome = await send(session, target)
            sent += 1
            if begin >= measure_from and time.perf_counter() <= deadline:
                ms_measured.append(ms)
                outcomes[outcome] += 1

    async def mark_cpu() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_at.append(usage.ru_utime + usage.ru_stime)

    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        await asyncio.gather(mark_cpu(), *(worker(session) for _ in range(spec["concurrency"])))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = usage.ru_utime + usage.ru_stime - (cpu_at[0] if cpu_at else 0.0)
    return {
        "ms": ms_measured,
        "outcomes": dict(outcomes),
        "sent": sent,
        "window_s": spec["duration"],
        "client_cpu_pct": 100 * client_cpu / spec["duration"],
    }


def client_main(argv: Sequence[str]) -> int:
    mode, raw = argv[0], argv[1]
    spec = json.loads(raw)
    runner = client_c1 if mode == "c1" else client_load
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(runner(spec))))
    return 0


# --------------------------------------------------------------------------------------------
# setup


def post(client: httpx.Client, gateway: Proc, text: str, cache_control: str) -> httpx.Response:
    return client.post(
        gateway.url + CHAT,
        content=chat_body(text),
        headers={"content-type": "application/json", "cache-control": cache_control},
    )


def prime(client: httpx.Client, gateway: Proc, question: str) -> str:
    """Store ``question`` under its own entry and wait until a repeat is an exact hit."""
    first = post(client, gateway, question, "no-cache")
    entry = first.headers.get("x-deja-entry")
    if first.status_code != 200 or entry is None:
        raise BenchError(f"priming {gateway.name} failed: HTTP {first.status_code} {first.text}")
    for _ in range(100):  # the store (answer + vector) runs after the response
        again = post(client, gateway, question, "no-store")
        if again.headers.get("x-deja-cache") == "exact":
            return entry
        time.sleep(0.05)
    raise BenchError(f"{gateway.name}: the primed question never became an exact hit")


def probe(client: httpx.Client, gateway: Proc, paraphrase: str, entry: str) -> dict[str, Any]:
    """The paraphrase once: is it a semantic hit on ``entry``? (retried briefly: the vector
    upsert may land a moment after the exact entry)."""
    result: dict[str, Any] = {}
    for _ in range(20):
        response = post(client, gateway, paraphrase, "no-store")
        result = {
            "status": response.status_code,
            "cache": response.headers.get("x-deja-cache"),
            "entry_ok": response.headers.get("x-deja-entry") == entry,
            "similarity": response.headers.get("x-deja-similarity"),
            "verifier_score": response.headers.get("x-deja-verifier-score"),
        }
        if result["cache"] == "semantic" and result["entry_ok"]:
            break
        time.sleep(0.05)
    result["hit"] = result.get("cache") == "semantic" and bool(result.get("entry_ok"))
    return result


def choose_pair(gateways: dict[str, Proc]) -> dict[str, Any]:
    """The first pair of ``PAIRS`` whose paraphrase is a semantic hit on both gateways."""
    tried: list[dict[str, Any]] = []
    primed: dict[tuple[str, str], str] = {}
    with httpx.Client(timeout=10.0) as client:
        for question, paraphrase in PAIRS:
            record: dict[str, Any] = {"question": question, "paraphrase": paraphrase}
            for name, gateway in gateways.items():
                key = (name, question)
                if key not in primed:
                    primed[key] = prime(client, gateway, question)
                record[name] = {"entry": primed[key]} | probe(
                    client, gateway, paraphrase, primed[key]
                )
            tried.append(record)
            hits = {name: record[name]["hit"] for name in gateways}
            scores = ", ".join(
                f"{name}: {record[name]['cache']} (similarity {record[name]['similarity']}, "
                f"verifier {record[name]['verifier_score']})"
                for name in gateways
            )
            print(f"  pair {question!r} / {paraphrase!r}: {scores}")
            if all(hits.values()):
                return {"chosen": record, "tried": tried, "first_choice": len(tried) == 1}
    raise BenchError(
        "no pair of PAIRS is a semantic hit on both gateways: "
        + json.dumps(tried, indent=1, default=str)
    )


# --------------------------------------------------------------------------------------------
# measurement


def stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "p50_ms": math.nan, "p90_ms": math.nan, "p99_ms": math.nan}
    return {
        "n": len(values),
        "p50_ms": statistics.median(values),
        "p90_ms": percentile(values, 90),
        "p99_ms": percentile(values, 99),
        "mean_ms": statistics.fmean(values),
        "max_ms": max(values),
    }


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


def client_cmd(mode: str, spec: dict[str, Any]) -> list[str]:
    return [sys.executable, str(SELF), "client", mode, json.dumps(spec)]


def bench_c1(
    args: argparse.Namespace, gateways: dict[str, Proc], pair: dict[str, Any]
) -> dict[str, Any]:
    banner(f"1. concurrency 1: {args.requests} requests of each kind, sent in turn")
    chosen = pair["chosen"]
    targets = []
    for name, gateway in gateways.items():
        entry = chosen[name]["entry"]
        url = gateway.url + CHAT
        targets.append(
            {
                "name": f"{name} semantic",
                "url": url,
                "text": chosen["paraphrase"],
                "entry": entry,
                "expect": "200 semantic",
            }
        )
        targets.append(
            {
                "name": f"{name} exact",
                "url": url,
                "text": chosen["question"],
                "entry": entry,
                "expect": "200 exact",
            }
        )
    out = run_json_command(
        client_cmd("c1", {"targets": targets, "requests": args.requests, "warmup": C1_WARMUP}),
        cpu=LOADGEN_CPU,
        timeout=120 + args.requests * 0.5,
    )
    result: dict[str, Any] = {}
    for t in targets:
        runs = out["runs"][t["name"]]
        got = out["outcomes"][t["name"]]
        result[t["name"]] = {
            **stats(runs),
            "outcomes": got,
            "expected": t["expect"],
            "all_expected": got.get(t["expect"], 0) == len(runs) and len(runs) > 0,
        }
    return result


def bench_dense(args: argparse.Namespace, gateway: Proc, pair: dict[str, Any]) -> dict[str, Any]:
    """Phase 3: the verified hit again at c=1, after close but different questions were cached
    beside the chosen one (the worst case: every lookup verifies ``k`` candidates)."""
    chosen = pair["chosen"]
    banner(f"3. verified hit with {len(DENSE_SUFFIXES)} close neighbours cached (c=1)")
    with httpx.Client(timeout=10.0) as client:
        for suffix in DENSE_SUFFIXES:
            prime(client, gateway, chosen["question"].rstrip("?") + suffix + "?")
    target = {
        "name": "verified semantic, dense scope",
        "url": gateway.url + CHAT,
        "text": chosen["paraphrase"],
        "entry": chosen["verified"]["entry"],
        "expect": "200 semantic",
    }
    spec = {"targets": [target], "requests": args.requests, "warmup": C1_WARMUP}
    out = run_json_command(
        client_cmd("c1", spec), cpu=LOADGEN_CPU, timeout=120 + args.requests * 0.5
    )
    runs, got = out["runs"][target["name"]], out["outcomes"][target["name"]]
    return {
        **stats(runs),
        "outcomes": got,
        "expected": target["expect"],
        "all_expected": got.get(target["expect"], 0) == len(runs) and len(runs) > 0,
    }


def bench_c16(
    args: argparse.Namespace, gateways: dict[str, Proc], pair: dict[str, Any]
) -> dict[str, Any]:
    rounds = max(1, args.rounds)
    per_round = args.duration / rounds
    banner(
        f"2. concurrency {args.concurrency}: {args.duration:g} s per gateway in {rounds} "
        f"interleaved rounds"
    )
    chosen = pair["chosen"]
    names = list(gateways)
    collected: dict[str, dict[str, Any]] = {
        n: {
            "ms": [],
            "outcomes": Counter(),
            "sent": 0,
            "cpu_s": 0.0,
            "window_s": 0.0,
            "client_cpu_pct": [],
        }
        for n in names
    }
    for index in range(rounds):
        order = names if index % 2 == 0 else list(reversed(names))
        for name in order:
            gateway = gateways[name]
            spec = {
                "target": {
                    "url": gateway.url + CHAT,
                    "text": chosen["paraphrase"],
                    "entry": chosen[name]["entry"],
                },
                "concurrency": args.concurrency,
                "duration": per_round,
                "warmup": LOAD_WARMUP_S,
            }
            before = cpu_seconds(gateway.popen.pid)
            out = run_json_command(
                client_cmd("load", spec), cpu=LOADGEN_CPU, timeout=60 + per_round * 2
            )
            used = cpu_seconds(gateway.popen.pid) - before
            c = collected[name]
            c["ms"].extend(out["ms"])
            c["outcomes"].update(out["outcomes"])
            c["sent"] += out["sent"]
            c["cpu_s"] += used
            c["window_s"] += out["window_s"]
            c["client_cpu_pct"].append(out["client_cpu_pct"])
    result: dict[str, Any] = {}
    for name in names:
        c = collected[name]
        n = len(c["ms"])
        result[f"{name} semantic"] = {
            **stats(c["ms"]),
            "hits_per_s": ratio(n, c["window_s"]),
            "gateway_cpu_ms_per_req": ratio(1000 * c["cpu_s"], c["sent"]),
            "client_cpu_pct": max(c["client_cpu_pct"]),
            "outcomes": dict(c["outcomes"]),
            "expected": "200 semantic",
            "all_expected": c["outcomes"].get("200 semantic", 0) == n and n > 0,
        }
    return result


# --------------------------------------------------------------------------------------------
# output


def summary(results: dict[str, Any], args: argparse.Namespace) -> str:
    c1, c16 = results["c1"], results["c16"]
    rows = []
    for name, r in c1.items():
        got = ", ".join(f"{k}: {v}" for k, v in sorted(r["outcomes"].items()))
        rows.append([name, 1, r["n"], r["p50_ms"], r["p90_ms"], r["p99_ms"], "", "", got])
    for name, r in c16.items():
        got = ", ".join(f"{k}: {v}" for k, v in sorted(r["outcomes"].items()))
        rows.append(
            [
                name,
                args.concurrency,
                r["n"],
                r["p50_ms"],
                r["p90_ms"],
                r["p99_ms"],
                r["hits_per_s"],
                r["gateway_cpu_ms_per_req"],
                got,
            ]
        )
    lines = [
        table(
            ["kind", "c", "reqs", "p50 ms", "p90 ms", "p99 ms", "req/s", "gw cpu ms/req", "got"],
            rows,
            digits=2,
        )
    ]
    r = results["ratios"]
    lines.append("")
    lines.append(
        table(
            ["verified / unverified", "c=1", f"c={args.concurrency}"],
            [
                ["p50", r["c1_p50"], r["c16_p50"]],
                ["p99", r["c1_p99"], r["c16_p99"]],
                ["hits/s", "", r["c16_hits_per_s"]],
                ["gateway CPU per request", "", r["c16_cpu_per_req"]],
            ],
            digits=2,
        )
    )
    target = results["target"]
    lines.append(
        f"\nverified semantic hit p50 at c=1: {target['p50_ms']:.2f} ms (target <= "
        f"{TARGET_P50_MS:g} ms): {'PASS' if target['ok'] else 'BELOW TARGET'}; verification "
        f"adds {target['added_p50_ms']:.2f} ms at p50 over the unverified hit; exact hit p50 "
        f"{target['exact_p50_ms']:.2f} ms (verified gateway)"
    )
    chosen = results["pair"]["chosen"]
    lines.append(
        f"pair: {chosen['question']!r} -> {chosen['paraphrase']!r} (similarity "
        f"{chosen['verified']['similarity']}, verifier score "
        f"{chosen['verified']['verifier_score']}; "
        + (
            "the first pair)"
            if results["pair"]["first_choice"]
            else "NOT the first pair: the verified gateway did not serve the earlier ones)"
        )
    )
    dense = results["dense"]
    lines.append(
        f"verified hit with {len(DENSE_SUFFIXES)} close neighbours cached (the verifier scores "
        f"k candidates): p50 {dense['p50_ms']:.2f} ms, p99 {dense['p99_ms']:.2f} ms; got "
        + ", ".join(f"{k}: {v}" for k, v in sorted(dense["outcomes"].items()))
    )
    client_cpu = max(r_["client_cpu_pct"] for r_ in c16.values())
    limited = "the client may have limited the rate" if client_cpu > 80 else "not the limit"
    lines.append(
        f"client CPU at c={args.concurrency}: up to {client_cpu:.0f}% of its core ({limited})"
    )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--requests", "--limit", type=int, default=300, help="requests per kind at c=1"
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per gateway, c=16")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds at c=16")
    parser.add_argument("--concurrency", type=int, default=16, help="workers of the load run")
    parser.add_argument(
        "--precision", type=float, default=0.92, help="the verified gateway's precision target"
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "semantic_latency.json")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.duration <= 0 or args.concurrency < 1:
        parser.error("--requests, --duration and --concurrency must be positive")
    return args


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        return client_main(sys.argv[2:])
    args = parse_args()
    started = time.monotonic()
    results: dict[str, Any] = {"meta": run_meta(args, "SIMULATED (deja sim --speed 0)")}
    print("deja verified vs unverified semantic-hit latency -- the replica is SIMULATED")
    print(pinning_note())
    print(results["meta"]["load_at_start"])
    common_env = {
        "DEJA_CACHE_ENABLED": "true",
        "DEJA_SEMANTIC_ENABLED": "true",
        "DEJA_SEMANTIC_SHADOW_RATE": "0",
        "DEJA_SEMANTIC_JUDGE": "off",
        "DEJA_MODEL_DIR": str(MODEL_CACHE_DIR),
    }
    envs = {
        "verified": {
            **common_env,
            "DEJA_SEMANTIC_VERIFIER": "onnx",
            "DEJA_SEMANTIC_PRECISION": str(args.precision),
            "DEJA_DATA_DIR": str(log_dir() / "data-verified"),
        },
        "unverified": {
            **common_env,
            "DEJA_SEMANTIC_VERIFIER": "off",
            "DEJA_SEMANTIC_THRESHOLD": UNVERIFIED_THETA,
            "DEJA_DATA_DIR": str(log_dir() / "data-unverified"),
        },
    }
    results["meta"]["gateway_env"] = envs

    def body() -> None:
        banner("setup: simulated replica (speed 0) + two gateways, choose the pair")
        sim = start_sim("sim", cpu=LOADGEN_CPU, args=["--speed", "0"])
        gateways = {
            name: start_gateway(f"gateway-{name}", [sim.url], cpu=SERVER_CPU, env=env)
            for name, env in envs.items()
        }
        try:
            results["pair"] = choose_pair(gateways)
            results["c1"] = bench_c1(args, gateways, results["pair"])
            results["c16"] = bench_c16(args, gateways, results["pair"])
            results["dense"] = bench_dense(args, gateways["verified"], results["pair"])
        finally:
            for gateway in gateways.values():
                stop_process(gateway)
            stop_process(sim)

    failed = run_guarded(body)
    if failed is not None:
        return failed
    c1, c16 = results["c1"], results["c16"]
    v1, u1 = c1["verified semantic"], c1["unverified semantic"]
    v16, u16 = c16["verified semantic"], c16["unverified semantic"]
    results["ratios"] = {
        "c1_p50": ratio(v1["p50_ms"], u1["p50_ms"]),
        "c1_p99": ratio(v1["p99_ms"], u1["p99_ms"]),
        "c16_p50": ratio(v16["p50_ms"], u16["p50_ms"]),
        "c16_p99": ratio(v16["p99_ms"], u16["p99_ms"]),
        "c16_hits_per_s": ratio(v16["hits_per_s"], u16["hits_per_s"]),
        "c16_cpu_per_req": ratio(v16["gateway_cpu_ms_per_req"], u16["gateway_cpu_ms_per_req"]),
    }
    results["target"] = {
        "p50_ms": v1["p50_ms"],
        "target_p50_ms": TARGET_P50_MS,
        "ok": v1["p50_ms"] <= TARGET_P50_MS,
        "added_p50_ms": v1["p50_ms"] - u1["p50_ms"],
        "exact_p50_ms": c1["verified exact"]["p50_ms"],
    }
    results["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    results["meta"]["commands"] = list(COMMANDS)
    banner("summary")
    print(summary(results, args))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, allow_nan=True) + "\n")
    print(f"results written to {args.output} (wall time {results['meta']['wall_s']} s)")
    checked = {**c1, **c16, "verified semantic, dense scope": results["dense"]}
    unexpected = [n for n, r in checked.items() if not r["all_expected"]]
    if unexpected:
        print(
            "\nBENCHMARK FAILED: not every answer was the expected kind: "
            + "; ".join(f"{n}: {checked[n]['outcomes']}" for n in unexpected),
            file=sys.stderr,
        )
        return 1
    remove_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
