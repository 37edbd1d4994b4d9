//! One Python exception class per `nessie::Error` variant, all under
//! `nessie.NessieError`, each raised with the Rust error's message.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    nessie,
    NessieError,
    PyException,
    "Base class of every error the store raises."
);

/// Declares the subclasses of `NessieError`, and the list that registers
/// them in the module.
macro_rules! errors {
    ($($name:ident: $doc:literal,)*) => {
        $(create_exception!(nessie, $name, NessieError, $doc);)*

        /// Adds `NessieError` and its subclasses to the module.
        pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            let py = m.py();
            m.add("NessieError", py.get_type::<NessieError>())?;
            $(m.add(stringify!($name), py.get_type::<$name>())?;)*
            Ok(())
        }
    };
}

errors! {
    EmptyKeyError: "The key is empty.",
    KeyTooLargeError: "The key is longer than key_size_max.",
    ValueTooLargeError: "The value is longer than value_size_max.",
    BufferTooSmallError: "The buffer given to get_into is shorter than the value; `needed` and `capacity` say by how much.",
    IndexFullError: "No candidate index slot of the key could be freed within max_migrate_depth MIGRATEs.",
    DataTableFullError: "The node's data table of the value's size class had no free slot before the deadline.",
    OperationTimeoutError: "The operation's deadline passed; its outcome is unknown.",
    ClockSkewError: "A peer's clock is off by more than max_clock_skew; the node refuses operations.",
    ConfigError: "The configuration (or the launcher's environment) is invalid.",
    OutOfMemoryError: "This host cannot back the node's index and data tables.",
    FabricError: "A verb failed, or a peer is missing, unreachable or mismatched.",
    CorruptError: "An entry failed its checksum or sanity checks on every retry.",
    StoreIoError: "The store cannot run here (e.g. a background thread failed to start).",
    StoppedError: "The node or cluster was stopped (not a Rust error: the Python objects outlive it).",
    ViewChangingError: "The cluster is changing its view (a node was lost or is joining); nothing was done: retry shortly.",
    NoQuorumError: "This node cannot reach a majority of the cluster's members (or is no longer one); nothing was done.",
    RejoinRefusedError: "A replacement node could not join (one replica only, its id still a member, or the copy failed).",
    DataLostError: "Every copy of the key's share is lost (more than replicas - 1 of its nodes are gone).",
}

/// The Python exception for `err`, with its message (and, for
/// `BufferTooSmallError`, the attributes `needed` and `capacity`).
pub(crate) fn to_py(err: nessie::Error) -> PyErr {
    use nessie::Error as E;
    let msg = err.to_string();
    match err {
        E::EmptyKey => EmptyKeyError::new_err(msg),
        E::KeyTooLarge => KeyTooLargeError::new_err(msg),
        E::ValueTooLarge => ValueTooLargeError::new_err(msg),
        E::BufferTooSmall { needed, capacity } => Python::attach(|py| {
            let e = BufferTooSmallError::new_err(msg);
            let value = e.value(py);
            // Attributes on a fresh exception object cannot fail in practice;
            // if they did, the message still says both numbers.
            let _ = value.setattr("needed", needed);
            let _ = value.setattr("capacity", capacity);
            e
        }),
        E::IndexFull => IndexFullError::new_err(msg),
        E::DataTableFull => DataTableFullError::new_err(msg),
        E::Timeout => OperationTimeoutError::new_err(msg),
        E::ClockSkew { .. } => ClockSkewError::new_err(msg),
        E::Config(_) => ConfigError::new_err(msg),
        E::OutOfMemory { .. } => OutOfMemoryError::new_err(msg),
        E::Fabric(_) => FabricError::new_err(msg),
        E::Corrupt { .. } => CorruptError::new_err(msg),
        E::Io(_) => StoreIoError::new_err(msg),
        E::ViewChanging { .. } => ViewChangingError::new_err(msg),
        E::NoQuorum { .. } => NoQuorumError::new_err(msg),
        E::RejoinRefused { .. } => RejoinRefusedError::new_err(msg),
        E::DataLost { .. } => DataLostError::new_err(msg),
        // A variant added later: still a NessieError, with its message.
        _ => NessieError::new_err(msg),
    }
}

/// A configuration problem found on the Python side (a bad type or key).
pub(crate) fn config(msg: impl Into<String>) -> PyErr {
    ConfigError::new_err(msg.into())
}

/// Raised for a call on a stopped node or cluster.
pub(crate) fn stopped(what: &str) -> PyErr {
    StoppedError::new_err(format!("the {what} was stopped"))
}

/// A panic caught at the boundary (a bug): a `NessieError` with the
/// panic's message instead of an unwinding interpreter.
pub(crate) fn panicked(payload: &(dyn std::any::Any + Send)) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    NessieError::new_err(format!("internal error (a bug; please report): {what}"))
}
