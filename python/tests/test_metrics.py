"""The Prometheus endpoint seen from Python: on when configured, off by
default."""

import urllib.request

import nessie

from conftest import SMALL


def scrape(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def test_each_node_serves_its_counters():
    with nessie.Cluster.local(SMALL, metrics={"base_port": 0}) as c:
        client = c.client(1)
        for i in range(5):
            client.put(f"k{i}", b"v" * 100)
        addresses = [c.metrics_address(n) for n in range(3)]
        assert all(a.startswith("127.0.0.1:") for a in addresses)
        body = scrape(addresses[1])
        assert 'nessie_operations_total{node="1",op="put",outcome="ok"} 5' in body
        assert "nessie_operation_duration_seconds_bucket" in body


def test_off_by_default(cluster):
    assert cluster.metrics_address(0) is None
