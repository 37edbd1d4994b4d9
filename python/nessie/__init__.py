"""Nessie-rs from Python: a key-value store for the processes of one job.

Every process of a job is a node of the store and a client of it::

    import nessie

    with nessie.Node.from_launcher(fabric="tcp") as node:   # under srun, mpirun, torchrun
        client = node.client()
        client.put(b"job/0/1", b"partition bytes")
        value = client.get(b"job/0/1")

``nessie.Cluster.local(...)`` starts every node in this process (tests,
single-process jobs). Store calls release the interpreter lock; a
``Client`` may be shared by threads (it keeps a store client per call in
flight). Errors are subclasses of ``nessie.NessieError``.
"""

from ._nessie import (
    BufferTooSmallError,
    ClockSkewError,
    Client,
    Cluster,
    ConfigError,
    CorruptError,
    DataLostError,
    DataTableFullError,
    EmptyKeyError,
    FabricError,
    IndexFullError,
    KeyTooLargeError,
    NessieError,
    NoQuorumError,
    Node,
    OperationTimeoutError,
    OutOfMemoryError,
    RejoinRefusedError,
    StoppedError,
    StoreIoError,
    ValueTooLargeError,
    ViewChangingError,
    __version__,
    default_config,
)

__all__ = [
    "BufferTooSmallError",
    "ClockSkewError",
    "Client",
    "Cluster",
    "ConfigError",
    "CorruptError",
    "DataLostError",
    "DataTableFullError",
    "EmptyKeyError",
    "FabricError",
    "IndexFullError",
    "KeyTooLargeError",
    "NessieError",
    "NoQuorumError",
    "Node",
    "OperationTimeoutError",
    "OutOfMemoryError",
    "RejoinRefusedError",
    "StoppedError",
    "StoreIoError",
    "ValueTooLargeError",
    "ViewChangingError",
    "__version__",
    "default_config",
]
