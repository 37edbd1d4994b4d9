"""A sharded shuffle on Nessie-rs: every process of a job is a node of the
store; each generates records, sends every record to the node its hash
names (a PUT under that node's key prefix), then reads what was sent to it
(GET into one reused buffer) and checks it. Node 0 recomputes every
node's expected input and validates the whole shuffle.

    # one host, three processes (shm fabric; NESSIE_NODE_ID/NESSIE_NODES or a launcher)
    mpirun -np 3 python python/examples/shuffle.py --fabric shm
    # across hosts (tcp fabric; the secret from NESSIE_SECRET_FILE)
    srun -N 3 -n 3 python python/examples/shuffle.py --fabric tcp
    mpirun -np 3 -x NESSIE_SECRET_FILE -x NESSIE_RENDEZVOUS python python/examples/shuffle.py --fabric tcp
    torchrun --nproc-per-node 3 python/examples/shuffle.py --fabric shm
"""

import argparse
import hashlib
import random
import sys
import time

import nessie


def records(rank, count, size):
    """Node ``rank``'s records: the same bytes on every node that asks."""
    rng = random.Random(0x5EED ^ rank)
    return [rng.randbytes(size) for _ in range(count)]


def destination(record, nodes):
    return hashlib.blake2b(record, digest_size=8).digest()[0] % nodes


def digest(items):
    """An order-free digest of a multiset of records: XOR of their hashes."""
    acc = 0
    for r in items:
        acc ^= int.from_bytes(hashlib.blake2b(r, digest_size=16).digest(), "little")
    return acc


def barrier(client, name, rank, nodes, timeout=120.0):
    """Waits until every node has reached ``name`` (one key per node)."""
    client.put(f"barrier/{name}/{rank}", b"1")
    deadline = time.monotonic() + timeout
    for other in range(nodes):
        while client.get(f"barrier/{name}/{other}") is None:
            if time.monotonic() > deadline:
                sys.exit(f"node {rank}: barrier {name!r} timed out waiting for node {other}")
            time.sleep(0.001)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fabric", default="tcp", choices=["shm", "tcp", "verbs"])
    p.add_argument("--records", type=int, default=5000, help="records per node")
    p.add_argument("--record-bytes", type=int, default=1000)
    p.add_argument("--cluster", default="shuffle", help="cluster name (shm region files)")
    p.add_argument("--shm-dir", default=None, help="directory of shm region files")
    args = p.parse_args()

    config = {
        "cluster": args.cluster,
        "index_slots_per_node": 1 << 16,
        "value_size_max": 4096,
        "data_bytes_per_node": 128 << 20,
    }
    fabric = args.fabric
    if fabric == "shm" and args.shm_dir:
        fabric = {"kind": "shm", "dir": args.shm_dir}
    started = time.monotonic()
    with nessie.Node.from_launcher(config, fabric=fabric) as node:
        rank, nodes = node.id, node.nodes
        client = node.client()

        # Send: each record to its destination's prefix, then the counts.
        sent = [0] * nodes
        for record in records(rank, args.records, args.record_bytes):
            dest = destination(record, nodes)
            client.put(f"shuffle/{dest}/{rank}/{sent[dest]}", record)
            sent[dest] += 1
        for dest in range(nodes):
            client.put(f"shuffle/count/{dest}/{rank}", str(sent[dest]).encode())
        barrier(client, "sent", rank, nodes)

        # Receive: everything sent to this node, into one reused buffer.
        buf = bytearray(args.record_bytes)
        received = []
        for src in range(nodes):
            count = int(client.get(f"shuffle/count/{rank}/{src}"))
            for j in range(count):
                n = client.get_into(f"shuffle/{rank}/{src}/{j}", buf)
                if n is None:
                    sys.exit(f"node {rank}: record {j} from node {src} is missing")
                received.append(bytes(buf[:n]))
        client.put(f"shuffle/digest/{rank}", f"{len(received)} {digest(received):x}".encode())
        barrier(client, "received", rank, nodes)

        if rank == 0:
            expected = [[] for _ in range(nodes)]
            for src in range(nodes):
                for record in records(src, args.records, args.record_bytes):
                    expected[destination(record, nodes)].append(record)
            for dest in range(nodes):
                got = client.get(f"shuffle/digest/{dest}").decode()
                want = f"{len(expected[dest])} {digest(expected[dest]):x}"
                if got != want:
                    sys.exit(f"node {dest} received the wrong records: {got} != {want}")
            total = nodes * args.records
            print(
                f"shuffle validated: {total} records of {args.record_bytes} B over {nodes} nodes "
                f"({args.fabric}) in {time.monotonic() - started:.2f} s"
            )
        # Peers may still read this node's keys until everyone is done.
        barrier(client, "done", rank, nodes)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
