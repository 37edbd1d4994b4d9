"""Shared fixtures: small in-process clusters and unique cluster names."""

import os
import uuid

import pytest

import nessie

# Small tables: a test cluster starts in milliseconds.
SMALL = {"index_slots_per_node": 4096, "data_bytes_per_node": 32 << 20}


@pytest.fixture
def cluster():
    with nessie.Cluster.local(SMALL) as c:
        yield c


@pytest.fixture
def unique_name():
    """A cluster name no other test or run uses (shm region files)."""
    return f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
