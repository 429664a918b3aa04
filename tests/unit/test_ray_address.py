"""--ray_address is checked before anything is written: a HOST:PORT where nothing answers
is one line, not minutes of Ray's own retries."""

import socket

import pytest

from rl_pbt.distributed.driver import ray_address_problem


def test_local_and_client_addresses_are_left_to_ray():
    assert ray_address_problem("local") is None
    assert ray_address_problem("ray://head:10001") is None


@pytest.fixture
def no_cluster_here(monkeypatch):
    """Ray's lookup for "auto" finds nothing: no RAY_ADDRESS, no cluster started here."""
    services = pytest.importorskip("ray._private.services")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: [])
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)


def test_auto_with_no_cluster_says_so_before_anything_starts(no_cluster_here):
    problem = ray_address_problem("auto")
    assert problem and "no Ray cluster runs on this machine" in problem
    assert "--ray_address=local" in problem


def test_auto_follows_ray_address_and_checks_it(no_cluster_here, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{s.getsockname()[1]}")
        assert ray_address_problem("auto") is None
    # the same port, closed now: the address RAY_ADDRESS names is checked like a given one
    problem = ray_address_problem("auto")
    assert problem and "nothing answers there" in problem


def test_an_address_that_is_no_host_and_port():
    assert "HOST:PORT" in ray_address_problem("head-node")
    assert "HOST:PORT" in ray_address_problem("head:port")


def test_nothing_answering_at_the_address():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    problem = ray_address_problem(f"127.0.0.1:{port}")
    assert problem and "nothing answers there" in problem and "ray start --head" in problem


def test_a_listening_address_passes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert ray_address_problem(f"127.0.0.1:{s.getsockname()[1]}") is None
