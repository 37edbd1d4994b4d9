"""Every store error is a NessieError subclass with the Rust message."""

import os

import pytest

import nessie

from conftest import SMALL

SUBCLASSES = [
    nessie.EmptyKeyError,
    nessie.KeyTooLargeError,
    nessie.ValueTooLargeError,
    nessie.BufferTooSmallError,
    nessie.IndexFullError,
    nessie.DataTableFullError,
    nessie.OperationTimeoutError,
    nessie.ClockSkewError,
    nessie.ConfigError,
    nessie.OutOfMemoryError,
    nessie.FabricError,
    nessie.CorruptError,
    nessie.StoreIoError,
    nessie.StoppedError,
    nessie.ViewChangingError,
    nessie.NoQuorumError,
    nessie.RejoinRefusedError,
    nessie.DataLostError,
]


@pytest.mark.parametrize("cls", SUBCLASSES, ids=lambda c: c.__name__)
def test_every_error_class_derives_from_nessie_error(cls):
    assert issubclass(cls, nessie.NessieError)
    assert issubclass(nessie.NessieError, Exception)


def test_key_and_value_limits(cluster):
    c = cluster.client(0)
    with pytest.raises(nessie.EmptyKeyError, match="key is empty"):
        c.put(b"", b"v")
    with pytest.raises(nessie.KeyTooLargeError, match="key_size_max"):
        c.get(b"k" * 129)
    with pytest.raises(nessie.ValueTooLargeError, match="value_size_max"):
        c.put(b"k", bytes((128 << 10) + 1))


def test_bad_configurations_name_the_field():
    with pytest.raises(nessie.ConfigError, match="nodes must be greater than 0"):
        nessie.Cluster.local(SMALL, nodes=0)
    with pytest.raises(nessie.ConfigError, match="unknown field"):
        nessie.Cluster.local({"no_such_key": 1})
    with pytest.raises(nessie.ConfigError, match="unknown fabric"):
        nessie.Node.from_launcher(fabric="carrier-pigeon")
    with pytest.raises(nessie.ConfigError):
        nessie.Cluster.local(42)
    with pytest.raises(nessie.ConfigError, match="shm, tcp or verbs"):
        nessie.Node.start(SMALL, 0)


def test_no_launcher_is_a_config_error(monkeypatch):
    for var in list(os.environ):
        if var.startswith(("SLURM_", "OMPI_", "PMI_", "NESSIE_")) or var in (
            "RANK",
            "WORLD_SIZE",
        ):
            monkeypatch.delenv(var)
    with pytest.raises(nessie.ConfigError, match="no launcher found"):
        nessie.Node.from_launcher(fabric="shm")


def test_a_missing_peer_is_a_fabric_error(unique_name, tmp_path):
    with pytest.raises(nessie.FabricError):
        nessie.Node.start(
            {**SMALL, "cluster": unique_name, "attach_timeout": 200},
            1,
            fabric={"kind": "shm", "dir": str(tmp_path)},
        )


def test_a_full_data_table(unique_name):
    # One small class per value size, writes faster than the reuse window.
    config = {
        "index_slots_per_node": 4096,
        "data_bytes_per_node": 1 << 20,
        "value_size_max": 4096,
        "tombstone_reserve": 8,
        "op_timeout": 50,
    }
    with nessie.Cluster.local(config) as c:
        client = c.client(0)
        with pytest.raises(nessie.DataTableFullError, match="data table full") as info:
            for i in range(10_000):
                client.put(f"k{i}", bytes(4000))
        assert str(info.value).startswith("data table full")


def test_the_message_is_the_rust_message(cluster):
    c = cluster.client(0)
    c.put(b"k", bytes(300))
    with pytest.raises(nessie.BufferTooSmallError) as info:
        c.get_into(b"k", bytearray(10))
    assert str(info.value) == "buffer too small: the value has 300 bytes, the buffer 10"
