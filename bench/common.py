"""Shared helpers of the benchmark scripts: subprocesses on free ports, CPU pinning, ``wrk``
runs (with a generated Lua script), result tables and ratios.

Every process started here is registered and killed on exit (``atexit``, SIGTERM/SIGINT and, on
Linux, a parent-death signal), so an aborted benchmark leaves nothing behind.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import ctypes
import datetime as dt
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
VENV_BIN = REPO_ROOT / ".venv" / "bin"
RESULTS_DIR = BENCH_DIR / "results"
HOST = "127.0.0.1"

#: CPU roles. Servers under test get one core, the load generator (and whatever is not under
#: test) the other, so they do not steal each other's cycles.
SERVER_CPU = 0
LOADGEN_CPU = 1


class BenchError(RuntimeError):
    """A benchmark could not run (a server did not come up, wrk failed, ...)."""


# --------------------------------------------------------------------------------------------
# CPU pinning


def _available_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


TASKSET = shutil.which("taskset")
CPUS = _available_cpus()
PINNING = TASKSET is not None and {SERVER_CPU, LOADGEN_CPU} <= CPUS


def pinned(cmd: Sequence[str], cpu: int | None) -> list[str]:
    """``cmd`` prefixed with ``taskset -c CPU`` when pinning is possible."""
    if cpu is None or not PINNING or TASKSET is None:
        return list(cmd)
    return ["taskset", "-c", str(cpu), *cmd]


def pinning_note() -> str:
    if PINNING:
        return (
            f"CPU pinning: taskset ON (servers under test on cpu {SERVER_CPU}, load generator "
            f"on cpu {LOADGEN_CPU}; the simulated replica also on cpu {LOADGEN_CPU}). "
            f"{len(CPUS)} CPUs available."
        )
    why = "taskset not found" if TASKSET is None else f"CPUs {sorted(CPUS)} < 2"
    return f"CPU pinning: OFF ({why}); load generator and servers share all CPUs."


# --------------------------------------------------------------------------------------------
# subprocesses


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """preexec_fn: ask Linux to SIGTERM the child when this benchmark process dies."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class Proc:
    """A started subprocess and where its output goes."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    popen: subprocess.Popen[bytes]
    log_path: Path
    port: int | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.popen.poll() is None


_PROCS: list[Proc] = []
#: Every command line run by the helpers, in order (for the printed/JSON record).
COMMANDS: list[str] = []
_LOG_DIR: Path | None = None
#: Derived embedding-model files of benchmark gateways (git-ignored, kept between runs).
MODEL_CACHE_DIR = RESULTS_DIR / ".cache" / "models"


def log_dir() -> Path:
    """This run's temporary folder (logs, wrk scripts, captured bodies), made on first use."""
    global _LOG_DIR
    if _LOG_DIR is None:
        _LOG_DIR = Path(tempfile.mkdtemp(prefix="deja-bench-"))
    return _LOG_DIR


def remove_logs() -> None:
    """Delete this run's temporary folder (call after a successful run)."""
    global _LOG_DIR
    if _LOG_DIR is not None:
        shutil.rmtree(_LOG_DIR, ignore_errors=True)
        _LOG_DIR = None


def command_line(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """A shell-pasteable rendering of ``env cmd``."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + shlex.join(cmd)


def start_process(
    name: str,
    cmd: Sequence[str],
    *,
    cpu: int | None,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Proc:
    """Start ``cmd`` (pinned to ``cpu``) in the background; output goes to a log file."""
    full = pinned(cmd, cpu)
    extra = dict(env or {})
    line = command_line(full, extra)
    COMMANDS.append(line)
    print(f"  $ {line}", flush=True)
    log_path = log_dir() / f"{name}.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            full,
            cwd=REPO_ROOT,
            env={**os.environ, **extra},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    proc = Proc(name=name, cmd=full, env=extra, popen=popen, log_path=log_path, port=port)
    _PROCS.append(proc)
    return proc


def stop_process(proc: Proc, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds. Only this process, by its pid."""
    if proc.alive():
        with contextlib.suppress(ProcessLookupError):
            proc.popen.terminate()
        try:
            proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout)
    if proc in _PROCS:
        _PROCS.remove(proc)


def stop_all() -> None:
    for proc in reversed(list(_PROCS)):
        stop_process(proc)


def _on_signal(signum: int, frame: object) -> None:
    print(f"\nsignal {signum}: stopping {len(_PROCS)} benchmark process(es)", file=sys.stderr)
    stop_all()
    raise SystemExit(128 + signum)


atexit.register(stop_all)
signal.signal(signal.SIGTERM, _on_signal)


def wait_ready(proc: Proc, path: str, timeout: float | None = None) -> None:
    """Poll ``GET path`` until it answers 200; fail clearly if the process dies or times out
    (``BENCH_READY_SECONDS``, default 30: a loaded machine loads the models more slowly)."""
    if timeout is None:
        timeout = float(os.environ.get("BENCH_READY_SECONDS", "30"))
    url = proc.url + path
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if not proc.alive():
                raise BenchError(
                    f"{proc.name} exited with status {proc.popen.returncode} before {url} "
                    f"answered.\ncommand: {command_line(proc.cmd, proc.env)}\n"
                    f"log tail ({proc.log_path}):\n{proc.log_tail()}"
                )
            try:
                response = client.get(url)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
    raise BenchError(
        f"{proc.name} did not answer 200 on {url} within {timeout:.0f}s (last: {last}).\n"
        f"command: {command_line(proc.cmd, proc.env)}\n"
        f"log tail ({proc.log_path}):\n{proc.log_tail()}"
    )


def deja_bin() -> str:
    path = VENV_BIN / "deja"
    if path.exists():
        return str(path)
    found = shutil.which("deja")
    if found is None:
        raise BenchError("the `deja` console script was not found (.venv/bin/deja)")
    return found


def start_sim(name: str, *, cpu: int | None, args: Sequence[str] = ("--speed", "0")) -> Proc:
    """``deja sim`` on a free port, ready when ``/health`` answers."""
    port = free_port()
    proc = start_process(
        name, [deja_bin(), "sim", "--host", HOST, "--port", str(port), *args], cpu=cpu, port=port
    )
    wait_ready(proc, "/health")
    return proc


def start_gateway(
    name: str, replicas: Sequence[str], *, cpu: int | None, env: Mapping[str, str] | None = None
) -> Proc:
    """``deja serve`` on a free port, ready when ``/healthz`` and ``/readyz`` answer 200.

    ``DEJA_*`` variables of this process's environment are passed on (and printed), then
    ``env`` on top of them."""
    port = free_port()
    gw_env = gateway_env(replicas, env)
    proc = start_process(
        name,
        [deja_bin(), "serve", "--host", HOST, "--port", str(port)],
        cpu=cpu,
        env=gw_env,
        port=port,
    )
    wait_ready(proc, "/healthz")
    wait_ready(proc, "/readyz")
    return proc


def gateway_env(replicas: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``DEJA_*`` environment a benchmark gateway runs with.

    Unless set by the caller, embedded stores live in this run's temporary folder (a fresh,
    empty store each run; the developer's ``.deja`` is left alone) while derived model files
    stay cached in ``bench/results/.cache/models`` (git-ignored)."""
    inherited = {k: v for k, v in os.environ.items() if k.startswith("DEJA_")}
    isolated = {
        "DEJA_DATA_DIR": str(log_dir() / "data"),
        "DEJA_MODEL_DIR": str(MODEL_CACHE_DIR),
    }
    return {
        **isolated,
        **inherited,
        "DEJA_REPLICAS": ",".join(replicas),
        "DEJA_LOG_LEVEL": "warning",
        **(env or {}),
    }


def gateway_config(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The gateway's effective settings (``deja serve --print-config``) under ``env``."""
    try:
        done = subprocess.run(
            [deja_bin(), "serve", "--print-config"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            cwd=REPO_ROOT,
            env={**os.environ, **env},
        )
        config = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, BenchError):
        return None
    return config if isinstance(config, dict) else None


def start_bare_server(name: str, body_file: Path, headers_file: Path, *, cpu: int | None) -> Proc:
    """``bench/bare_server.py`` answering every POST with the given bytes and headers."""
    port = free_port()
    cmd = [
        sys.executable,
        str(BENCH_DIR / "bare_server.py"),
        "--host",
        HOST,
        "--port",
        str(port),
        "--body",
        str(body_file),
        "--headers",
        str(headers_file),
    ]
    proc = start_process(name, cmd, cpu=cpu, port=port)
    wait_ready(proc, "/healthz")
    return proc


# --------------------------------------------------------------------------------------------
# the ASGI app called in-process (no sockets, no load generator: the gateway's own CPU)


def asgi_scope(
    raw: bytes,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
    path: str = "/v1/chat/completions",
) -> dict[str, Any]:
    """The HTTP scope uvicorn would build for a JSON POST of ``raw`` to ``path``."""
    headers = [
        (b"host", HOST.encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(raw)).encode()),
        *extra_headers,
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": (HOST, 1),
        "server": (HOST, 2),
    }


async def asgi_call(app: Any, raw: bytes, scope: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One request through the ASGI ``app``: the body in one message, a client that never
    disconnects; returns the messages the app sent."""
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)  # the client never disconnects
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(dict(scope), receive, send)
    return sent


# --------------------------------------------------------------------------------------------
# wrk


@dataclass
class WrkResult:
    """One wrk run. Latencies in milliseconds."""

    label: str
    url: str
    connections: int
    threads: int
    duration_s: float
    requests: int
    rps: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float
    non_2xx: int = 0
    socket_errors: int = 0
    command: str = ""
    latency_table: dict[str, float] = field(default_factory=dict)
    #: CPU seconds (user + system) each watched process used during the run.
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: How many wrk runs were combined into this result (interleaved rounds).
    rounds: int = 1
    #: CPU seconds used on the machine during the run by processes other than the watched
    #: ones and wrk (other users' work); NaN where /proc/stat is unavailable.
    other_cpu_s: float = math.nan

    @property
    def other_cpu_pct(self) -> float:
        """``other_cpu_s`` as a percentage of all CPUs over the run."""
        return 100 * self.other_cpu_s / (self.duration_s * max(1, len(CPUS)))

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors

    def cpu_pct(self, name: str) -> float:
        """How busy the process ``name`` was during the run (100 = one full CPU)."""
        if name not in self.cpu_s or not self.duration_s:
            return math.nan
        return 100 * self.cpu_s[name] / self.duration_s

    def cpu_us_per_request(self, name: str) -> float:
        """CPU microseconds the process ``name`` spent per request (contention-robust)."""
        if name not in self.cpu_s or not self.requests:
            return math.nan
        return self.cpu_s[name] / self.requests * 1e6

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The ``done`` hook every wrk script ends with: the figures ``run_wrk`` parses (DEJA_STATS).
WRK_DONE_LUA = [
    "function done(summary, latency, requests)",
    '  io.write(string.format("DEJA_STATS %d %d %d %d %d %d %.3f %d %d %d %d %d\\n",',
    "    latency:percentile(50), latency:percentile(75), latency:percentile(90),",
    "    latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean,",
    "    summary.requests, summary.duration, summary.errors.status,",
    "    summary.errors.connect + summary.errors.read + summary.errors.write,",
    "    summary.errors.timeout))",
    "end",
]


def _lua_string(value: str | bytes) -> str:
    """A double-quoted Lua string literal holding exactly ``value``'s bytes."""
    raw = value.encode() if isinstance(value, str) else value
    out = []
    for byte in raw:
        char = chr(byte)
        if char in '\\"':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def write_lua(body: bytes | None, headers: Mapping[str, str], method: str = "POST") -> Path:
    """A wrk Lua script sending ``method`` with ``body`` and ``headers``; its ``done`` hook
    prints exact percentiles (in microseconds) on one ``DEJA_STATS`` line."""
    lines = [f"wrk.method = {_lua_string(method)}"]
    if body is not None:
        lines.append(f"wrk.body = {_lua_string(body)}")
    for name, value in headers.items():
        lines.append(f"wrk.headers[{_lua_string(name)}] = {_lua_string(value)}")
    lines += WRK_DONE_LUA
    fd, name = tempfile.mkstemp(prefix="wrk-", suffix=".lua", dir=log_dir())
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return Path(name)


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_DIST_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)%\s+(\d+(?:\.\d+)?)(us|ms|s|m|h)\s*$", re.MULTILINE)


def parse_duration_ms(text: str) -> float:
    """``'3.91ms'`` → 3.91, ``'850.00us'`` → 0.85, ``'1.02s'`` → 1020."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)", text.strip())
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS_MS[match.group(2)]


def parse_wrk(output: str) -> dict[str, Any]:
    """Parse wrk's text output (``--latency`` distribution, Requests/sec, errors) and the
    ``DEJA_STATS`` line of our Lua ``done`` hook. The Lua figures win where both exist."""
    parsed: dict[str, Any] = {}
    dist = {
        f"p{m.group(1)}": float(m.group(2)) * _UNITS_MS[m.group(3)]
        for m in _DIST_RE.finditer(output)
    }
    parsed["latency_table"] = dist
    if m := re.search(r"Requests/sec:\s+([\d.]+)", output):
        parsed["rps"] = float(m.group(1))
    if m := re.search(r"(\d+) requests in ([\d.]+\w+)", output):
        parsed["requests"] = int(m.group(1))
        parsed["duration_s"] = parse_duration_ms(m.group(2)) / 1000.0
    parsed["non_2xx"] = (
        int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", output)) else 0
    )
    if m := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    ):
        parsed["socket_errors"] = sum(int(g) for g in m.groups())
    else:
        parsed["socket_errors"] = 0
    for key in ("p50", "p75", "p90", "p99"):
        if key in dist:
            parsed[f"{key}_ms"] = dist[key]
    if m := re.search(r"^DEJA_STATS (.*)$", output, re.MULTILINE):
        p50, p75, p90, p99, p999, lmax, mean, reqs, dur_us, status, sock, tmo = m.group(1).split()
        parsed.update(
            p50_ms=int(p50) / 1000,
            p75_ms=int(p75) / 1000,
            p90_ms=int(p90) / 1000,
            p99_ms=int(p99) / 1000,
            p999_ms=int(p999) / 1000,
            max_ms=int(lmax) / 1000,
            mean_ms=float(mean) / 1000,
            requests=int(reqs),
            duration_s=int(dur_us) / 1e6,
            non_2xx=int(status),
            socket_errors=int(sock) + int(tmo),
        )
        if parsed["duration_s"] > 0:
            parsed["rps"] = parsed["requests"] / parsed["duration_s"]
    return parsed


def run_wrk(
    label: str,
    url: str,
    *,
    lua: Path,
    connections: int,
    duration: float,
    threads: int = 1,
    cpu: int | None = LOADGEN_CPU,
    timeout_s: str = "5s",
    quiet: bool = False,
    watch: Mapping[str, int] | None = None,
) -> WrkResult:
    """Run wrk against ``url`` and parse it. Fails if wrk fails or every request errored.

    ``watch`` maps names to pids whose CPU time during the run is recorded in ``cpu_s``.
    """
    wrk = shutil.which("wrk")
    if wrk is None:
        raise BenchError("wrk is not installed (expected /usr/bin/wrk)")
    threads = max(1, min(threads, connections))
    secs = max(1, round(duration))
    cmd = pinned(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{secs}s",
            f"--timeout={timeout_s}",
            "--latency",
            "-s",
            str(lua),
            url,
        ],
        cpu,
    )
    COMMANDS.append(shlex.join(cmd))
    if not quiet:
        print(f"  $ {shlex.join(cmd)}", flush=True)
    watch = dict(watch or {})
    cpu_before = {name: cpu_seconds(pid) for name, pid in watch.items()}
    busy_before, children_before = machine_busy_seconds(), children_cpu_seconds()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 30, check=False)
    cpu_used = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in watch.items()}
    wrk_cpu = children_cpu_seconds() - children_before
    other = machine_busy_seconds() - busy_before - wrk_cpu - sum(cpu_used.values())
    if done.returncode != 0:
        raise BenchError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    parsed = parse_wrk(done.stdout)
    if "rps" not in parsed or "p50_ms" not in parsed:
        raise BenchError(f"could not parse wrk output:\n{done.stdout}\n{done.stderr}")
    result = WrkResult(
        label=label,
        url=url,
        connections=connections,
        threads=threads,
        duration_s=parsed.get("duration_s", float(secs)),
        requests=parsed.get("requests", 0),
        rps=parsed["rps"],
        p50_ms=parsed["p50_ms"],
        p75_ms=parsed.get("p75_ms", math.nan),
        p90_ms=parsed.get("p90_ms", math.nan),
        p99_ms=parsed.get("p99_ms", math.nan),
        p999_ms=parsed.get("p999_ms", math.nan),
        mean_ms=parsed.get("mean_ms", math.nan),
        max_ms=parsed.get("max_ms", math.nan),
        non_2xx=parsed.get("non_2xx", 0),
        socket_errors=parsed.get("socket_errors", 0),
        command=shlex.join(cmd),
        latency_table=parsed.get("latency_table", {}),
        cpu_s=cpu_used,
        other_cpu_s=max(0.0, other),
    )
    if result.requests and result.errors >= result.requests:
        raise BenchError(f"every request of '{label}' failed:\n{done.stdout}")
    if result.errors:
        print(f"  WARNING: {result.errors} of {result.requests} requests of '{label}' failed")
    return result


@dataclass
class Target:
    """One side of an interleaved comparison."""

    label: str
    url: str
    lua: Path
    watch: dict[str, int] = field(default_factory=dict)


def combine(label: str, runs: Sequence[WrkResult]) -> WrkResult:
    """Merge the rounds of one target: counts and CPU are summed, req/s is total requests over
    total time, percentiles are the request-weighted mean of the per-round percentiles (an
    approximation; the per-round figures are kept in the JSON)."""
    total = sum(r.requests for r in runs) or 1

    def weighted(attr: str) -> float:
        return float(sum(float(getattr(r, attr)) * r.requests for r in runs) / total)

    cpu: dict[str, float] = {}
    for run in runs:
        for name, secs in run.cpu_s.items():
            cpu[name] = cpu.get(name, 0.0) + secs
    duration = sum(r.duration_s for r in runs)
    return WrkResult(
        label=label,
        url=runs[0].url,
        connections=runs[0].connections,
        threads=runs[0].threads,
        duration_s=duration,
        requests=sum(r.requests for r in runs),
        rps=ratio(sum(r.requests for r in runs), duration),
        p50_ms=weighted("p50_ms"),
        p75_ms=weighted("p75_ms"),
        p90_ms=weighted("p90_ms"),
        p99_ms=weighted("p99_ms"),
        p999_ms=weighted("p999_ms"),
        mean_ms=weighted("mean_ms"),
        max_ms=max(r.max_ms for r in runs),
        non_2xx=sum(r.non_2xx for r in runs),
        socket_errors=sum(r.socket_errors for r in runs),
        command=runs[0].command,
        cpu_s=cpu,
        rounds=len(runs),
        other_cpu_s=sum(r.other_cpu_s for r in runs),
    )


def run_interleaved(
    targets: Sequence[Target],
    *,
    connections: int,
    duration: float,
    rounds: int,
    threads: int = 1,
) -> tuple[list[WrkResult], list[list[WrkResult]]]:
    """Measure ``targets`` side by side: ``rounds`` rounds of ``duration / rounds`` seconds
    each, the order reversed every other round (A B, B A, ...), so drift and noise from other
    processes hit every target alike. Returns the combined result and the rounds per target."""
    rounds = max(1, rounds)
    per_round = max(1.0, duration / rounds)
    runs: list[list[WrkResult]] = [[] for _ in targets]
    for index in range(rounds):
        order = list(range(len(targets)))
        if index % 2:
            order.reverse()
        for i in order:
            target = targets[i]
            runs[i].append(
                run_wrk(
                    target.label,
                    target.url,
                    lua=target.lua,
                    connections=connections,
                    duration=per_round,
                    threads=threads,
                    watch=target.watch,
                )
            )
    combined = [combine(t.label, r) for t, r in zip(targets, runs, strict=True)]
    return combined, runs


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return math.nan
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def machine_busy_seconds() -> float:
    """Non-idle CPU seconds of the whole machine so far (``/proc/stat``; NaN elsewhere)."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
    except OSError:
        return math.nan
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished (waited-for) children, e.g. wrk."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load_note(sample_s: float = 1.0) -> str:
    """How busy the machine is before the benchmark starts: CPU use over ``sample_s`` seconds
    (``/proc/stat``) and the load average, with a warning when other work is running."""
    before = machine_busy_seconds()
    time.sleep(sample_s)
    busy = 100 * (machine_busy_seconds() - before) / (sample_s * max(1, len(CPUS)))
    try:
        one, five, _ = os.getloadavg()
        load = f"load average {one:.2f} (1 min), {five:.2f} (5 min)"
    except OSError:
        load = "load average unknown"
    note = f"machine before start: {fmt(busy, 0)}% of {len(CPUS)} CPUs busy, {load}"
    if busy > 10 or math.isnan(busy):
        note += (
            "\n  WARNING: other processes are using the CPUs; throughput and latency will be "
            "noisy (the interleaved rounds and the CPU-per-request figures are more robust)"
        )
    return note


# --------------------------------------------------------------------------------------------
# output


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3) -> str:
    """A plain-text table, numbers right-aligned."""
    cells = [[fmt(c, digits) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]

    def line(items: Sequence[str], raw: Sequence[Any] | None = None) -> str:
        out = []
        for i, item in enumerate(items):
            numeric = raw is not None and isinstance(raw[i], int | float)
            out.append(item.rjust(widths[i]) if numeric else item.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    body = [line(c, r) for c, r in zip(cells, rows, strict=True)]
    return "\n".join([line(list(headers)), sep, *body])


def banner(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 76 - len(title)), flush=True)


def verdict(ok: bool) -> str:
    return "OK" if ok else "BELOW TARGET"


def run_json_command(cmd: Sequence[str], *, cpu: int | None, timeout: float) -> Any:
    """Run ``cmd`` (pinned to ``cpu``) to completion and parse its stdout as JSON."""
    full = pinned(cmd, cpu)
    line = shlex.join(full)
    COMMANDS.append(line)
    print(f"  $ {line}", flush=True)
    try:
        done = subprocess.run(
            full, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO_ROOT
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"timed out after {timeout:.0f}s: {line}") from exc
    if done.returncode != 0:
        raise BenchError(f"failed ({done.returncode}): {line}\n{done.stderr}{done.stdout}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise BenchError(f"no JSON from {line}:\n{done.stdout[:500]}\n{done.stderr}") from exc


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100) of ``values``."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def run_meta(args: argparse.Namespace, replica: str) -> dict[str, Any]:
    """The ``meta`` record every benchmark JSON starts with (machine, load, pinning, args)."""
    return {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "pinning": pinning_note(),
        "load_at_start": load_note(),
        "pinned": PINNING,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "replica": replica,
    }


def write_record(path: Path, meta: dict[str, Any], record: dict[str, Any]) -> None:
    """A benchmark's JSON record, ``meta`` (``run_meta``: machine, load at start, args) first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, **record}, indent=2, default=str))
    print(f"\nwritten: {path}")


def run_in_workdir(
    args: argparse.Namespace,
    prefix: str,
    run: Callable[[argparse.Namespace, Path], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
) -> int:
    """A gateway benchmark's whole run: the meta record (load printed first), ``run`` in a
    temporary folder removed after, ``report`` of its record, the JSON record written."""
    meta = run_meta(args, "SIMULATED (deja sim --speed 0)")
    print(meta["load_at_start"])
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        record = run(args, Path(workdir))
    report(record)
    write_record(args.output, meta, record)
    return 0


def run_guarded(body: Callable[[], None]) -> int | None:
    """Run a benchmark body, always stopping its processes; an exit code when it failed."""
    try:
        body()
    except BenchError as exc:
        print(f"\nBENCHMARK FAILED: {exc}", file=sys.stderr)
        print(f"server logs kept in {log_dir()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; stopping the benchmark processes", file=sys.stderr)
        return 130
    finally:
        stop_all()
    return None
