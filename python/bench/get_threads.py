"""GET throughput of Python threads, and the bindings' cost per GET.

N threads each GET 16 KiB values into their own preallocated buffer
(``get_into``) on a cluster of three processes on the shm fabric: this
process is node 0; two helper processes hold nodes 1 and 2 and wrote the
values, so every GET reads another process's memory. Reports, as medians of
several runs:

* throughput with 1 thread and with 2 (and their ratio);
* microseconds per GET of a Python loop of ``get_into`` against a Rust loop
  of ``Client::get_into_slice`` on the same client (``_rust_get_loop``).

    python python/bench/get_threads.py --runs 7
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid

import nessie

# Keys per helper; the clients' DTE cache holds fewer, and a client GETs
# them in turn, so GETs read the owner's memory rather than the cache.
KEYS = 1024


def config(name):
    return {
        "cluster": name,
        "index_slots_per_node": 1 << 14,
        "data_bytes_per_node": 256 << 20,
        "value_size_max": 16 << 10,
        "cache_entries": 256,
    }


def wait_key(client, key, timeout=60.0):
    deadline = time.monotonic() + timeout
    while client.get(key) is None:
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {key}")
        time.sleep(0.005)


def helper(rank, name, value_bytes):
    with nessie.Node.from_launcher(config(name), fabric="shm") as node:
        c = node.client()
        for i in range(KEYS):
            c.put(f"bench/{rank}/{i}", bytes([rank]) * value_bytes)
        c.put(f"ready/{rank}", b"1")
        wait_key(c, "stop", timeout=3600)
        time.sleep(0.5)


def all_keys():
    return [f"bench/{1 + i % 2}/{i // 2}".encode() for i in range(2 * KEYS)]


def run_threads(node, threads, ops, value_bytes, rust=False, batch=0):
    """Seconds for `threads` threads to do `ops` GETs each: a Python loop of
    get_into; with `batch`, of get_many_into calls of `batch` keys each
    (one release of the interpreter per call); with `rust`, the same GETs in
    a Rust loop."""
    clients = [node.client() for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def work(t):
        c, buf = clients[t], bytearray(value_bytes * max(batch, 1))
        keys = all_keys()
        start.wait()
        if rust:
            c._rust_get_loop(keys, buf, ops)
            return
        if batch:
            for i in range(0, ops, batch):
                j = i % len(keys)
                c.get_many_into(keys[j : j + batch], buf, value_bytes)
            return
        for i in range(ops):
            c.get_into(keys[i % len(keys)], buf)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - began


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=50_000, help="GETs per thread per run")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--value-bytes", type=int, default=16 << 10)
    p.add_argument("--batch", type=int, default=16,
                   help="keys per get_many_into call in the batched rows (0: skip them)")
    p.add_argument("--helper", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--name", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.helper is not None:
        return helper(args.helper, args.name, args.value_bytes)

    name = f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    helpers = [
        subprocess.Popen(
            [sys.executable, __file__, "--helper", str(r), "--name", name,
             "--value-bytes", str(args.value_bytes)],
            env={**env, "NESSIE_NODE_ID": str(r), "NESSIE_NODES": "3"},
        )
        for r in (1, 2)
    ]
    os.environ.update({"NESSIE_NODE_ID": "0", "NESSIE_NODES": "3"})
    try:
        with nessie.Node.from_launcher(config(name), fabric="shm") as node:
            c = node.client()
            for r in (1, 2):
                wait_key(c, f"ready/{r}")
            rate = {1: [], 2: []}
            batched = {1: [], 2: []}
            rust_rate = {1: [], 2: []}
            py_us, rust_us = [], []
            buf = bytearray(args.value_bytes)
            keys = all_keys()
            for _ in range(args.runs):
                for n in (1, 2):
                    secs = run_threads(node, n, args.ops, args.value_bytes)
                    rate[n].append(n * args.ops / secs)
                    if args.batch:
                        secs = run_threads(node, n, args.ops, args.value_bytes, batch=args.batch)
                        batched[n].append(n * args.ops / secs)
                    secs = run_threads(node, n, args.ops, args.value_bytes, rust=True)
                    rust_rate[n].append(n * args.ops / secs)
                began = time.perf_counter()
                for i in range(args.ops):
                    c.get_into(keys[i % len(keys)], buf)
                py_us.append((time.perf_counter() - began) / args.ops * 1e6)
                rust_us.append(c._rust_get_loop(keys, buf, args.ops) / args.ops * 1e6)
            one, two = statistics.median(rate[1]), statistics.median(rate[2])
            py, rust = statistics.median(py_us), statistics.median(rust_us)
            print(f"value {args.value_bytes} B, {args.ops} GETs per thread, {args.runs} runs (medians)")
            print(f"1 thread : {one / 1e3:8.1f} k GET/s")
            print(f"2 threads: {two / 1e3:8.1f} k GET/s   ratio {two / one:.2f}x")
            if args.batch:
                b1, b2 = statistics.median(batched[1]), statistics.median(batched[2])
                print(f"get_many_into, {args.batch} keys a call: {b1 / 1e3:.1f} k and "
                      f"{b2 / 1e3:.1f} k GET/s, ratio {b2 / b1:.2f}x")
            r1, r2 = statistics.median(rust_rate[1]), statistics.median(rust_rate[2])
            print(f"Rust loops in the same threads: {r1 / 1e3:.1f} k and {r2 / 1e3:.1f} k GET/s, "
                  f"ratio {r2 / r1:.2f}x (what this machine allows)")
            print(f"per GET  : Python loop {py:.2f} us, Rust loop {rust:.2f} us, "
                  f"bindings overhead {py - rust:.2f} us ({(py / rust - 1) * 100:.0f} %)")
            c.put(b"stop", b"1")
            time.sleep(0.2)
    finally:
        for h in helpers:
            try:
                h.wait(timeout=30)
            except subprocess.TimeoutExpired:
                h.kill()
        # The shm region files outlive the nodes.
        shutil.rmtree(f"/dev/shm/nessie-{name}", ignore_errors=True)


if __name__ == "__main__":
    main()
