"""Gateway hot paths, measured side by side in ONE run against same-machine baselines.

a. exact hit: gateway exact-hit throughput/latency vs a bare uvicorn ASGI server returning the
   same bytes (target: gateway/bare req/s >= 0.5).
b. miss path: latency added by the gateway on a forced miss (``Cache-Control: no-cache,
   no-store``) at concurrency 1, vs POSTing to the simulated replica directly (target: <= 1 ms
   added at p50); plus miss-path throughput under concurrency, gateway vs direct.
c. streaming relay: time to first chunk and total time of a streamed answer, direct vs through
   the gateway (forced miss); overhead per chunk = (gateway total - direct total) / chunks.

    .venv/bin/python bench/gateway_paths.py [--duration 10] [--connections 32]

The replica is SIMULATED (``deja sim``); figures are ratios measured in one run on a shared
machine, not absolute claims. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from common import (
    COMMANDS,
    LOADGEN_CPU,
    RESULTS_DIR,
    SERVER_CPU,
    BenchError,
    Proc,
    Target,
    WrkResult,
    banner,
    cpu_seconds,
    fmt,
    gateway_config,
    gateway_env,
    log_dir,
    percentile,
    pinning_note,
    ratio,
    remove_logs,
    run_guarded,
    run_interleaved,
    run_json_command,
    run_meta,
    run_wrk,
    start_bare_server,
    start_gateway,
    start_sim,
    stop_process,
    table,
    verdict,
    write_lua,
)

MODEL = "deja-sim-1"
CHAT = "/v1/chat/completions"
PROMPT = "deja bench: the exact-hit path"
MAX_TOKENS = 32
NO_CACHE = "no-cache, no-store"
EXACT_RATIO_TARGET = 0.5
MISS_P50_TARGET_MS = 1.0
STREAM_WARMUP = 5
#: Below this CPU use (% of one core) a server was not the bottleneck of its wrk run.
SATURATED_PCT = 85.0


def chat_body(*, stream: bool) -> bytes:
    payload: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
    }
    if stream:
        payload["stream"] = True
    return json.dumps(payload, separators=(",", ":")).encode()


def wrk_row(result: WrkResult, server: str, sim: str | None = None) -> list[Any]:
    return [
        result.label,
        result.connections,
        result.requests,
        result.rps,
        result.p50_ms,
        result.p90_ms,
        result.p99_ms,
        result.max_ms,
        result.errors,
        result.cpu_pct(server),
        result.cpu_us_per_request(server),
        result.cpu_us_per_request(sim) if sim else math.nan,
        result.other_cpu_pct,
    ]


WRK_HEADERS = [
    "run",
    "conns",
    "requests",
    "req/s",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "max ms",
    "err",
    "server cpu %",
    "server cpu us/req",
    "sim cpu us/req",
    "other cpu %",
]
TABLE_NOTE = (
    "  (server cpu %: how busy the server under test was, 100 = one CPU, below ~90 = not"
    " saturated;\n   server cpu us/req: its CPU time per request, robust to other load;"
    "\n   other cpu %: machine CPU used by anything but wrk and the watched servers, incl."
    " kernel networking)"
)


def rounds_table(runs: list[list[WrkResult]]) -> str:
    rows = [
        [r.label, index + 1, r.rps, r.p50_ms, r.p99_ms, r.other_cpu_pct]
        for target in runs
        for index, r in enumerate(target)
    ]
    return table(["run", "round", "req/s", "p50 ms", "p99 ms", "other cpu %"], rows)


# --------------------------------------------------------------------------------------------
# a. exact hit vs bare server


def prime_exact(gateway: Proc, body: bytes, workdir: Path) -> tuple[Path, Path, dict[str, str]]:
    """Make the answer an exact hit, then capture the hit's body and headers to files."""
    url = gateway.url + CHAT
    headers = {"content-type": "application/json"}
    with httpx.Client(timeout=10.0) as client:
        first = client.post(url, content=body, headers=headers)
        if first.status_code != 200:
            raise BenchError(f"priming request failed: HTTP {first.status_code} {first.text}")
        outcome = first.headers.get("x-deja-cache")
        print(f"  prime: HTTP {first.status_code}, X-Deja-Cache: {outcome}")
        for _ in range(50):  # the store runs in a background task after the response
            hit = client.post(url, content=body, headers=headers)
            if hit.headers.get("x-deja-cache") == "exact":
                break
            time.sleep(0.05)
        else:
            raise BenchError("the primed request never became an exact hit (X-Deja-Cache)")
    raw_headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in hit.headers.raw]
    print(
        f"  exact hit captured: {len(hit.content)} bytes, content-type "
        f"{hit.headers.get('content-type')}, headers " + ", ".join(k for k, _ in raw_headers)
    )
    body_file = workdir / "exact_body.bin"
    headers_file = workdir / "exact_headers.json"
    body_file.write_bytes(hit.content)
    headers_file.write_text(json.dumps(raw_headers))
    return body_file, headers_file, dict(hit.headers)


def check_bare(bare: Proc, body: bytes, expected: bytes, content_type: str) -> None:
    with httpx.Client(timeout=5.0) as client:
        got = client.post(
            bare.url + CHAT, content=body, headers={"content-type": "application/json"}
        )
    if got.content != expected or got.headers.get("content-type") != content_type:
        raise BenchError("the bare server does not return the captured exact-hit bytes")


def check_cache(url: str, body: bytes, headers: dict[str, str], expected: str) -> None:
    with httpx.Client(timeout=10.0) as client:
        got = client.post(
            url, content=body, headers={"content-type": "application/json", **headers}
        )
    outcome = got.headers.get("x-deja-cache")
    if got.status_code != 200 or outcome != expected:
        raise BenchError(
            f"expected HTTP 200 with X-Deja-Cache {expected} from {url}, got "
            f"{got.status_code} / {outcome}: {got.text[:200]}"
        )


def bench_exact(args: argparse.Namespace, gateway: Proc, workdir: Path) -> dict[str, Any]:
    banner("a. exact hit: gateway vs bare uvicorn ASGI server (same response bytes)")
    body = chat_body(stream=False)
    body_file, headers_file, hit_headers = prime_exact(gateway, body, workdir)
    bare = start_bare_server("bare", body_file, headers_file, cpu=SERVER_CPU)
    try:
        check_bare(bare, body, body_file.read_bytes(), hit_headers["content-type"])
        lua = write_lua(body, {"Content-Type": "application/json"})
        gw_url, bare_url = gateway.url + CHAT, bare.url + CHAT
        print(f"  warm-up {args.warmup:g}s each")
        for url in (gw_url, bare_url):
            run_wrk(
                "warmup",
                url,
                lua=lua,
                connections=args.connections,
                duration=args.warmup,
                threads=args.threads,
            )
        print(f"  measured: {args.rounds} interleaved rounds of {args.duration / args.rounds:g}s")
        (gw, bare_res), runs = run_interleaved(
            [
                Target("gateway exact hit", gw_url, lua, {"gateway": gateway.popen.pid}),
                Target("bare ASGI server", bare_url, lua, {"bare": bare.popen.pid}),
            ],
            connections=args.connections,
            duration=args.duration,
            rounds=args.rounds,
            threads=args.threads,
        )
        check_cache(gw_url, body, {}, "exact")
    finally:
        stop_process(bare)
    print()
    print(rounds_table(runs))
    print()
    print(table(WRK_HEADERS, [wrk_row(gw, "gateway"), wrk_row(bare_res, "bare")]))
    print(TABLE_NOTE)
    rps_ratio = ratio(gw.rps, bare_res.rps)
    gw_cpu, bare_cpu = gw.cpu_us_per_request("gateway"), bare_res.cpu_us_per_request("bare")
    cpu_ratio = ratio(bare_cpu, gw_cpu)
    print(
        f"\n  gateway/bare req/s = {rps_ratio:.3f}  (target >= {EXACT_RATIO_TARGET}: "
        f"{verdict(rps_ratio >= EXACT_RATIO_TARGET)})"
    )
    print(
        f"  bare/gateway CPU per request = {cpu_ratio:.3f} ({fmt(bare_cpu, 1)} vs "
        f"{fmt(gw_cpu, 1)} us; the same ratio, but robust to other load)"
    )
    print(
        f"  gateway/bare p50   = {ratio(gw.p50_ms, bare_res.p50_ms):.3f}, "
        f"p99 = {ratio(gw.p99_ms, bare_res.p99_ms):.3f}"
    )
    bare_busy = bare_res.cpu_pct("bare")
    saturation = ""
    if bare_busy < SATURATED_PCT:
        saturation = (
            f"bare server only {bare_busy:.0f}% busy: it was not CPU-bound (the load generator "
            "or a contended CPU was), so the req/s ratio flatters the gateway; trust the CPU ratio"
        )
        print(f"  NOTE: {saturation}")
    return {
        "response_bytes": len(body_file.read_bytes()),
        "gateway": gw.as_dict(),
        "bare": bare_res.as_dict(),
        "rounds": [[r.as_dict() for r in target] for target in runs],
        "gateway_cpu_us_per_request": gw_cpu,
        "bare_cpu_us_per_request": bare_cpu,
        "ratio_rps_gateway_over_bare": rps_ratio,
        "ratio_cpu_bare_over_gateway": cpu_ratio,
        "bare_cpu_pct": bare_busy,
        "gateway_cpu_pct": gw.cpu_pct("gateway"),
        "saturation_note": saturation,
        "ratio_p50_gateway_over_bare": ratio(gw.p50_ms, bare_res.p50_ms),
        "ratio_p99_gateway_over_bare": ratio(gw.p99_ms, bare_res.p99_ms),
        "target_ratio_rps": EXACT_RATIO_TARGET,
        "meets_target": rps_ratio >= EXACT_RATIO_TARGET,
    }


# --------------------------------------------------------------------------------------------
# b. miss path


def bench_miss(args: argparse.Namespace, gateway: Proc, sim: Proc) -> dict[str, Any]:
    banner("b. miss path (Cache-Control: no-cache, no-store): gateway vs direct to the sim")
    body = chat_body(stream=False)
    headers = {"Content-Type": "application/json", "Cache-Control": NO_CACHE}
    gw_url, sim_url = gateway.url + CHAT, sim.url + CHAT
    check_cache(gw_url, body, {"cache-control": NO_CACHE}, "miss")
    lua = write_lua(body, headers)  # the same request bytes to both targets
    sim_pid, gw_pid = sim.popen.pid, gateway.popen.pid

    def targets(conns: int) -> list[Target]:
        return [
            Target(f"direct to sim, c{conns}", sim_url, lua, {"sim": sim_pid}),
            Target(f"gateway miss, c{conns}", gw_url, lua, {"gateway": gw_pid, "sim": sim_pid}),
        ]

    print(
        f"  concurrency 1 (wrk -c1 -t1), warm-up {args.warmup:g}s each, "
        f"{args.rounds} interleaved rounds of {args.duration / args.rounds:g}s"
    )
    for url in (sim_url, gw_url):
        run_wrk("warmup", url, lua=lua, connections=1, duration=args.warmup)
    (direct1, gw1), runs1 = run_interleaved(
        targets(1), connections=1, duration=args.duration, rounds=args.rounds
    )
    check_cache(gw_url, body, {"cache-control": NO_CACHE}, "miss")

    conns = args.connections
    print(f"  concurrency {conns}, {args.rounds} interleaved rounds")
    (direct_n, gw_n), runs_n = run_interleaved(
        targets(conns),
        connections=conns,
        duration=args.duration,
        rounds=args.rounds,
        threads=args.threads,
    )
    print()
    print(rounds_table(runs1 + runs_n))
    print()
    print(
        table(
            WRK_HEADERS,
            [
                wrk_row(direct1, "sim"),
                wrk_row(gw1, "gateway", "sim"),
                wrk_row(direct_n, "sim"),
                wrk_row(gw_n, "gateway", "sim"),
            ],
        )
    )
    print(TABLE_NOTE)
    added_p50 = gw1.p50_ms - direct1.p50_ms
    added_p99 = gw1.p99_ms - direct1.p99_ms
    gw_cpu1 = gw1.cpu_us_per_request("gateway")
    print(
        f"\n  added by the gateway at c1: p50 {added_p50:+.3f} ms (target <= "
        f"{MISS_P50_TARGET_MS} ms: {verdict(added_p50 <= MISS_P50_TARGET_MS)}), "
        f"p99 {added_p99:+.3f} ms; gateway CPU per miss {fmt(gw_cpu1, 1)} us"
    )
    tput = ratio(gw_n.rps, direct_n.rps)
    print(
        f"  miss throughput at c{conns}: gateway/direct req/s = {tput:.3f}; gateway CPU per "
        f"miss {fmt(gw_n.cpu_us_per_request('gateway'), 1)} us"
    )
    return {
        "c1": {"direct": direct1.as_dict(), "gateway": gw1.as_dict()},
        "added_p50_ms": added_p50,
        "added_p99_ms": added_p99,
        "gateway_cpu_us_per_miss_c1": gw_cpu1,
        "sim_cpu_us_per_request_c1": direct1.cpu_us_per_request("sim"),
        "target_added_p50_ms": MISS_P50_TARGET_MS,
        "meets_target": added_p50 <= MISS_P50_TARGET_MS,
        "concurrent": {
            "connections": conns,
            "direct": direct_n.as_dict(),
            "gateway": gw_n.as_dict(),
            "ratio_rps_gateway_over_direct": tput,
            "gateway_cpu_us_per_miss": gw_n.cpu_us_per_request("gateway"),
        },
        "rounds": [[r.as_dict() for r in target] for target in runs1 + runs_n],
    }


# --------------------------------------------------------------------------------------------
# c. streaming relay


def stream_stats(runs: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {"requests": float(len(runs))}
    for key in ("first_chunk_ms", "total_ms", "headers_ms"):
        values = [float(r[key]) for r in runs]
        out[f"{key}_p50"] = statistics.median(values)
        out[f"{key}_mean"] = statistics.fmean(values)
        out[f"{key}_p99"] = percentile(values, 99)
    out["events"] = statistics.median(r["events"] for r in runs)
    out["pieces"] = statistics.median(r["pieces"] for r in runs)
    out["bytes"] = statistics.median(r["bytes"] for r in runs)
    return out


def bench_stream(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    banner("c. streaming relay: gateway (forced miss) vs direct to the sim")
    sim_args = [
        "--speed",
        "1",
        "--base-ttft-ms",
        "0",
        "--prefill-ms-per-token",
        "0",
        "--decode-ms-per-token",
        str(args.decode_ms),
    ]
    sim = start_sim("sim-stream", cpu=LOADGEN_CPU, args=sim_args)
    gateway = start_gateway("gateway-stream", [sim.url], cpu=SERVER_CPU, env=args.gateway_env)
    body_file = workdir / "stream_body.json"
    body_file.write_bytes(chat_body(stream=True))
    client = [sys.executable, str(Path(__file__).with_name("stream_client.py"))]
    common = [
        "--body",
        str(body_file),
        "--header",
        f"Cache-Control: {NO_CACHE}",
        "--requests",
        str(args.stream_requests),
        "--warmup",
        str(STREAM_WARMUP),
    ]
    timeout = 60.0 + args.stream_requests * 2.0
    try:
        direct = run_json_command(
            [*client, "--url", sim.url + CHAT, *common], cpu=LOADGEN_CPU, timeout=timeout
        )
        cpu_before = cpu_seconds(gateway.popen.pid)
        via = run_json_command(
            [*client, "--url", gateway.url + CHAT, *common], cpu=LOADGEN_CPU, timeout=timeout
        )
        gateway_cpu = cpu_seconds(gateway.popen.pid) - cpu_before
    finally:
        stop_process(gateway)
        stop_process(sim)
    outcomes = {r["cache"] for r in via["runs"]}
    if outcomes != {"miss"}:
        raise BenchError(f"streamed requests through the gateway were not all misses: {outcomes}")
    d, g = stream_stats(direct["runs"]), stream_stats(via["runs"])
    if d["events"] != g["events"]:
        print(f"  WARNING: events differ: direct {d['events']} vs gateway {g['events']}")
    chunks = g["events"]
    rows = [
        [
            "direct to sim",
            int(d["requests"]),
            int(d["events"]),
            int(d["pieces"]),
            d["headers_ms_p50"],
            d["first_chunk_ms_p50"],
            d["first_chunk_ms_p99"],
            d["total_ms_p50"],
            d["total_ms_mean"],
            d["total_ms_p99"],
        ],
        [
            "gateway miss",
            int(g["requests"]),
            int(g["events"]),
            int(g["pieces"]),
            g["headers_ms_p50"],
            g["first_chunk_ms_p50"],
            g["first_chunk_ms_p99"],
            g["total_ms_p50"],
            g["total_ms_mean"],
            g["total_ms_p99"],
        ],
    ]
    print()
    print(
        table(
            [
                "run",
                "reqs",
                "SSE events",
                "body pieces",
                "headers p50",
                "1st chunk p50",
                "1st chunk p99",
                "total p50",
                "total mean",
                "total p99",
            ],
            rows,
        )
    )
    per_chunk_p50_us = (g["total_ms_p50"] - d["total_ms_p50"]) / chunks * 1000
    per_chunk_mean_us = (g["total_ms_mean"] - d["total_ms_mean"]) / chunks * 1000
    ttfb_p50 = g["first_chunk_ms_p50"] - d["first_chunk_ms_p50"]
    ttfb_p99 = g["first_chunk_ms_p99"] - d["first_chunk_ms_p99"]
    print(
        f"\n  chunks per answer (SSE events, incl. role/finish/[DONE]): {chunks:.0f}; "
        f"body pieces read by the client: {g['pieces']:.0f} (direct {d['pieces']:.0f})"
    )
    print(
        f"  per-chunk overhead: {per_chunk_p50_us:+.1f} us (from p50 totals), "
        f"{per_chunk_mean_us:+.1f} us (from mean totals)"
    )
    print(f"  time to first chunk added: p50 {ttfb_p50:+.3f} ms, p99 {ttfb_p99:+.3f} ms")
    # The total includes the extra time to the first chunk; what the later chunks add on top:
    after_first_us = (
        ((g["total_ms_p50"] - d["total_ms_p50"]) - ttfb_p50) / max(1.0, chunks - 1) * 1000
    )
    print(
        f"  per-chunk overhead after the first chunk: {after_first_us:+.1f} us "
        "((total added - TTFB added) / (chunks - 1); near 0 = the relay keeps up with the replica)"
    )
    sent = args.stream_requests + STREAM_WARMUP
    cpu_per_request = gateway_cpu / sent * 1e6
    print(
        f"  gateway CPU per streamed request: {cpu_per_request:.1f} us "
        f"= {cpu_per_request / chunks:.1f} us per chunk (all {sent} requests incl. warm-up)"
    )
    return {
        "sim_args": sim_args,
        "direct": d,
        "gateway": g,
        "chunks": chunks,
        "per_chunk_overhead_us_p50": per_chunk_p50_us,
        "per_chunk_overhead_us_mean": per_chunk_mean_us,
        "per_chunk_overhead_after_first_us_p50": after_first_us,
        "ttfb_added_ms_p50": ttfb_p50,
        "ttfb_added_ms_p99": ttfb_p99,
        "total_added_ms_p50": g["total_ms_p50"] - d["total_ms_p50"],
        "gateway_cpu_us_per_request": cpu_per_request,
        "gateway_cpu_us_per_chunk": cpu_per_request / chunks,
    }


# --------------------------------------------------------------------------------------------
# summary


def cache_note(config: dict[str, Any] | None) -> str:
    """One line on which cache layers the benchmark gateways run with."""
    if config is None:
        return "gateway config: unknown (deja serve --print-config failed)"
    keys = ("cache_enabled", "redis_url", "semantic_enabled", "embedder")
    shown = ", ".join(f"{k}={config[k]}" for k in keys if k in config)
    return f"gateway config: {shown}"


def other_pct(result: dict[str, Any]) -> float:
    cpus = max(1, os.cpu_count() or 1)
    return float(100 * result["other_cpu_s"] / (result["duration_s"] * cpus))


def summary(results: dict[str, Any]) -> str:
    lines = [
        "",
        "=" * 80,
        "SUMMARY (deja gateway paths; replica SIMULATED; ratios from one run)",
        "=" * 80,
        results["meta"]["pinning"],
        results["meta"]["load_at_start"],
        results["meta"]["gateway_caches"],
    ]
    a = results.get("exact")
    if a:
        gw, bare = a["gateway"], a["bare"]
        lines += [
            f"a. exact hit, c{gw['connections']}, {a['response_bytes']} B response:",
            f"   gateway  {fmt(gw['rps'])} req/s  p50 {fmt(gw['p50_ms'])} ms  "
            f"p99 {fmt(gw['p99_ms'])} ms  errors {gw['non_2xx'] + gw['socket_errors']}",
            f"   bare     {fmt(bare['rps'])} req/s  p50 {fmt(bare['p50_ms'])} ms  "
            f"p99 {fmt(bare['p99_ms'])} ms  errors {bare['non_2xx'] + bare['socket_errors']}",
            f"   ratio gateway/bare: req/s {a['ratio_rps_gateway_over_bare']:.3f} "
            f"(target >= {a['target_ratio_rps']}: {verdict(a['meets_target'])}), "
            f"p50 {a['ratio_p50_gateway_over_bare']:.3f}, "
            f"p99 {a['ratio_p99_gateway_over_bare']:.3f}",
            f"   CPU per request: gateway {fmt(a['gateway_cpu_us_per_request'], 1)} us, bare "
            f"{fmt(a['bare_cpu_us_per_request'], 1)} us -> bare/gateway "
            f"{a['ratio_cpu_bare_over_gateway']:.3f}; other CPU during the runs: "
            f"{fmt(other_pct(gw), 1)}% / {fmt(other_pct(bare), 1)}%; server busy "
            f"{fmt(a['gateway_cpu_pct'], 0)}% / {fmt(a['bare_cpu_pct'], 0)}%",
        ]
        if a["saturation_note"]:
            lines.append(f"   NOTE: {a['saturation_note']}")
    b = results.get("miss")
    if b:
        d1, g1 = b["c1"]["direct"], b["c1"]["gateway"]
        conc = b["concurrent"]
        dn, gn = conc["direct"], conc["gateway"]
        lines += [
            "b. miss path (no-cache, no-store), concurrency 1:",
            f"   direct   p50 {fmt(d1['p50_ms'])} ms  p99 {fmt(d1['p99_ms'])} ms  "
            f"({fmt(d1['rps'])} req/s)",
            f"   gateway  p50 {fmt(g1['p50_ms'])} ms  p99 {fmt(g1['p99_ms'])} ms  "
            f"({fmt(g1['rps'])} req/s)",
            f"   added    p50 {b['added_p50_ms']:+.3f} ms (target <= {b['target_added_p50_ms']}"
            f" ms: {verdict(b['meets_target'])}), p99 {b['added_p99_ms']:+.3f} ms",
            f"   miss throughput at c{conc['connections']}: direct {fmt(dn['rps'])} req/s "
            f"(p50 {fmt(dn['p50_ms'])} ms), gateway {fmt(gn['rps'])} req/s "
            f"(p50 {fmt(gn['p50_ms'])} ms), ratio {conc['ratio_rps_gateway_over_direct']:.3f}",
            f"   gateway CPU per miss: {fmt(b['gateway_cpu_us_per_miss_c1'], 1)} us at c1, "
            f"{fmt(conc['gateway_cpu_us_per_miss'], 1)} us at c{conc['connections']}; sim CPU per "
            f"request {fmt(b['sim_cpu_us_per_request_c1'], 1)} us; other CPU (c1 runs) "
            f"{fmt(other_pct(d1), 1)}% / {fmt(other_pct(g1), 1)}%",
        ]
    c = results.get("stream")
    if c:
        d, g = c["direct"], c["gateway"]
        lines += [
            f"c. streaming relay ({int(d['requests'])} sequential requests, "
            f"{c['chunks']:.0f} SSE chunks each, sim {' '.join(c['sim_args'])}):",
            f"   direct   1st chunk p50 {fmt(d['first_chunk_ms_p50'])} ms  total p50 "
            f"{fmt(d['total_ms_p50'])} ms",
            f"   gateway  1st chunk p50 {fmt(g['first_chunk_ms_p50'])} ms  total p50 "
            f"{fmt(g['total_ms_p50'])} ms",
            f"   TTFB added p50 {c['ttfb_added_ms_p50']:+.3f} ms (p99 "
            f"{c['ttfb_added_ms_p99']:+.3f} ms); per-chunk overhead "
            f"{c['per_chunk_overhead_us_p50']:+.1f} us (p50 totals), "
            f"{c['per_chunk_overhead_us_mean']:+.1f} us (mean totals), "
            f"{c['per_chunk_overhead_after_first_us_p50']:+.1f} us after the first chunk",
            f"   gateway CPU per streamed request {fmt(c['gateway_cpu_us_per_request'], 1)} us "
            f"= {fmt(c['gateway_cpu_us_per_chunk'], 1)} us per chunk",
        ]
    lines.append("=" * 80)
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--duration",
        type=float,
        default=10.0,
        help="seconds measured per target and comparison, split into --rounds (default 10)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="interleaved rounds per comparison, order reversed each round (default 2)",
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=32,
        help="wrk connections for the throughput runs (default 32)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="wrk threads (default 1: wrk has one CPU)"
    )
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="seconds of warm-up per target (default 2)"
    )
    parser.add_argument(
        "--stream-requests",
        type=int,
        default=50,
        help="sequential streamed requests per target (default 50)",
    )
    parser.add_argument(
        "--decode-ms",
        type=float,
        default=2.0,
        help="simulated decode time per token in the streaming run (default 2)",
    )
    parser.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment of the gateways, e.g. DEJA_SEMANTIC_ENABLED=false (repeatable; "
        "DEJA_* variables of the calling environment are passed on too)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "gateway_paths.json")
    parser.add_argument(
        "--skip",
        choices=["exact", "miss", "stream"],
        action="append",
        default=[],
        help="skip a section (repeatable)",
    )
    args = parser.parse_args()
    extra: dict[str, str] = {}
    for item in args.gateway_env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--gateway-env wants KEY=VALUE, got {item!r}")
        extra[key] = value
    args.gateway_env = extra
    return args


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    results: dict[str, Any] = {"meta": run_meta(args, "SIMULATED (deja sim)")}
    print("deja gateway paths benchmark -- the replica is SIMULATED (deja sim)")
    print(pinning_note())
    print(results["meta"]["load_at_start"])
    env = gateway_env(["http://127.0.0.1:1"], args.gateway_env)
    config = gateway_config(env)
    results["meta"]["gateway_env"] = {k: v for k, v in env.items() if k != "DEJA_REPLICAS"}
    results["meta"]["gateway_config"] = config
    results["meta"]["gateway_caches"] = cache_note(config)
    print(results["meta"]["gateway_caches"])
    workdir = log_dir()  # captured bodies and headers live next to the server logs

    def body() -> None:
        if "exact" not in args.skip or "miss" not in args.skip:
            banner("setup: simulated replica (speed 0) + gateway")
            sim = start_sim("sim", cpu=LOADGEN_CPU, args=["--speed", "0"])
            gateway = start_gateway("gateway", [sim.url], cpu=SERVER_CPU, env=args.gateway_env)
            try:
                if "exact" not in args.skip:
                    results["exact"] = bench_exact(args, gateway, workdir)
                if "miss" not in args.skip:
                    results["miss"] = bench_miss(args, gateway, sim)
            finally:
                stop_process(gateway)
                stop_process(sim)
        if "stream" not in args.skip:
            results["stream"] = bench_stream(args, workdir)

    failed = run_guarded(body)
    if failed is not None:
        return failed
    results["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    results["meta"]["commands"] = list(COMMANDS)
    print(summary(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, allow_nan=True) + "\n")
    print(f"results written to {args.output} (wall time {results['meta']['wall_s']} s)")
    remove_logs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
