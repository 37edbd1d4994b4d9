"""Python threads run store calls in parallel: every call releases the
interpreter lock, and one Client serves many threads (a store client per
call in flight)."""

import threading
import time

import nessie

from conftest import SMALL


def run_threads(n, target):
    errors = []

    def guarded(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_threads_sharing_one_client_see_each_others_writes(cluster):
    shared = cluster.client(1)

    def work(t):
        for i in range(300):
            shared.put(f"t{t}/{i}", f"{t}:{i}".encode())
        for other in range(8):
            for i in range(0, 300, 37):
                v = shared.get(f"t{other}/{i}")
                assert v is None or v == f"{other}:{i}".encode()

    run_threads(8, work)
    reader = cluster.client(2)
    for t in range(8):
        for i in range(300):
            assert reader.get(f"t{t}/{i}") == f"{t}:{i}".encode()
    s = shared.stats()
    assert s["put"]["ops"] == 8 * 300


def test_threads_with_their_own_clients_and_buffers(cluster):
    value = bytes(16 << 10)
    cluster.client(0).put(b"hot", value)

    def work(t):
        c = cluster.client(t % 3)
        buf = bytearray(len(value))
        for _ in range(500):
            assert c.get_into(b"hot", buf) == len(value)

    run_threads(4, work)


def test_a_blocking_call_lets_other_threads_run(unique_name, tmp_path):
    # Node.start waits for a peer that never comes, for attach_timeout;
    # meanwhile this thread's pure-Python loop must keep running.
    ticks = 0
    done = threading.Event()

    def starter():
        try:
            nessie.Node.start(
                {**SMALL, "cluster": unique_name, "attach_timeout": 600},
                0,
                fabric={"kind": "shm", "dir": str(tmp_path)},
            )
        except nessie.FabricError:
            pass
        finally:
            done.set()

    t = threading.Thread(target=starter)
    started = time.monotonic()
    t.start()
    while not done.is_set():
        ticks += 1
    t.join()
    assert time.monotonic() - started >= 0.5
    # With the lock held for the wait, the loop would have run only in the
    # thread switch slices before and after it (a few thousand rounds).
    assert ticks > 100_000, ticks


def test_stopping_while_other_threads_work():
    with nessie.Cluster.local(SMALL) as c:
        client = c.client(0)
        stop = threading.Event()
        outcomes = []

        def work(t):
            n = 0
            while not stop.is_set():
                try:
                    client.get(f"{t}/{n % 50}")
                    n += 1
                except nessie.StoppedError:
                    outcomes.append("stopped")
                    return
            outcomes.append("finished")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        c.stop()
        stop.set()
        for t in threads:
            t.join()
        assert len(outcomes) == 3
