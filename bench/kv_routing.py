"""Routing by what replicas really hold (vLLM KV events) against round robin and today's
prefix-hash ring, side by side in ONE run, on four SIMULATED replicas (``deja sim``).

Each replica publishes vLLM's KV-cache events (``--kv-events-config``, ZMQ PUB + replay) and
tokenizes with the same local ``tokenizer.json`` the gateway is given
(``deja/models/verifier/tokenizer.json``), so the gateway's block hashes are the replicas'.
Three gateway configurations, each with fresh replicas (empty caches) on the same ports:

1. ``round_robin``
2. ``prefix``: today's prefix-hash ring with bounded loads (ε 0.25)
3. ``kv``: the same ring plus ``kv_models`` (resident prefix against load)

Workloads (the same seeded sequence for every configuration):

- ``pressure`` (llm-d's "KV-cache wins you can see" shape): ``--customers`` customers, each
  with a context of its own of ``--context-tokens`` tokens (its system prompt), a short
  question per request, Poisson arrivals; total KV demand of the contexts = ``--pressure`` of
  the four replicas' KV blocks;
- ``light``: the same with a quarter of the customers (no KV pressure);
- ``pressure`` then runs a saturating closed loop (``--closed-clients`` clients sending
  ``--closed-requests`` more requests of the same customers back to back): the open loop runs
  below capacity, where output throughput only repeats the arrival rate, so throughput is
  compared at capacity;
- ``multiturn``: ``--conversations`` chats sharing one short application system prompt
  (``--app-prompt-tokens``, 64: the conversation so far is most of each prompt, the case the
  static-prefix hash cannot see), each ``--turns`` turns (the answer appended, then a new user
  message), a closed loop per chat. The simulator caches prompt blocks only (vLLM also caches
  full output blocks), so the previous answer is never a hit for any policy.

Figures per workload and configuration (measured requests only): client TTFT p50/p90 (send ->
first content chunk, through the gateway), output throughput (completion tokens / wall time of
the phase), prefix-cache hit rate (Δ ``vllm:prefix_cache_hits_total`` / Δ ``..._queries_total``
over the replicas), preemptions (Δ ``vllm:num_preemptions_total``), routes (X-Deja-Route).
Then, in-process: the routing CPU per miss (block keys with tokenization + scoring) and the
KV index's memory per million resident blocks.

Times are simulated engine times x ``--speed``; the machine is shared, so read the ratios.

    .venv/bin/python bench/kv_routing.py [--speed 0.5] [--only pressure] [--micro-only]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import sys
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from common import (
    HOST,
    RESULTS_DIR,
    SERVER_CPU,
    Proc,
    banner,
    deja_bin,
    free_port,
    gateway_env,
    load_note,
    percentile,
    pinning_note,
    ratio,
    run_guarded,
    start_process,
    stop_process,
    table,
    wait_ready,
)

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = str(REPO / "deja/models/verifier/tokenizer.json")
MODEL = "deja-sim-1"
REPLICAS = 4
BLOCK_SIZE = 16
SEED = "0"
CONFIGS = ("round_robin", "prefix", "kv")


# --------------------------------------------------------------------------------------------
# workload


def words(rng: random.Random) -> list[str]:
    vocab = json.loads(Path(TOKENIZER).read_text())["model"]["vocab"]
    plain = sorted(w for w in vocab if w.isalpha() and w.islower() and 3 <= len(w) <= 9)
    return rng.sample(plain, 3000)


def text_of(rng: random.Random, vocab: list[str], tokens: int, head: str) -> str:
    """About ``tokens`` WordPiece tokens of pseudo-text (these words are one token each)."""
    body = " ".join(rng.choice(vocab) + ("." if rng.random() < 0.08 else "") for _ in range(tokens))
    return f"{head} {body}"


@dataclass
class Request:
    at: float
    messages: list[dict[str, str]]


@dataclass
class Workload:
    name: str
    open_loop: list[Request] = field(default_factory=list)
    warmup: int = 0
    #: pressure: the same customers' requests again, sent by a saturating closed loop
    closed: list[Request] = field(default_factory=list)
    chats: list[list[str]] = field(default_factory=list)  # multiturn: user messages per chat
    system: str = ""
    note: str = ""


def customers_workload(
    args: argparse.Namespace, customers: int, name: str, rng: random.Random
) -> Workload:
    vocab = words(rng)
    contexts = [
        text_of(rng, vocab, args.context_tokens, f"Customer {c} account and documents:")
        for c in range(customers)
    ]
    rate = args.rate if name == "pressure" else args.rate * 0.5
    # warm-up: every customer once (the steady state of a running service: a context's first
    # sight is a full prefill for any router), then --warmup requests like the measured ones
    first = rng.sample(range(customers), customers)
    warmup = customers + args.warmup
    at, reqs = 0.0, []
    for n in range(warmup + args.requests):
        c = first[n] if n < customers else rng.randrange(customers)
        question = text_of(rng, vocab, rng.randint(15, 30), f"Question {n}:")
        messages = [
            {"role": "system", "content": contexts[c]},
            {"role": "user", "content": question},
        ]
        reqs.append(Request(at, messages))
        at += rng.expovariate(rate)
    closed = []
    if name == "pressure":
        for n in range(args.closed_requests):
            c = rng.randrange(customers)
            question = text_of(rng, vocab, rng.randint(15, 30), f"Closed {n}:")
            closed.append(Request(0.0, [
                {"role": "system", "content": contexts[c]},
                {"role": "user", "content": question},
            ]))  # fmt: skip
    blocks = customers * (args.context_tokens // BLOCK_SIZE)
    share = blocks / (REPLICAS * args.kv_blocks)
    note = (
        f"{customers} customers x ~{args.context_tokens}-token contexts = {blocks} blocks = "
        f"{100 * share:.0f}% of the pool's {REPLICAS} x {args.kv_blocks} KV blocks; Poisson "
        f"{rate:g} req/s; warm-up: each customer once, then {args.warmup} requests; "
        f"{args.requests} measured requests"
    )
    if closed:
        note += (
            f"; then a saturating closed loop: {args.closed_clients} clients, "
            f"{args.closed_requests} requests back to back (output throughput at capacity)"
        )
    return Workload(name, reqs, warmup, closed=closed, note=note)


def multiturn_workload(args: argparse.Namespace, rng: random.Random) -> Workload:
    vocab = words(rng)
    system = text_of(rng, vocab, args.app_prompt_tokens, "You are the support assistant.")
    chats = [
        [text_of(rng, vocab, rng.randint(40, 80), f"Chat {c} turn {t}:") for t in range(args.turns)]
        for c in range(args.conversations)
    ]
    note = (
        f"{args.conversations} conversations x {args.turns} turns sharing one "
        f"{args.app_prompt_tokens}-token system prompt, 40-80-token user turns, the answer "
        f"appended each turn, {args.think_ms:g} ms think time; turn 1 is warm-up"
    )
    return Workload("multiturn", chats=chats, system=system, note=note)


# --------------------------------------------------------------------------------------------
# processes


def sim_cmd(args: argparse.Namespace, i: int, port: int, pub: int, replay: int) -> list[str]:
    events = orjson.dumps(
        {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{pub}",
            "replay_endpoint": f"tcp://*:{replay}",
        }
    ).decode()
    return [
        deja_bin(), "sim", "--host", HOST, "--port", str(port), "--replica-name", f"r{i + 1}",
        "--speed", f"{args.speed:g}", "--kv-blocks", str(args.kv_blocks),
        "--block-size", str(BLOCK_SIZE), "--max-num-seqs", str(args.max_num_seqs),
        "--base-ttft-ms", "20", "--prefill-ms-per-token", f"{args.prefill_ms_per_token:g}",
        "--decode-ms-per-token", f"{args.decode_ms_per_token:g}",
        "--max-num-batched-tokens", "4096", "--tokenizer", TOKENIZER, "--hash-seed", SEED,
        "--kv-events-config", events,
    ]  # fmt: skip


@dataclass
class Cluster:
    sims: list[Proc]
    urls: list[str]
    events: dict[str, dict[str, str]]


def start_cluster(args: argparse.Namespace, ports: list[int], zmq_ports: list[int]) -> Cluster:
    sims, events = [], {}
    for i, port in enumerate(ports):
        pub, replay = zmq_ports[2 * i], zmq_ports[2 * i + 1]
        sims.append(
            start_process(f"sim-{port}", sim_cmd(args, i, port, pub, replay), cpu=None, port=port)
        )
        events[f"http://{HOST}:{port}"] = {
            "endpoint": f"tcp://{HOST}:{pub}",
            "replay_endpoint": f"tcp://{HOST}:{replay}",
        }
    for proc in sims:
        wait_ready(proc, "/health", timeout=180)
    return Cluster(sims, [p.url for p in sims], events)


def start_gateway(config: str, cluster: Cluster) -> Proc:
    env = {
        "DEJA_CACHE_ENABLED": "false",
        "DEJA_SEMANTIC_ENABLED": "false",
        "DEJA_HEALTH_CHECK_INTERVAL_SECONDS": "1",
        "DEJA_UPSTREAM_CONNECT_TIMEOUT_SECONDS": "15",
        "DEJA_REQUEST_TIMEOUT_SECONDS": "600",
        "DEJA_ROUTING_POLICY": "round_robin" if config == "round_robin" else "prefix",
    }
    if config == "kv":
        model = {"tokenizer": TOKENIZER, "chat_template": "sim", "hash_seed": SEED}
        env["DEJA_KV_MODELS"] = orjson.dumps({MODEL: model}).decode()
        env["DEJA_KV_EVENTS"] = orjson.dumps(cluster.events).decode()
    port = free_port()
    proc = start_process(
        f"gateway-{config}",
        [deja_bin(), "serve", "--host", HOST, "--port", str(port)],
        cpu=SERVER_CPU,
        env=gateway_env(cluster.urls, env),
        port=port,
    )
    wait_ready(proc, "/healthz", timeout=180)
    wait_ready(proc, "/readyz", timeout=180)
    return proc


# --------------------------------------------------------------------------------------------
# client


@dataclass
class Sample:
    ttft: float
    tokens: int
    route: str
    measured: bool
    answer: str = ""
    #: share of the prompt the replica found in its prefix cache (usage's cached_tokens)
    cached: float = -1.0


async def stream(
    http: aiohttp.ClientSession, url: str, messages: list[dict[str, str]], max_tokens: int
) -> Sample:
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    ttft = -1.0
    parts: list[str] = []
    cached = -1.0
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        if resp.status != 200:
            text = (await resp.text())[:160]
            print(f"  request failed: HTTP {resp.status}: {text}", flush=True)
            return Sample(-1.0, 0, f"error {resp.status}", True)
        route = resp.headers.get("x-deja-route", "")
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            event = orjson.loads(line[5:])
            usage = event.get("usage")
            if usage and usage.get("prompt_tokens"):
                details = usage.get("prompt_tokens_details") or {}
                cached = (details.get("cached_tokens") or 0) / usage["prompt_tokens"]
            choices = event.get("choices") or []
            piece = choices[0].get("delta", {}).get("content") if choices else None
            if piece:
                if ttft < 0:
                    ttft = time.perf_counter() - sent
                parts.append(piece)
    return Sample(ttft, len(parts), route.split(";")[0], True, "".join(parts), cached)


async def scrape(http: aiohttp.ClientSession, urls: list[str]) -> dict[str, float]:
    names = (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
    )
    sums = dict.fromkeys(names, 0.0)
    for url in urls:
        async with http.get(url + "/metrics") as resp:
            for line in (await resp.text()).splitlines():
                name = line.split("{", 1)[0]
                if name in sums:
                    sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


async def run_open(
    workload: Workload, gw: str, sims: list[str], max_tokens: int, clients: int
) -> dict[str, Any]:
    limits = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=limits, timeout=aiohttp.ClientTimeout(600)) as http:
        warm = workload.open_loop[: workload.warmup]
        rest = workload.open_loop[workload.warmup :]
        await play(http, gw, warm, max_tokens, measured=False)
        before = await scrape(http, sims)
        started = time.perf_counter()
        samples = await play(http, gw, rest, max_tokens, measured=True)
        wall = time.perf_counter() - started
        after = await scrape(http, sims)
        result = summarize(samples, before, after, wall)
        if workload.closed:
            result["closed"] = await saturate(http, gw, sims, workload.closed, max_tokens, clients)
    return result


async def saturate(
    http: aiohttp.ClientSession,
    gw: str,
    sims: list[str],
    reqs: list[Request],
    max_tokens: int,
    clients: int,
) -> dict[str, Any]:
    """A closed loop of ``clients`` workers sending ``reqs`` back to back: output throughput
    at capacity (an open loop below capacity only measures its own arrival rate)."""
    queue = list(reversed(reqs))
    samples: list[Sample] = []

    async def worker() -> None:
        while queue:
            samples.append(await stream(http, gw, queue.pop().messages, max_tokens))

    before = await scrape(http, sims)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - started
    return summarize(samples, before, await scrape(http, sims), wall)


async def play(
    http: aiohttp.ClientSession, gw: str, reqs: list[Request], max_tokens: int, *, measured: bool
) -> list[Sample]:
    if not reqs:
        return []
    t0 = time.perf_counter() - reqs[0].at

    async def one(req: Request) -> Sample:
        delay = t0 + req.at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sample = await stream(http, gw, req.messages, max_tokens)
        sample.measured = measured
        return sample

    return list(await asyncio.gather(*(one(r) for r in reqs)))


async def run_multiturn(
    workload: Workload, gw: str, sims: list[str], max_tokens: int, think: float
) -> dict[str, Any]:
    limits = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=limits, timeout=aiohttp.ClientTimeout(600)) as http:
        before = await scrape(http, sims)
        started = time.perf_counter()

        async def chat(index: int, turns: list[str]) -> list[Sample]:
            await asyncio.sleep(index * think / len(workload.chats))
            messages = [{"role": "system", "content": workload.system}]
            out = []
            for t, user in enumerate(turns):
                messages.append({"role": "user", "content": user})
                sample = await stream(http, gw, list(messages), max_tokens)
                sample.measured = t > 0
                messages.append({"role": "assistant", "content": sample.answer})
                out.append(sample)
                await asyncio.sleep(think)
            return out

        per_chat = await asyncio.gather(*(chat(i, c) for i, c in enumerate(workload.chats)))
        wall = time.perf_counter() - started
        after = await scrape(http, sims)
    samples = [s for chat_samples in per_chat for s in chat_samples]
    return summarize(samples, before, after, wall)


def summarize(
    samples: list[Sample], before: dict[str, float], after: dict[str, float], wall: float
) -> dict[str, Any]:
    measured = [s for s in samples if s.measured]
    ttft = [s.ttft * 1000 for s in measured if s.ttft >= 0]
    delta = {k: after[k] - before[k] for k in after}
    routes: dict[str, int] = {}
    for s in measured:
        routes[s.route] = routes.get(s.route, 0) + 1
    # a prefill of most of the prompt: first sight, an evicted prompt, a spill off its holder
    prefills = [s for s in measured if 0 <= s.cached < 0.5]
    return {
        "requests": len(measured),
        "ttft_ms_p25": percentile(ttft, 25),
        "ttft_ms_p50": percentile(ttft, 50),
        "ttft_ms_p90": percentile(ttft, 90),
        "ttft_ms_mean": sum(ttft) / len(ttft) if ttft else 0.0,
        "ttft_ms": sorted(round(t, 2) for t in ttft),
        "output_tok_s": sum(s.tokens for s in samples) / wall if wall > 0 else 0.0,
        "hit_rate": ratio(
            delta["vllm:prefix_cache_hits_total"], delta["vllm:prefix_cache_queries_total"]
        ),
        "preemptions": int(delta["vllm:num_preemptions_total"]),
        "routes": routes,
        "prefills": len(prefills),
        "prefill_routes": dict(Counter(s.route for s in prefills)),
        "wall_s": round(wall, 1),
    }


# --------------------------------------------------------------------------------------------
# in-process: routing CPU per miss, index memory


def multiturn_times(
    chat_blocks: Any, score: Any, rng: random.Random, *, warm_chats: int = 0
) -> list[float]:
    """Thread CPU of turns 2.. of 16 chats: each request tokenizes the previous answer and
    question (its prefix), then scores. ``warm_chats`` other chats first, untimed (a gateway
    that has been running: its word memo knows the language's common words)."""
    vocab = words(random.Random(5))
    turn_times: list[float] = []
    for c in range(warm_chats + 16):
        messages = [{"role": "system", "content": text_of(rng, vocab, 400, "App.")}]
        for t in range(5):
            messages.append({"role": "user", "content": text_of(rng, vocab, 60, f"C{c}T{t}")})
            start = time.thread_time_ns()
            match = chat_blocks.match("chat", {"messages": list(messages)}, "t:bench")
            assert match is not None
            score(match)
            if t and c >= warm_chats:
                turn_times.append((time.thread_time_ns() - start) / 1000)
            messages.append({"role": "assistant", "content": text_of(rng, vocab, 32, "A")})
    return turn_times


def micro(args: argparse.Namespace, workload: Workload) -> dict[str, Any]:
    """Thread CPU of the route step's KV part per request (block keys with tokenization, then
    ``KVRouting.order`` over four replicas whose indexes hold the workload's blocks), and bytes
    per resident block."""
    from tokenizers import Tokenizer

    from deja.kvcache.blockhash import BlockHasher
    from deja.upstream.kv.match import PromptBlocks
    from deja.upstream.kv.route import KVRouting
    from deja.upstream.pool import Replica

    hasher = BlockHasher("sha256", SEED, BLOCK_SIZE)
    blocks = PromptBlocks(Tokenizer.from_file(TOKENIZER), "sim", hasher)
    kv = KVRouting({}, lambda url: None, min_capacity=2)
    index = kv.index
    replicas = [Replica(f"http://r{i}") for i in range(REPLICAS)]

    def score(match: Any) -> None:
        kv.order(replicas, match, {}, 0.25, 3.0, time.monotonic())

    rng = random.Random(3)
    # fill the indexes: each context resident on one replica, plus filler up to the KV budget
    for n, req in enumerate(workload.open_loop[: workload.warmup]):
        match = blocks.match("chat", {"messages": req.messages}, "t:bench")
        assert match is not None
        index.replica(replicas[n % REPLICAS].url).blocks.update(match.keys)
    for r in replicas:
        index.replica(r.url).state = "live"
        while len(index.replica(r.url).blocks) < args.kv_blocks:
            index.replica(r.url).blocks.add(rng.getrandbits(64))
    fresh = PromptBlocks(Tokenizer.from_file(TOKENIZER), "sim", hasher)  # cold memos
    times_first: list[float] = []
    times: list[float] = []
    seen: set[str] = set()
    for req in workload.open_loop[workload.warmup :]:
        t = time.thread_time_ns()
        match = fresh.match("chat", {"messages": req.messages}, "t:bench")
        assert match is not None
        score(match)
        spent = (time.thread_time_ns() - t) / 1000
        system = req.messages[0]["content"]
        (times if system in seen else times_first).append(spent)
        seen.add(system)

    def matcher(fast: bool) -> PromptBlocks:
        made = PromptBlocks(Tokenizer.from_file(TOKENIZER), "sim", hasher)
        if not fast:
            made.text_tokens.tokenizer_only()
        return made

    # side by side, interleaved rounds: the fast token path and the tokenizer alone
    cold, turn_times, whole = [], [], []
    for _ in range(3):
        cold += multiturn_times(matcher(True), score, rng)
        turn_times += multiturn_times(matcher(True), score, rng, warm_chats=48)
        whole += multiturn_times(matcher(False), score, rng, warm_chats=48)
    # bytes per resident block: a set of 1M random 64-bit keys
    tracemalloc.start()
    keys = {random.getrandbits(64) for _ in range(1_000_000)}
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del keys
    return {
        "route_cpu_us_p50": percentile(times, 50),
        "route_cpu_us_p90": percentile(times, 90),
        "route_cpu_us_first_p50": percentile(times_first, 50),
        "route_cpu_us_multiturn_p50": percentile(turn_times, 50),
        "route_cpu_us_multiturn_p90": percentile(turn_times, 90),
        "route_cpu_us_multiturn_cold_p50": percentile(cold, 50),
        "route_cpu_us_multiturn_cold_p90": percentile(cold, 90),
        "route_cpu_us_multiturn_tokenizer_only_p50": percentile(whole, 50),
        "requests_timed": len(times),
        "first_seen_timed": len(times_first),
        "index_bytes_per_block": size / 1_000_000,
        "index_mib_per_million_blocks": size / 2**20,
    }


# --------------------------------------------------------------------------------------------
# main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--speed", type=float, default=0.5, help="simulated time multiplier (0.5)")
    add("--kv-blocks", type=int, default=800, help="KV blocks per replica (800)")
    add("--max-num-seqs", type=int, default=4)
    add("--prefill-ms-per-token", type=float, default=0.6)
    add("--decode-ms-per-token", type=float, default=12.0)
    add("--customers", type=int, default=24)
    add("--context-tokens", type=int, default=1500)
    add("--rate", type=float, default=4.0, help="pressure arrivals, req/s (light: half)")
    add("--requests", type=int, default=160)
    add("--warmup", type=int, default=60, help="requests after each customer's first (60)")
    add("--max-tokens", type=int, default=32)
    add("--closed-requests", type=int, default=200, help="pressure's closed loop (0: none)")
    add("--closed-clients", type=int, default=24, help="its clients (replicas x seqs x 1.5)")
    add("--conversations", type=int, default=24)
    add("--turns", type=int, default=6)
    add(
        "--app-prompt-tokens",
        type=int,
        default=64,
        help="(64: the conversation is most of the prompt)",
    )
    add("--think-ms", type=float, default=400.0)
    add("--only", action="append", choices=["pressure", "light", "multiturn"], default=[])
    add("--micro-only", action="store_true")
    add("--no-micro", action="store_true", help="skip the in-process CPU and memory part")
    add("--configs", action="append", choices=CONFIGS, default=[], help="(all three)")
    add("--seed", type=int, default=11)
    add("--output", type=Path, default=RESULTS_DIR / "kv_routing.json")
    return parser.parse_args()


def run_workload(
    workload: Workload, args: argparse.Namespace, ports: list[int], zmq_ports: list[int]
) -> dict[str, Any]:
    out: dict[str, Any] = {"note": workload.note, "configs": {}}
    for config in args.configs or CONFIGS:
        banner(f"{workload.name}: {config}")
        cluster = start_cluster(args, ports, zmq_ports)
        gateway = start_gateway(config, cluster)
        try:
            if workload.chats:
                coro = run_multiturn(
                    workload, gateway.url, cluster.urls, args.max_tokens, args.think_ms / 1000
                )
            else:
                coro = run_open(
                    workload, gateway.url, cluster.urls, args.max_tokens, args.closed_clients
                )
            result = asyncio.run(coro)
        finally:
            stop_process(gateway)
            for sim in cluster.sims:
                stop_process(sim)
        print(f"  { {k: v for k, v in result.items() if k != 'ttft_ms'} }")
        out["configs"][config] = result
    return out


def difference_interval(
    a: list[float], b: list[float], q: float, resamples: int = 2000
) -> tuple[float, float]:
    """A 95% bootstrap interval of percentile ``q`` of ``a`` minus that of ``b`` (requests
    resampled within each config: one run's TTFT percentile moves by a millisecond or two
    from sampling alone)."""
    if not a or not b:
        return (0.0, 0.0)
    rng = random.Random(0)
    diffs = sorted(
        percentile(rng.choices(a, k=len(a)), q) - percentile(rng.choices(b, k=len(b)), q)
        for _ in range(resamples)
    )
    return diffs[int(0.025 * resamples)], diffs[int(0.975 * resamples) - 1]


def kv_against_prefix(kv: dict[str, Any], prefix: dict[str, Any]) -> list[str]:
    """The report's lines comparing the two routers on one workload."""
    lines = [
        f"  kv vs prefix: TTFT p90 {ratio(prefix['ttft_ms_p90'], kv['ttft_ms_p90']):.2f}x "
        f"better, output {ratio(kv['output_tok_s'], prefix['output_tok_s']):.2f}x, "
        f"hit rate {ratio(kv['hit_rate'], prefix['hit_rate']):.2f}x"
    ]
    for q in (50, 90):
        low, high = difference_interval(kv["ttft_ms"], prefix["ttft_ms"], q)
        diff = kv[f"ttft_ms_p{q}"] - prefix[f"ttft_ms_p{q}"]
        lines.append(
            f"  kv - prefix TTFT p{q}: {diff:+.1f} ms (bootstrap 95% interval "
            f"{low:+.1f} to {high:+.1f})"
        )
    return lines


def report(results: dict[str, Any]) -> str:
    lines = ["", "SIMULATED replicas (deja sim); shared 2-core machine: read the ratios", ""]
    for name, block in results["workloads"].items():
        lines.append(f"{name}: {block['note']}")
        rows = []
        for config, r in block["configs"].items():
            rows.append([
                config, r["requests"], r["ttft_ms_p50"], r["ttft_ms_p90"], r["output_tok_s"],
                r["hit_rate"], r["preemptions"],
                ", ".join(f"{k} {v}" for k, v in sorted(r["routes"].items())),
            ])  # fmt: skip
        headers = ["config", "reqs", "TTFT p50 ms", "TTFT p90 ms", "out tok/s", "hit rate",
                   "preempt", "routes"]  # fmt: skip
        lines.append(table(headers, rows, digits=3))
        closed = {c: r["closed"] for c, r in block["configs"].items() if "closed" in r}
        if closed:
            lines.append("  saturating closed loop (throughput at capacity):")
            crows = [
                [c, r["requests"], r["ttft_ms_p50"], r["ttft_ms_p90"], r["output_tok_s"],
                 r["hit_rate"], r["preemptions"]]
                for c, r in closed.items()
            ]  # fmt: skip
            lines.append(table(headers[:-1], crows, digits=3))
            if "kv" in closed and "prefix" in closed:
                lines.append(
                    "  kv vs prefix at capacity: output "
                    f"{ratio(closed['kv']['output_tok_s'], closed['prefix']['output_tok_s']):.2f}x"
                )
        kv, prefix = block["configs"].get("kv"), block["configs"].get("prefix")
        if kv and prefix:
            lines += kv_against_prefix(kv, prefix)
        lines.append("")
    m = results.get("micro")
    if m:
        lines.append(
            f"routing CPU per miss (block keys with tokenization + KVRouting.order over {REPLICAS} "
            f"replicas): p50 {m['route_cpu_us_p50']:.0f} us, p90 {m['route_cpu_us_p90']:.0f} us "
            f"(repeat contexts); first sight of a context p50 {m['route_cpu_us_first_p50']:.0f} us"
            f"; multi-turn (the previous answer and question tokenized) p50 "
            f"{m['route_cpu_us_multiturn_p50']:.0f} us, "
            f"p90 {m['route_cpu_us_multiturn_p90']:.0f} us; the same from a cold word memo "
            f"(a gateway's first chats) p50 {m['route_cpu_us_multiturn_cold_p50']:.0f} us, "
            f"p90 {m['route_cpu_us_multiturn_cold_p90']:.0f} us; with the tokenizer alone "
            f"(no fast token path) p50 {m['route_cpu_us_multiturn_tokenizer_only_p50']:.0f} us"
        )
        lines.append(
            f"KV index memory: {m['index_bytes_per_block']:.0f} bytes per resident block = "
            f"{m['index_mib_per_million_blocks']:.0f} MiB per million blocks"
        )
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    print("deja KV-event routing benchmark -- the replicas are SIMULATED (deja sim)")
    print(pinning_note())
    print(load_note())
    rng = random.Random(args.seed)
    pressure = customers_workload(args, args.customers, "pressure", rng)
    light = customers_workload(args, max(args.customers // 4, 1), "light", random.Random(args.seed))
    multiturn = multiturn_workload(args, random.Random(args.seed + 1))
    results: dict[str, Any] = {
        "meta": {
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "args": {k: str(v) for k, v in vars(args).items()},
            "replica": "SIMULATED (deja sim)",
            "load_at_start": load_note(),
        },
        "workloads": {},
    }

    def body() -> None:
        if not args.no_micro:
            results["micro"] = micro(args, pressure)
        if args.micro_only:
            return
        ports = [free_port() for _ in range(REPLICAS)]
        zmq_ports = [free_port() for _ in range(2 * REPLICAS)]
        chosen = args.only or ["pressure", "light", "multiturn"]
        for workload in (pressure, light, multiturn):
            if workload.name in chosen:
                results["workloads"][workload.name] = run_workload(workload, args, ports, zmq_ports)

    failed = run_guarded(body)
    if failed is not None:
        return failed
    text = report(results)
    print(text)
    results["report"] = text
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(f"results written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
