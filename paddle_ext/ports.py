"""Free TCP ports for the servers we start on 127.0.0.1 (the embedded hub's services, local
jobs' rendezvous, the test clusters' components).

Binding port 0 gives a port from the kernel's range for outgoing connections
(/proc/sys/net/ipv4/ip_local_port_range). Any connection opened afterwards may take that
same number as its source port, and a server started on it later then finds it in use
(CI saw the quota service fail so for minutes, behind a keep-alive connection). So the
port is chosen below that range, where only listeners go, and checked free by binding it.
"""

from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_LISTEN_PORT = 10000  # below: well-known and registered services (8000, 8888, ...)
# Kubernetes' default NodePort range: on a machine that is also a node, kube-proxy sends
# connections to 127.0.0.1 on these ports to a Service, whether or not something listens there.
NODE_PORTS = (30000, 32767)
ROOM = 1000  # the fewest ports worth choosing from
TRIES = 200
# Its own source of randomness: test runs seed the `random` module (pytest-randomly, the same
# seed in every process of a run), and processes drawing the same ports at once would collide.
_CHOOSER = random.SystemRandom()


def listen_range(ephemeral: tuple[int, int]) -> tuple[int, int] | None:
    """The ports to choose from, given the kernel's outgoing range (pure): below it if there
    is room, else above it, never among the NodePorts; None when there is no room."""
    low, high = ephemeral
    below = (LOWEST_LISTEN_PORT, min(low - 1, NODE_PORTS[0] - 1))
    above = (max(high + 1, NODE_PORTS[1] + 1), 65535)
    for first, last in (below, above):
        if last - first >= ROOM:
            return first, last
    return None


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open(EPHEMERAL_RANGE_FILE, encoding="ascii") as f:
            low, high = f.read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def listen_ports() -> tuple[int, int] | None:
    """This machine's range for listeners (listen_range of its outgoing range), or None."""
    return listen_range(_ephemeral_range())


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free now and that no outgoing connection will take."""
    with _bound(host) as s:
        return s.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different free_port()s, for one server's several ports: each is held bound while
    the next is drawn (drawn apart, two could be the same number, and a hub's proxy once got
    its API port equal to its public port)."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            held.append(_bound(host))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _bound(host: str) -> socket.socket:
    """A socket bound to a free port of listen_ports() on `host` (the kernel's choice when there
    is no room there)."""
    choices = listen_ports()
    for _ in range(TRIES if choices else 0):
        port = _CHOOSER.randint(*choices)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((host, port))
        except OSError:
            s.close()
            continue
        return s
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, 0))
    return s
