"""Ports for our servers come from outside the kernel's range for outgoing connections, so
no connection opened in the meantime can hold the port a server starts on later."""

import random
import socket

from paddle_ext import ports
from paddle_ext.ports import _ephemeral_range, free_port, free_ports, listen_range


def test_the_listen_range_is_below_the_outgoing_range_else_above_else_none():
    assert listen_range((32768, 60999)) == (10000, 29999)  # Linux's default, below the NodePorts
    assert listen_range((10500, 60999)) == (61000, 65535)
    assert listen_range((1024, 65535)) is None


def test_the_listen_range_never_holds_kubernetes_node_ports():
    assert listen_range((40000, 60999)) == (10000, 29999)
    assert listen_range((1024, 20000)) == (32768, 65535)
    assert listen_range((10500, 31000)) == (32768, 65535)


def test_a_free_port_is_outside_the_outgoing_range_and_can_be_listened_on():
    low, high = _ephemeral_range()
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1  # chosen at random, not one fixed port
    for port in ports:
        assert not low <= port <= high
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
            server.listen()


def test_the_ports_of_one_server_are_all_different_even_when_the_draw_repeats(monkeypatch):
    """free_ports holds each port bound while it draws the next: a number drawn twice is drawn
    again, so a server never gets one port for two of its listeners."""
    first = free_port()
    repeats = iter([first] * 3)  # then the real draws
    real_randint = ports._CHOOSER.randint
    monkeypatch.setattr(ports._CHOOSER, "randint", lambda low, high: next(repeats, None) or real_randint(low, high))
    got = free_ports(2)
    assert got[0] == first and got[1] != first
    monkeypatch.undo()
    for port in free_ports(5):  # and each of them can then be listened on
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
            server.listen()


def test_free_ports_do_not_follow_the_random_modules_seed():
    """Every process of a test run seeds `random` alike (pytest-randomly): ports drawn from it
    would be the same in the cluster tier's two parts, which start their clusters at once."""
    drawn = []
    for _ in range(2):
        random.seed(50937)
        drawn.append([free_port() for _ in range(5)])
    assert drawn[0] != drawn[1]


def test_local_workers_keep_paddles_launcher_off_the_outgoing_connections_ports():
    """Paddle's launcher picks its own ports in 35100-64000 unless told (PORT_RANGE): inside
    Linux's outgoing range, where a port it checked free can be taken before it binds."""
    from paddle_ext.backends.local import worker_environment
    from paddle_ext.constants import LAUNCHER_PORT_RANGE_ENV

    env = worker_environment({"PATH": "/bin", "JUPYTERHUB_API_TOKEN": "secret"}, listen_range((32768, 60999)))
    assert env == {"PATH": "/bin", LAUNCHER_PORT_RANGE_ENV: "10000:29999"}  # below both, no credentials
    assert LAUNCHER_PORT_RANGE_ENV not in worker_environment({"PATH": "/bin"}, None)


def test_the_local_hubs_internal_ports_are_drawn_together_and_apart_from_the_given_ones(monkeypatch):
    """The embedded hub's config: a port the environment gives (not listened on yet) and the
    public port are never drawn again for another of its servers, and the drawn ones differ."""
    from paddle_ext.hub import local

    names = ["HUB_API", "PROXY_API", "QUOTA"]
    monkeypatch.setenv("HUB_API", "12001")
    monkeypatch.delenv("PROXY_API", raising=False)
    monkeypatch.delenv("QUOTA", raising=False)
    # the draw comes out with the given port and the public one first, as a random one can
    monkeypatch.setattr(local, "free_ports", lambda count: [12001, 8000, 12003, 12004][:count])
    assert local.ports_from_env(names, taken=[8000]) == {"HUB_API": 12001, "PROXY_API": 12003, "QUOTA": 12004}
    monkeypatch.undo()
    monkeypatch.setenv("HUB_API", "12001")
    drawn = local.ports_from_env(names)
    assert drawn["HUB_API"] == 12001 and len(set(drawn.values())) == 3
