"""Type stubs of the extension module (python/src/*.rs)."""

import os
import sys
from types import TracebackType
from collections.abc import Sequence
from typing import Any, Literal, Self

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

__version__: str

Key = bytes | str
ConfigArg = None | dict[str, Any] | str | os.PathLike[str]
FabricName = Literal["local", "shm", "tcp", "verbs"]

def default_config() -> dict[str, Any]:
    """The default configuration (durations in milliseconds)."""

class NessieError(Exception):
    """Base class of every error the store raises."""

class EmptyKeyError(NessieError): ...
class KeyTooLargeError(NessieError): ...
class ValueTooLargeError(NessieError): ...

class BufferTooSmallError(NessieError):
    """The buffer given to ``get_into`` is shorter than the value."""

    needed: int
    """The value's length in bytes."""
    capacity: int
    """The buffer's length in bytes."""

class IndexFullError(NessieError): ...
class DataTableFullError(NessieError): ...
class OperationTimeoutError(NessieError):
    """The deadline passed; the operation may or may not have taken effect."""

class ClockSkewError(NessieError): ...
class ConfigError(NessieError): ...
class OutOfMemoryError(NessieError): ...
class FabricError(NessieError): ...
class CorruptError(NessieError): ...
class StoreIoError(NessieError): ...
class StoppedError(NessieError):
    """A call on a stopped node or cluster."""

class ViewChangingError(NessieError):
    """The cluster is changing its view; nothing was done: retry shortly."""

class NoQuorumError(NessieError):
    """This node cannot reach a majority of the members; nothing was done."""

class RejoinRefusedError(NessieError):
    """A replacement node could not join."""

class DataLostError(NessieError):
    """Every copy of the key's share is lost."""

class Client:
    """A client of the store on one node; safe to share between threads."""

    @property
    def node(self) -> int: ...
    def get(self, key: Key) -> bytes | None:
        """The value under ``key``, or None."""
    def get_into(self, key: Key, buffer: Buffer) -> int | None:
        """GET into a writable buffer; the value's length, or None if absent.

        Raises BufferTooSmallError (with ``needed``) if the value does not fit.
        """
    def get_many_into(
        self, keys: Sequence[Key], buffer: Buffer, stride: int
    ) -> list[int | None]:
        """GETs each key into its ``stride``-byte slot of ``buffer`` (key i at
        offset i * stride), releasing the interpreter once for the batch;
        each value's length, or None where absent.

        Stops at the first error and raises it (BufferTooSmallError if a
        value is longer than ``stride``); ValueError if the buffer is shorter
        than ``len(keys) * stride``.
        """
    def put(self, key: Key, value: Buffer) -> None:
        """Stores ``value`` (bytes or any contiguous buffer) under ``key``."""
    def delete(self, key: Key) -> bool:
        """Removes ``key``; whether it held a value."""
    def stats(self) -> dict[str, Any]:
        """Counters per operation kind (``get``, ``put``, ``delete``)."""
    def _rust_get_loop(self, keys: list[bytes], buffer: Buffer, n: int) -> float:
        """Benchmarks only: ``n`` GETs in one Rust loop; seconds taken."""

class Cluster:
    """Every node of a cluster in this process (the in-process fabric)."""

    @classmethod
    def local(cls, config: ConfigArg = None, **settings: Any) -> Cluster: ...
    def client(self, node: int = 0) -> Client: ...
    def metrics_address(self, node: int) -> str | None:
        """``host:port`` of node ``node``'s Prometheus endpoint, or None."""
    @property
    def nodes(self) -> int: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def stopped(self) -> bool: ...
    def stop(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class Node:
    """This process's node of a multi-process cluster."""

    @classmethod
    def start(cls, config: ConfigArg, node_id: int, **settings: Any) -> Node: ...
    @classmethod
    def from_launcher(
        cls,
        config: ConfigArg = None,
        *,
        fabric: FabricName | dict[str, Any] | None = None,
        **settings: Any,
    ) -> Node: ...
    def client(self) -> Client: ...
    @property
    def id(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the node's Prometheus endpoint, or None."""
    def tcp_stats(self) -> dict[str, int] | None: ...
    def data_table_figures(self) -> list[dict[str, Any]]: ...
    @property
    def stopped(self) -> bool: ...
    def stop(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
