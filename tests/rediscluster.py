"""A real local Redis Cluster for the suite and the benches: three masters and three replicas,
Debian's ``redis-server`` with ``cluster-enabled yes``, joined by ``redis-cli --cluster
create ... --cluster-replicas 1``, on free loopback ports. A test can kill a master (SIGKILL,
as a crash would) and wait for its replica's promotion.

Only the standard library and the sync ``redis`` client, so ``bench/`` can use it too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

#: How long a node may be silent before the others mark it failed: short, so a test's
#: failover takes about two seconds (Redis's default is 15 s).
NODE_TIMEOUT_MS = 1000


def _port_pair() -> int:
    """A free port whose cluster bus port (``port + 10000``) is free too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


@dataclass
class Node:
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)


class LocalRedisCluster:
    """``masters`` masters with one replica each, started by ``start`` and removed by ``stop``."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [Node(_port_pair()) for _ in range(masters * 2)]
        self.dir = Path(tempfile.mkdtemp(prefix="deja-redis-cluster-"))

    @property
    def url(self) -> str:
        """The gateway's ``DEJA_REDIS_URL``: any one node, with the cluster scheme."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def addresses(self) -> list[str]:
        return [n.address for n in self.nodes]

    def _launch(self, node: Node) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; `make test` installs it")
        # The config file keeps the node's identity, so a restarted node rejoins as itself.
        args = {
            "port": node.port,
            "bind": "127.0.0.1",
            "protected-mode": "no",
            "cluster-enabled": "yes",
            "cluster-config-file": f"nodes-{node.port}.conf",
            "cluster-node-timeout": NODE_TIMEOUT_MS,
            # A replica may take over however long it was cut off from its master.
            "cluster-replica-validity-factor": 0,
            # The other masters' slots keep serving while one slot range fails over.
            "cluster-require-full-coverage": "no",
            "save": "",
            "appendonly": "no",
            "dir": str(self.dir),
        }
        cmd = [binary]
        for key, value in args.items():
            cmd += [f"--{key}", str(value)]
        node.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and node.proc.poll() is None:
            with contextlib.suppress(redis.RedisError, OSError):
                if node.client().ping():
                    return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {node.port} did not start")

    def _first_launch(self, node: Node) -> None:
        """Start a new node. A free port can be taken before redis-server binds it (another
        process, or a client connection's own port): the node then exits, and starts again on
        another free port (a restarted node keeps its port: it is the node's identity)."""
        for _ in range(4):
            try:
                self._launch(node)
                return
            except RuntimeError:
                if node.proc is None or node.proc.poll() is None:
                    raise
                node.port = _port_pair()
        self._launch(node)

    def start(self) -> None:
        """Start the nodes and join them; on any failure stop what was started."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        for node in self.nodes:
            self._first_launch(node)
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed; `make test` installs redis-server")
        create = [cli, "--cluster", "create", *self.addresses()]
        subprocess.run(
            [*create, "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        self.wait_healthy()

    def wait_healthy(self, within: float = 30.0) -> None:
        """Every live node says ``cluster_state:ok`` and every slot has a reachable master
        that knows it is one; replicas are in sync."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._healthy():
                return
            time.sleep(0.05)
        raise RuntimeError("the local redis cluster did not become healthy")

    def _healthy(self) -> bool:
        try:
            for node in self.live_nodes():
                info = node.client().cluster("INFO")
                if not isinstance(info, dict) or info.get("cluster_state") != "ok":
                    return False
            masters = self.masters()
            if len(masters) != len(self.nodes) // 2:
                return False
            return all(n in masters or self._in_sync(n) for n in self.live_nodes())
        except (redis.RedisError, OSError):
            return False

    def _in_sync(self, replica: Node) -> bool:
        info = replica.client().info("replication")
        return info.get("master_link_status") == "up"

    def replica_of(self, node: Node) -> Node | None:
        """The master ``node`` replicates, or None for a master."""
        info = node.client().info("replication")
        if info.get("role") != "slave":
            return None
        return next((n for n in self.nodes if n.port == int(info["master_port"])), None)

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def role(self, node: Node) -> str:
        reply = node.client().execute_command("ROLE")
        kind = reply[0]
        return kind.decode() if isinstance(kind, bytes) else str(kind)

    def masters(self) -> list[Node]:
        """The live nodes that are masters in their own view and serve slots."""
        return [n for n in self.live_nodes() if self.role(n) == "master" and self._slots(n)]

    def _slots(self, node: Node) -> list[tuple[int, int]]:
        """The slot ranges ``node`` serves, from its own ``CLUSTER NODES`` line."""
        raw = node.client().execute_command("CLUSTER", "NODES")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        for line in text.splitlines():
            fields = line.split()
            if len(fields) > 2 and "myself" in fields[2]:
                ranges = [f.partition("-") for f in fields[8:] if not f.startswith("[")]
                return [(int(a), int(b or a)) for a, _, b in ranges]
        return []

    def master_of(self, key: str) -> Node:
        """The node that now serves ``key``'s slot as master."""
        slot = int(self.live_nodes()[0].client().execute_command("CLUSTER", "KEYSLOT", key))
        for node in self.masters():
            if any(start <= slot <= end for start, end in self._slots(node)):
                return node
        raise RuntimeError(f"no master serves slot {slot}")

    def kill(self, node: Node) -> None:
        """SIGKILL, as a crash would: no goodbye to clients or to the cluster."""
        assert node.proc is not None
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=10)
        node.proc = None

    def restart(self, node: Node) -> None:
        """Start a killed node again: it rejoins (as a replica of whoever took over)."""
        self._launch(node)

    def wait_promoted(self, killed: Node, within: float = 30.0) -> float:
        """Wait until another node serves every slot of the killed master; returns when."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._healthy() and killed not in self.masters():
                return time.monotonic()
            time.sleep(0.02)
        raise RuntimeError("no replica took over from the killed master")

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None:
                node.proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=10)
                if node.proc.poll() is None:
                    node.proc.kill()
                node.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_cluster_url_from_env() -> str | None:
    return os.environ.get("DEJA_TEST_REDIS_CLUSTER_URL")
