//! `Client`: GET, PUT and DELETE from any Python thread.
//!
//! A Rust `nessie::Client` serves one thread at a time, so a Python
//! `Client` keeps a pool of them: a call takes an idle store client (or
//! makes one), releases the interpreter lock for the store call, and puts
//! it back. Threads sharing one `Client` thus run in parallel, each on its
//! own store client; the pool grows to the most calls ever in flight at
//! once.

use crate::buffer::ByteBuffer;
use crate::config;
use crate::errors;
use crate::host::Hosted;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What the pool keeps: idle store clients, and the counters of clients
/// dropped since (a panic's).
#[derive(Debug, Default)]
struct Pool {
    idle: Vec<nessie::Client>,
    retired: nessie::Stats,
}

/// A client of the store on one node, usable from any Python thread.
#[pyclass(frozen, module = "nessie")]
#[derive(Debug)]
pub(crate) struct Client {
    hosted: Arc<Hosted>,
    node: usize,
    pool: Mutex<Pool>,
}

/// A key: `bytes`, or a `str` (stored as its UTF-8 bytes).
fn key_bytes<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(b) = key.cast::<PyBytes>() {
        Ok(b.as_bytes())
    } else if let Ok(s) = key.cast::<PyString>() {
        Ok(s.to_str()?.as_bytes())
    } else {
        Err(PyTypeError::new_err("a key is bytes or str"))
    }
}

impl Client {
    pub(crate) fn new(hosted: Arc<Hosted>, node: usize) -> Client {
        Client {
            hosted,
            node,
            pool: Mutex::new(Pool::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `op` on an idle store client with the interpreter released.
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&mut nessie::Client) -> Result<T, nessie::Error> + Send,
    ) -> PyResult<T> {
        if let Err(e) = self.hosted.check() {
            self.lock().idle.clear();
            return Err(e);
        }
        let idle = self.lock().idle.pop();
        let mut client = match idle {
            Some(c) => c,
            None => self.hosted.new_client(self.node)?,
        };
        let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(|| op(&mut client))));
        match outcome {
            Ok(result) => {
                self.lock().idle.push(client);
                result.map_err(errors::to_py)
            }
            Err(panic) => {
                // The store client may be mid-operation: drop it, keep its
                // counters.
                let stats = client.stats();
                self.lock().retired += stats;
                drop(client);
                Err(errors::panicked(&*panic))
            }
        }
    }
}

#[pymethods]
impl Client {
    /// The value stored under `key` as bytes, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = key_bytes(key)?;
        let value = self.call(py, |c| c.get(key))?;
        Ok(value.map(|v| PyBytes::new(py, &v)))
    }

    /// GET into `buffer` (any writable, contiguous buffer: bytearray,
    /// memoryview, NumPy array...), with no copy besides the store's into
    /// it: returns the value's length (its bytes are at the start of the
    /// buffer), or None if the key holds no value. A buffer shorter than
    /// the value raises BufferTooSmallError (attribute `needed`).
    fn get_into(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<Option<usize>> {
        let key = key_bytes(key)?;
        let mut buf = ByteBuffer::get(buffer, true)?;
        let out = buf.as_mut_slice();
        self.call(py, |c| c.get_into_slice(key, out))
    }

    /// GETs every key of `keys` into its own `stride`-byte slot of one
    /// writable `buffer` (key i at offset i * stride), releasing the
    /// interpreter once for the whole batch rather than once per key:
    /// returns each value's length, or None where the key holds no value.
    /// Stops at the first error and raises it (a value longer than
    /// `stride` raises BufferTooSmallError); the slots before it are
    /// filled. ValueError if the buffer is shorter than
    /// `len(keys) * stride` or `stride` is 0.
    fn get_many_into(
        &self,
        py: Python<'_>,
        keys: Vec<Bound<'_, PyAny>>,
        buffer: &Bound<'_, PyAny>,
        stride: usize,
    ) -> PyResult<Vec<Option<usize>>> {
        let keys = keys.iter().map(key_bytes).collect::<PyResult<Vec<_>>>()?;
        let mut buf = ByteBuffer::get(buffer, true)?;
        let out = buf.as_mut_slice();
        let needed = keys.len().checked_mul(stride);
        if stride == 0 || needed.is_none_or(|n| n > out.len()) {
            return Err(PyValueError::new_err(format!(
                "get_many_into needs stride > 0 and a buffer of len(keys) * stride = {} * {} \
                 bytes; it has {}",
                keys.len(),
                stride,
                out.len()
            )));
        }
        self.call(py, |c| {
            keys.iter()
                .zip(out.chunks_mut(stride))
                .map(|(key, slot)| c.get_into_slice(key, slot))
                .collect()
        })
    }

    /// Stores `value` (bytes or any contiguous buffer) under `key`.
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = key_bytes(key)?;
        let buf = ByteBuffer::get(value, false)?;
        let value = buf.as_slice();
        self.call(py, |c| c.put(key, value))
    }

    /// For benchmarks (not a stable API): `n` GETs into `buffer`, of the
    /// `keys` in turn, in one Rust loop with the interpreter released, as
    /// a Rust program would run them; returns the seconds taken. Against a
    /// Python loop of `get_into`, it gives the bindings' cost per GET.
    fn _rust_get_loop(
        &self,
        py: Python<'_>,
        keys: Vec<Vec<u8>>,
        buffer: &Bound<'_, PyAny>,
        n: u64,
    ) -> PyResult<f64> {
        if keys.is_empty() {
            return Err(PyTypeError::new_err("keys must not be empty"));
        }
        let mut buf = ByteBuffer::get(buffer, true)?;
        let out = buf.as_mut_slice();
        self.call(py, |c| {
            let start = std::time::Instant::now();
            for key in keys.iter().cycle().take(n as usize) {
                c.get_into_slice(key, out)?;
            }
            Ok(start.elapsed().as_secs_f64())
        })
    }

    /// Removes `key`; returns whether it held a value.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        self.call(py, |c| c.delete(key))
    }

    /// Counters of this client's operations so far, as a dict per kind
    /// (`get`, `put`, `delete`): ops, errors, verbs, retries by cause,
    /// cache hits, MIGRATEs, back-off... Calls in flight on other threads
    /// are counted once they return.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let total = {
            let pool = self.lock();
            let mut total = pool.retired;
            for c in &pool.idle {
                total += c.stats();
            }
            total
        };
        config::to_python(py, &total)
    }

    /// The node this client runs on.
    #[getter]
    fn node(&self) -> usize {
        self.node
    }

    fn __repr__(&self) -> String {
        format!("<nessie.Client node={}>", self.node)
    }
}
