//! `Cluster` and `Node`: what a process hosts. Both stop on `stop()`, at
//! the end of a `with` block, or once they and every `Client` taken from
//! them are garbage-collected (a client keeps its host running); clients
//! raise `StoppedError` after a stop.

use crate::client::Client;
use crate::config;
use crate::errors;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The Rust object behind a `Cluster` or a `Node`.
#[derive(Debug)]
enum Host {
    Cluster(nessie::Cluster),
    Node(nessie::Node),
}

/// A host shared by its Python object and every `Client` taken from it.
#[derive(Debug)]
pub(crate) struct Hosted {
    host: Mutex<Option<Host>>,
    stopped: AtomicBool,
    what: &'static str,
    config: nessie::Config,
}

impl Hosted {
    fn new(host: Host) -> Arc<Hosted> {
        let (what, config) = match &host {
            Host::Cluster(c) => ("cluster", c.config().clone()),
            Host::Node(n) => ("node", n.config().clone()),
        };
        Arc::new(Hosted {
            host: Mutex::new(Some(host)),
            stopped: AtomicBool::new(false),
            what,
            config,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Host>> {
        self.host.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `StoppedError` once stopped.
    pub(crate) fn check(&self) -> PyResult<()> {
        if self.stopped.load(Ordering::Acquire) {
            Err(errors::stopped(self.what))
        } else {
            Ok(())
        }
    }

    /// A new store client on `node`.
    pub(crate) fn new_client(&self, node: usize) -> PyResult<nessie::Client> {
        match &*self.lock() {
            None => Err(errors::stopped(self.what)),
            Some(Host::Cluster(c)) => c.client(node).map_err(errors::to_py),
            Some(Host::Node(n)) => n.client().map_err(errors::to_py),
        }
    }

    /// Stops the host (joins its background threads) with the interpreter
    /// released; idempotent.
    fn stop(&self, py: Python<'_>) {
        self.stopped.store(true, Ordering::Release);
        let host = self.lock().take();
        py.detach(move || drop(host));
    }

    fn with_cluster<T>(&self, f: impl FnOnce(&nessie::Cluster) -> T) -> PyResult<T> {
        match &*self.lock() {
            Some(Host::Cluster(c)) => Ok(f(c)),
            _ => Err(errors::stopped(self.what)),
        }
    }

    fn with_node<T>(&self, f: impl FnOnce(&nessie::Node) -> T) -> PyResult<T> {
        match &*self.lock() {
            Some(Host::Node(n)) => Ok(f(n)),
            _ => Err(errors::stopped(self.what)),
        }
    }
}

/// Runs a starting host's work with the interpreter released, catching a
/// panic.
fn start<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, nessie::Error> + Send,
) -> PyResult<T> {
    py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
        .map_err(|p| errors::panicked(&*p))?
        .map_err(errors::to_py)
}

/// Every node of a cluster in this process, on the in-process fabric: for
/// tests and single-process jobs.
#[pyclass(frozen, module = "nessie")]
#[derive(Debug)]
pub(crate) struct Cluster {
    hosted: Arc<Hosted>,
}

#[pymethods]
impl Cluster {
    /// Starts `config["nodes"]` nodes (default 3) in this process.
    /// `config` is None, a dict of `Config` keys or the path of a TOML
    /// file; keyword settings override single keys.
    #[classmethod]
    #[pyo3(signature = (config=None, **settings))]
    fn local(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Cluster> {
        let config = config::build(config, settings)?;
        let cluster = start(py, move || nessie::Cluster::local(config))?;
        Ok(Cluster {
            hosted: Hosted::new(Host::Cluster(cluster)),
        })
    }

    /// A client running on node `node` (usable from any thread).
    #[pyo3(signature = (node=0))]
    fn client(&self, node: usize) -> PyResult<Client> {
        self.hosted.check()?;
        if node >= self.hosted.config.nodes {
            return Err(errors::config(format!(
                "node {node} is out of range for {} nodes",
                self.hosted.config.nodes
            )));
        }
        Ok(Client::new(Arc::clone(&self.hosted), node))
    }

    /// Number of nodes.
    #[getter]
    fn nodes(&self) -> usize {
        self.hosted.config.nodes
    }

    /// The configuration, as a dict.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        config::to_python(py, &self.hosted.config)
    }

    /// The address (`host:port`) of node `node`'s Prometheus endpoint, or
    /// None when metrics are off.
    fn metrics_address(&self, node: usize) -> PyResult<Option<String>> {
        self.hosted
            .with_cluster(|c| c.metrics_address(node).map(|a| a.to_string()))
    }

    /// Whether `stop()` was called.
    #[getter]
    fn stopped(&self) -> bool {
        self.hosted.check().is_err()
    }

    /// Stops every node (idempotent).
    fn stop(&self, py: Python<'_>) {
        self.hosted.stop(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.hosted.stop(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<nessie.Cluster nodes={}{}>",
            self.hosted.config.nodes,
            if self.stopped() { " stopped" } else { "" }
        )
    }
}

/// This process's node of a multi-process cluster (`shm`, `tcp` or
/// `verbs` fabric).
#[pyclass(frozen, module = "nessie")]
#[derive(Debug)]
pub(crate) struct Node {
    hosted: Arc<Hosted>,
    id: usize,
}

impl Node {
    fn wrap(node: nessie::Node) -> Node {
        let id = node.id();
        Node {
            hosted: Hosted::new(Host::Node(node)),
            id,
        }
    }
}

#[pymethods]
impl Node {
    /// Starts node `node_id` and waits for its peers (up to
    /// `attach_timeout`). `config` as for `Cluster.local`; its fabric must
    /// be `shm`, `tcp` or `verbs`.
    #[classmethod]
    #[pyo3(signature = (config, node_id, **settings))]
    fn start(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        node_id: usize,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Node> {
        let config = config::build(config, settings)?;
        Ok(Node::wrap(start(py, move || {
            nessie::Node::start(config, node_id)
        })?))
    }

    /// Starts this process's node of a job that a launcher started (srun,
    /// mpirun, torchrun) or that NESSIE_NODE_ID and NESSIE_NODES describe:
    /// the node id and count come from the environment, and on `tcp` the
    /// nodes meet at the launcher's rendezvous, with the secret from
    /// NESSIE_SECRET or NESSIE_SECRET_FILE. `fabric` names the fabric, or
    /// is a dict of its settings (default: the configuration's, which must
    /// not be `local`).
    #[classmethod]
    #[pyo3(signature = (config=None, *, fabric=None, **settings))]
    fn from_launcher(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        fabric: Option<&Bound<'_, PyAny>>,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Node> {
        let all = PyDict::new(py);
        if let Some(s) = settings {
            all.update(s.as_mapping())?;
        }
        if let Some(f) = fabric {
            all.set_item("fabric", f)?;
        }
        let config = config::build(config, Some(&all))?;
        Ok(Node::wrap(start(py, move || {
            nessie::Node::launched(config)
        })?))
    }

    /// A client running on this node (usable from any thread).
    fn client(&self) -> PyResult<Client> {
        self.hosted.check()?;
        Ok(Client::new(Arc::clone(&self.hosted), self.id))
    }

    /// This node's id.
    #[getter]
    fn id(&self) -> usize {
        self.id
    }

    /// Number of nodes in the cluster.
    #[getter]
    fn nodes(&self) -> usize {
        self.hosted.config.nodes
    }

    /// The configuration, as a dict (secrets included: do not log it).
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        config::to_python(py, &self.hosted.config)
    }

    /// Counters of the tcp fabric (verbs served, refusals, bad frames,
    /// handshakes), or None on another fabric.
    fn tcp_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.hosted.with_node(nessie::Node::tcp_stats)? {
            Some(s) => config::to_python(py, &s).map(Some),
            None => Ok(None),
        }
    }

    /// One dict per size class of this node's data tables: slots, free,
    /// in use, peak in use, reuse window.
    fn data_table_figures<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let figures = self.hosted.with_node(nessie::Node::data_table_figures)?;
        config::to_python(py, &figures)
    }

    /// The address of this node's Prometheus endpoint (`host:port`), or
    /// None when metrics are off.
    #[getter]
    fn metrics_address(&self) -> PyResult<Option<String>> {
        self.hosted
            .with_node(|n| n.metrics_address().map(|a| a.to_string()))
    }

    /// Whether `stop()` was called.
    #[getter]
    fn stopped(&self) -> bool {
        self.hosted.check().is_err()
    }

    /// Stops the node (idempotent). Peers still reading its memory fail
    /// from then on: stop after the job's last barrier.
    fn stop(&self, py: Python<'_>) {
        self.hosted.stop(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.hosted.stop(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<nessie.Node id={} nodes={}{}>",
            self.id,
            self.hosted.config.nodes,
            if self.stopped() { " stopped" } else { "" }
        )
    }
}
