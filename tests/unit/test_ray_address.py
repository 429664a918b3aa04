"""--ray_address is checked before anything is written: a HOST:PORT where nothing answers
is one line, not minutes of Ray's own retries."""

import socket

from rl_pbt.distributed.driver import ray_address_problem


def test_auto_and_local_are_left_to_ray():
    assert ray_address_problem("auto") is None
    assert ray_address_problem("local") is None
    assert ray_address_problem("ray://head:10001") is None


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
