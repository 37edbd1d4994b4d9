//! # nessie (Python)
//!
//! The Python extension module `nessie._nessie`, re-exported by the pure
//! Python package `nessie` (python/nessie/). It wraps the Rust crate's
//! [`nessie::Cluster`], [`nessie::Node`] and [`nessie::Client`]:
//!
//! * `host` — `Cluster` (every node in this process) and `Node` (this
//!   process's node of a job), started from a dict, a TOML file or the
//!   launcher's environment, and stopped by `stop()` or a `with` block.
//! * `client` — `Client`, usable from any Python thread: it keeps a pool
//!   of store clients (the Rust `Client` is one per thread) and releases
//!   the interpreter lock around every store call.
//! * `buffer` — the buffer protocol: values are read from, and `get_into`
//!   writes to, the caller's memory directly.
//! * `errors` — one exception class per `nessie::Error` variant, under
//!   `NessieError`.
//! * `config` — a `nessie::Config` from Python values.
//!
//! Nothing panics across the boundary: store calls run under
//! `catch_unwind` (a panic becomes a `NessieError`), and PyO3 turns any
//! other panic into a Python exception.

use pyo3::prelude::*;

mod buffer;
mod client;
mod config;
mod errors;
mod host;

/// The extension module. It keeps no state of its own between calls and
/// releases the interpreter lock around store calls, so it declares that it
/// does not need the GIL (free-threaded CPython builds may load it).
#[pymodule(gil_used = false)]
fn _nessie(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<host::Cluster>()?;
    m.add_class::<host::Node>()?;
    m.add_class::<client::Client>()?;
    m.add_function(wrap_pyfunction!(config::default_config, m)?)?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
