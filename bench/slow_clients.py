"""Slow clients against normal traffic (issue 19, finding 4), side by side in ONE run.

One SIMULATED replica (``deja sim --speed 0``) behind one gateway per source tree: this
checkout and, with ``--baseline DIR``, another one (e.g. base-stop17 extracted with ``git
archive``), each started as ``python -m app serve`` with its open-file limit at 1,024 (a common
default; ``deja serve`` now raises its own to the hard limit). Per gateway:

1. quiet: ``--requests`` exact hits, each on a new connection; p50/p99, errors;
2. under attack: ``--slow`` connections (default 2,000; this script raises its own soft
   open-file limit with ``resource``) send a request's headers one byte per second and are
   re-opened as soon as the gateway closes them, while the same exact hits are sent again;
   p50/p99, errors, the attacker's connections the gateway held open at the end, and the
   gateway's open descriptors.

Target: p99 under attack < 50 ms and no errors. Writes ``bench/results/slow_clients.json``.
All traffic goes to 127.0.0.1. The machine is shared: compare the rows, not absolute values.

    .venv/bin/python bench/slow_clients.py [--baseline DIR] [--slow 2000] [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import MODEL_CACHE_DIR, REPO_ROOT, free_port, log_dir, percentile, table

BODY = {"model": "deja-sim-1", "messages": [{"role": "user", "content": "What is deja?"}]}


def _fd_1024() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))


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


async def normal(url: str, n: int) -> tuple[list[float], int]:
    """``n`` exact hits, each on a new connection; latencies (s) and errors."""
    latencies, errors = [], 0
    for _ in range(n):
        started = time.perf_counter()
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                reply = await http.post(url + "/v1/chat/completions", json=BODY)
            errors += reply.status_code != 200
        except httpx.HTTPError:
            errors += 1
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.01)
    return latencies, errors


class Attack:
    """``count`` slowloris connections, re-opened as the gateway closes them."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.open = 0
        self.refused = 0
        self.stop = False

    async def one(self) -> None:
        while not self.stop:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                self.refused += 1
                await asyncio.sleep(0.5)
                continue
            self.open += 1
            try:
                for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 60:
                    if self.stop:
                        break
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(1.0)
            except OSError:
                pass
            finally:
                self.open -= 1
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def run(self) -> list[asyncio.Task[None]]:
        tasks = []
        for _ in range(self.count):
            tasks.append(asyncio.create_task(self.one()))
            await asyncio.sleep(0.001)
        return tasks


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def measure(name: str, proc: subprocess.Popen[bytes], url: str, args: Any) -> dict[str, Any]:
    await normal(url, 5)  # warm, and store the answer (the rest are exact hits)
    await asyncio.sleep(0.5)
    quiet, quiet_errors = await normal(url, args.requests)
    attack = Attack(int(url.rsplit(":", 1)[1]), args.slow)
    tasks = await attack.run()
    await asyncio.sleep(2.0)
    loud, loud_errors = await normal(url, args.requests)
    held, gateway_fds = attack.open, fds(proc.pid)
    attack.stop = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "gateway": name,
        "quiet_p50_ms": 1000 * percentile(quiet, 50),
        "quiet_p99_ms": 1000 * percentile(quiet, 99),
        "quiet_errors": quiet_errors,
        "attack_p50_ms": 1000 * percentile(loud, 50),
        "attack_p99_ms": 1000 * percentile(loud, 99),
        "attack_errors": loud_errors,
        "slow_held_at_end": held,
        "slow_refused_connects": attack.refused,
        "gateway_fds": gateway_fds,
        "alive": proc.poll() is None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--slow", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.slow + 1024)), hard))
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
                results.append(asyncio.run(measure(name, proc, url, args)))
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
