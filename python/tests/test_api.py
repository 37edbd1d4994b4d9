"""The API: clusters and nodes from dicts, files and keywords; GET, PUT,
DELETE; statistics; context managers and stopping."""

import pytest

import nessie

from conftest import SMALL


def test_put_get_delete_round_trip(cluster):
    a, b = cluster.client(0), cluster.client(2)
    assert a.get(b"k") is None
    a.put(b"k", b"v1")
    assert b.get(b"k") == b"v1"
    b.put(b"k", b"v2")
    assert a.get(b"k") == b"v2"
    assert a.delete(b"k") is True
    assert b.get(b"k") is None
    assert b.delete(b"k") is False
    a.put(b"empty", b"")
    assert a.get(b"empty") == b""


def test_str_keys_are_their_utf8_bytes(cluster):
    c = cluster.client(1)
    c.put("clé", b"x")
    assert c.get("clé".encode()) == b"x"
    with pytest.raises(TypeError):
        c.get(42)


def test_values_may_be_any_buffer(cluster):
    c = cluster.client(0)
    c.put(b"ba", bytearray(b"from a bytearray"))
    c.put(b"mv", memoryview(b"0123456789")[2:5])
    assert c.get(b"ba") == b"from a bytearray"
    assert c.get(b"mv") == b"234"


def test_stats_count_operations_by_kind(cluster):
    c = cluster.client(0)
    for i in range(10):
        c.put(f"k{i}", b"v")
    for i in range(5):
        c.get(f"k{i}")
    c.delete(b"k0")
    s = c.stats()
    assert (s["put"]["ops"], s["get"]["ops"], s["delete"]["ops"]) == (10, 5, 1)
    assert s["put"]["errors"] == 0
    assert s["put"]["verbs"]["cas"] >= 10
    assert "cas_failed" in s["put"]["retries"]


def test_config_from_a_dict_a_file_and_keywords(tmp_path):
    defaults = nessie.default_config()
    assert defaults["nodes"] == 3 and defaults["fabric"] == {"kind": "local"}
    with nessie.Cluster.local({**SMALL, "nodes": 2}) as c:
        assert c.nodes == 2
        assert c.config["index_slots_per_node"] == 4096
    path = tmp_path / "nessie.toml"
    path.write_text("nodes = 4\nindex_slots_per_node = 2048\ndata_bytes_per_node = 33554432\n")
    with nessie.Cluster.local(path) as c:
        assert c.nodes == 4
    with nessie.Cluster.local(str(path), nodes=5, expiry=2000) as c:
        assert c.nodes == 5 and c.config["expiry"] == 2000
    with nessie.Cluster.local(**SMALL) as c:
        assert c.client(2).node == 2


def test_context_managers_stop_and_later_calls_raise(cluster):
    c = cluster.client(0)
    c.put(b"k", b"v")
    with nessie.Cluster.local(SMALL) as other:
        o = other.client(1)
        o.put(b"k", b"v")
    assert other.stopped
    with pytest.raises(nessie.StoppedError):
        o.get(b"k")
    with pytest.raises(nessie.StoppedError):
        other.client(0)
    other.stop()  # idempotent
    assert "stopped" in repr(other)
    # The fixture's cluster is untouched.
    assert c.get(b"k") == b"v"


def test_an_exception_in_a_with_block_still_stops_and_propagates():
    with pytest.raises(KeyError):
        with nessie.Cluster.local(SMALL) as c:
            raise KeyError("boom")
    assert c.stopped


def test_client_node_out_of_range_is_a_config_error(cluster):
    with pytest.raises(nessie.ConfigError, match="out of range"):
        cluster.client(3)
