"""Ports for local clusters' daemons: outside the kernel's ephemeral range, never handed to
two clusters that are up at once (testcluster/ports.py)."""

from __future__ import annotations

import random
import socket

from slurm_marl.testcluster import ports as P


def test_the_pool_lies_below_the_ephemeral_range_or_above_it():
    assert P.pool((32768, 60999)) == range(32768 - P.POOL_SIZE, 32768)
    assert P.pool((2000, 50000)) == range(50001, 50001 + P.POOL_SIZE)
    assert len(P.pool((1024, 65000))) == 0


def test_the_ephemeral_range_is_read_from_proc_or_defaults(tmp_path):
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert P.ephemeral_range(str(f)) == (40000, 50000)
    assert P.ephemeral_range(str(tmp_path / "missing")) == P.DEFAULT_EPHEMERAL
    f.write_text("garbage")
    assert P.ephemeral_range(str(f)) == P.DEFAULT_EPHEMERAL


def test_reserved_ports_are_outside_the_ephemeral_range_and_free(tmp_path):
    owner = tmp_path / "cluster"
    owner.mkdir()
    got = P.reserve(6, owner, folder=tmp_path / "reg")
    lo, hi = P.ephemeral_range()
    assert len(set(got)) == 6
    assert all(p in P.pool((lo, hi)) and not lo <= p <= hi for p in got)
    assert all(P.bindable(p) for p in got)


def test_a_port_held_by_a_live_cluster_is_never_handed_to_another(tmp_path):
    reg = tmp_path / "reg"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    # the same random order for both: without the registry b would get a's ports
    first = P.reserve(5, a, folder=reg, rng=random.Random(3))
    second = P.reserve(5, b, folder=reg, rng=random.Random(3))
    assert not set(first) & set(second)
    # released (the cluster went down): its ports may be chosen again
    P.release(a, folder=reg)
    c = tmp_path / "c"
    c.mkdir()
    assert P.reserve(5, c, folder=reg, rng=random.Random(3)) == first


def test_a_cluster_whose_folder_is_gone_holds_nothing(tmp_path):
    reg = tmp_path / "reg"
    gone = tmp_path / "gone"
    gone.mkdir()
    first = P.reserve(3, gone, folder=reg, rng=random.Random(1))
    gone.rmdir()                 # its process died without down(); the folder was removed
    c = tmp_path / "c"
    c.mkdir()
    assert P.reserve(3, c, folder=reg, rng=random.Random(1)) == first
    assert sorted(int(e.name) for e in reg.iterdir() if e.name.isdigit()) == sorted(first)


def test_a_port_something_listens_on_is_skipped(tmp_path):
    lo, hi = P.ephemeral_range()
    pool = P.pool((lo, hi))
    order = list(pool)
    random.Random(5).shuffle(order)
    busy = next(p for p in order if P.bindable(p))
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", busy))
        s.listen()
        assert not P.bindable(busy)
        owner = tmp_path / "x"
        owner.mkdir()
        got = P.reserve(2, owner, folder=tmp_path / "reg", rng=random.Random(5))
        assert busy not in got
    finally:
        s.close()


def test_kernel_ports_are_distinct():
    got = P.kernel_ports(8)
    assert len(set(got)) == 8
