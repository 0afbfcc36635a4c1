"""Slow clients against normal traffic (issue 19, finding 4), side by side in ONE run.

One SIMULATED replica (``deja sim --speed 0``) behind one gateway per source tree: this
checkout and, with ``--baseline DIR``, another one (``git archive main | tar -x -C DIR``), each
started as ``python -m app serve`` with its open-file limit at 1,024 (a common default; ``deja
serve`` raises its own soft limit to the hard one). Per gateway:

1. quiet: ``--requests`` exact hits, one after the other, each on a new connection;
2. under attack: an attacker PROCESS of its own opens ``--slow`` connections (default 2,000)
   that each send a request line and then one partial header line every ``--drip`` seconds
   (never the blank line that ends the headers), re-opening each one the gateway closes; once
   they are open the same exact hits are sent again.

The measuring client is a raw socket (one prebuilt request, the response read to its
``Content-Length``), so its own cost stays out of the figures, and the attacker is a plain
non-blocking socket loop in another process, so 2,000 connections cost it little CPU and none
of the client's. Figures per phase: p50/p99 and errors; under attack also the attacker's
connections open at the end, how many the gateway closed (and were re-opened), and the
gateway's open descriptors.

Target: p99 under attack < 50 ms with no errors. The exit status is 1 when it fails for this
checkout. Writes ``bench/results/slow_clients.json``. All traffic goes to 127.0.0.1. About a
minute for two gateways with the defaults (45-55 s measured):

    .venv/bin/python bench/slow_clients.py --baseline /tmp/deja-main-base

The machine may be shared: compare the rows, not absolute values.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import MODEL_CACHE_DIR, REPO_ROOT, free_port, log_dir, percentile, table

#: The attacker's loop: one pass over its connections every TICK seconds; it stops on SIGTERM
#: from the bench, or by itself after ATTACK_SECONDS_MAX (a bounded loop).
TICK = 0.25
ATTACK_SECONDS_MAX = 300.0

BODY = json.dumps(
    {"model": "deja-sim-1", "messages": [{"role": "user", "content": "What is deja?"}]}
).encode()


def _fd_1024() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))


def raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, need)), hard))


def spawn(cmd: list[str], cwd: Path, name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=(log_dir() / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=_fd_1024,
    )


def wait(url: str, proc: subprocess.Popen[bytes], path: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url} exited {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + path, timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not become ready")


def gateway(name: str, src: Path, replica: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJA_")}
    env.update(
        DEJA_REPLICAS=replica,
        DEJA_DATA_DIR=str(log_dir() / f"data-{name}"),
        DEJA_MODEL_DIR=str(MODEL_CACHE_DIR),
        DEJA_LOG_LEVEL="warning",
        DEJA_ACCESS_LOG="false",
        DEJA_SEMANTIC_ENABLED="false",
        DEJA_CORPORA_ENABLED="false",
    )
    cmd = [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = spawn(cmd, src, name, env)
    url = f"http://127.0.0.1:{port}"
    wait(url, proc, "/readyz")
    return proc, url


# --- the measuring client: one request per new connection, on a raw socket ------------------


def request_bytes(port: int) -> bytes:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + BODY


def one(port: int, raw: bytes, timeout: float = 5.0) -> tuple[float, bool]:
    """Seconds for one exact hit on a new connection (connect to the last body byte), and
    whether it was a 200 with its whole body."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(raw)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return time.perf_counter() - started, False
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                body += chunk
            ok = head.startswith(b"HTTP/1.1 200") and len(body) >= length
    except OSError:
        return time.perf_counter() - started, False
    return time.perf_counter() - started, ok


def normal(port: int, n: int, gap: float = 0.02) -> tuple[list[float], int]:
    """``n`` exact hits one after the other: latencies (s) and errors."""
    raw = request_bytes(port)
    latencies, errors = [], 0
    for _ in range(n):
        seconds, ok = one(port, raw)
        latencies.append(seconds)
        errors += not ok
        time.sleep(gap)
    return latencies, errors


# --- the attacker: its own process, a plain non-blocking socket loop ------------------------


def attack(port: int, count: int, drip: float, seconds: float) -> dict[str, int]:
    """Hold ``count`` connections until SIGTERM (or ``seconds`` at most): each sends a request
    line, then a partial header line every ``drip`` seconds; a connection the gateway closes
    is opened again (at most a tenth of ``count`` per tick, so the churn stays bounded).
    Prints how it went."""
    raise_fd_limit(count + 256)
    socks: list[socket.socket | None] = [None] * count
    opened = closed = 0
    stop = time.monotonic() + seconds
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    tick = 0
    every = max(1, round(drip / TICK))
    while time.monotonic() < stop and not stopping:
        budget = max(1, count // 10)
        for i, sock in enumerate(socks):
            if sock is None:
                if budget == 0:
                    continue
                budget -= 1
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=1)
                    sock.setblocking(False)
                    sock.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
                except OSError:
                    continue
                socks[i] = sock
                opened += 1
            elif tick % every == i % every:
                try:
                    sock.send(b"X-Pad-%d: a" % tick)  # a header line never finished
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass  # nothing to read: still open
                except OSError:
                    sock.close()
                    socks[i] = None
                    closed += 1
        tick += 1
        time.sleep(TICK)
    held = sum(s is not None for s in socks)
    for sock in socks:
        if sock is not None:
            sock.close()
    result = {"opened": opened, "closed_by_gateway": closed, "held_at_end": held}
    print(json.dumps(result), flush=True)
    return result


def start_attack(port: int, args: Any) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--attacker", str(port), "--slow", str(args.slow)]
    cmd += ["--drip", str(args.drip)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def measure(name: str, proc: subprocess.Popen[bytes], url: str, args: Any) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    normal(port, 5)  # warm, and store the answer (the rest are exact hits)
    time.sleep(0.5)
    quiet, quiet_errors = normal(port, args.requests)
    attacker = start_attack(port, args)
    time.sleep(args.ramp)  # let the attacker open its connections
    fds_attacked = fds(proc.pid)
    loud, loud_errors = normal(port, args.requests)
    fds_after = fds(proc.pid)
    attacker.terminate()  # it closes its connections and prints its figures
    out, _ = attacker.communicate(timeout=60)
    held = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return {
        "gateway": name,
        "quiet_p50_ms": 1000 * percentile(quiet, 50),
        "quiet_p99_ms": 1000 * percentile(quiet, 99),
        "quiet_errors": quiet_errors,
        "attack_p50_ms": 1000 * percentile(loud, 50),
        "attack_p99_ms": 1000 * percentile(loud, 99),
        "attack_errors": loud_errors,
        "slow_opened": held.get("opened"),
        "slow_closed_by_gateway": held.get("closed_by_gateway"),
        "slow_held_at_end": held.get("held_at_end"),
        "gateway_fds": max(fds_attacked, fds_after),
        "alive": proc.poll() is None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--slow", type=int, default=2000, help="slow connections")
    parser.add_argument("--requests", type=int, default=200, help="exact hits per phase")
    parser.add_argument("--drip", type=float, default=3.0, help="seconds between header bytes")
    parser.add_argument("--ramp", type=float, default=8.0, help="seconds to open them first")
    parser.add_argument("--attacker", type=int, help=argparse.SUPPRESS)  # the child's mode
    args = parser.parse_args()
    if args.attacker is not None:
        attack(args.attacker, args.slow, args.drip, ATTACK_SECONDS_MAX)
        return 0
    sim_port = free_port()
    sim = spawn(
        [sys.executable, "-m", "app", "sim", "--port", str(sim_port), "--speed", "0"],
        REPO_ROOT,
        "sim",
        dict(os.environ),
    )
    sim_url = f"http://127.0.0.1:{sim_port}"
    wait(sim_url, sim, "/health")
    trees = {"this": REPO_ROOT} | ({"baseline": args.baseline} if args.baseline else {})
    results = []
    try:
        for name, src in trees.items():
            proc, url = gateway(name, src, sim_url)
            try:
                results.append(measure(name, proc, url, args))
                print(json.dumps(results[-1]), flush=True)
            finally:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(20)
                if proc.poll() is None:
                    proc.kill()
    finally:
        sim.terminate()
        sim.wait(20)
    keys = [k for k in results[0] if k != "gateway"]
    print(table(["gateway", *keys], [[r["gateway"], *(r[k] for k in keys)] for r in results], 1))
    out = REPO_ROOT / "bench" / "results" / "slow_clients.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"slow": args.slow, "results": results}, indent=2))
    ours = results[0]
    ok = ours["attack_p99_ms"] < 50 and ours["attack_errors"] == 0 and ours["alive"]
    print("p99 < 50 ms and no errors under attack:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
