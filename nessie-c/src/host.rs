//! Cluster and node handles: starting, taking clients, freeing.

use crate::client::NessieClient;
use crate::{config_from, fail, guard, null, store_error, text, NessieStatus};
use nessie::FabricConfig;
use std::ffi::c_char;

/// Every node of a cluster in this process (the in-process fabric).
/// Opaque; freed with `nessie_cluster_free`.
#[derive(Debug)]
pub struct NessieCluster {
    inner: nessie::Cluster,
}

/// This process's node of a multi-process cluster. Opaque; freed with
/// `nessie_node_free`.
#[derive(Debug)]
pub struct NessieNode {
    inner: nessie::Node,
}

/// Stores `value` in `*out` as a new heap handle.
///
/// # Safety
/// `out` is null (checked by the callers) or valid for a write.
unsafe fn give<T>(out: *mut *mut T, value: T) -> NessieStatus {
    // SAFETY: `out` is not null (every caller checks) and the C caller
    // promises it points to a writable `T*`.
    unsafe { out.write(Box::into_raw(Box::new(value))) };
    NessieStatus::NessieOk
}

/// Frees a handle made by [`give`] (NULL is ignored), dropping it behind
/// `catch_unwind` so that a panic in a drop never crosses into C.
///
/// # Safety
/// `handle` is NULL or came from [`give`] and is not used again.
pub(crate) unsafe fn take_back<T>(handle: *mut T) {
    if handle.is_null() {
        return;
    }
    // SAFETY: the caller hands over a handle made by `Box::into_raw` in
    // `give` and never uses it again.
    let boxed = unsafe { Box::from_raw(handle) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(boxed)));
}

/// A new client made by `make` from the live handle `host` (a cluster or a
/// node), stored in `*out`.
///
/// # Safety
/// `host` is NULL or a live handle; `out` is NULL or valid for a write.
unsafe fn new_client<H>(
    host: *const H,
    what: &str,
    out: *mut *mut NessieClient,
    make: impl FnOnce(&H) -> Result<nessie::Client, nessie::Error>,
) -> NessieStatus {
    guard(|| {
        if out.is_null() {
            return null("out");
        }
        // SAFETY: the caller promises a live handle (or NULL, refused).
        let Some(host) = (unsafe { host.as_ref() }) else {
            return null(what);
        };
        match make(host) {
            // SAFETY: `out` is not null and the caller promises it writable.
            Ok(c) => unsafe { give(out, NessieClient::new(c)) },
            Err(e) => store_error(&e),
        }
    })
}

/// A fabric by name, with what a launcher fills in left empty.
fn fabric_named(name: &str) -> Result<FabricConfig, NessieStatus> {
    Ok(match name {
        "shm" => FabricConfig::Shm { dir: None },
        "tcp" => FabricConfig::Tcp {
            peers: Vec::new(),
            rendezvous: None,
            join: Vec::new(),
            secret: String::new(),
            threads: 4,
        },
        "verbs" => FabricConfig::Verbs {
            device: None,
            peers: Vec::new(),
            rendezvous: None,
            join: Vec::new(),
            secret: String::new(),
            gid_index: None,
        },
        other => {
            return Err(fail(
                NessieStatus::NessieConfig,
                format!("unknown fabric {other:?}: use shm, tcp or verbs"),
            ))
        }
    })
}

/// Starts every node of a cluster in this process. `config_toml` is the
/// text of a configuration file (the keys of the Rust `Config`), or NULL
/// for the defaults. On success `*out` is a new handle.
///
/// # Safety
/// `config_toml` is NULL or a NUL-terminated string; `out` is valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn nessie_cluster_local(
    config_toml: *const c_char,
    out: *mut *mut NessieCluster,
) -> NessieStatus {
    guard(|| {
        if out.is_null() {
            return null("out");
        }
        // SAFETY: the caller promises NULL or a NUL-terminated string.
        let config = match unsafe { text(config_toml, "config_toml") }.and_then(config_from) {
            Ok(c) => c,
            Err(status) => return status,
        };
        match nessie::Cluster::local(config) {
            // SAFETY: `out` is not null and the caller promises it writable.
            Ok(inner) => unsafe { give(out, NessieCluster { inner }) },
            Err(e) => store_error(&e),
        }
    })
}

/// A new client running on node `node` of `cluster`.
///
/// # Safety
/// `cluster` is a live handle from `nessie_cluster_local`; `out` is valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn nessie_cluster_client(
    cluster: *const NessieCluster,
    node: usize,
    out: *mut *mut NessieClient,
) -> NessieStatus {
    // SAFETY: as this function's contract.
    unsafe { new_client(cluster, "cluster", out, |c| c.inner.client(node)) }
}

/// Stops every node of `cluster` and frees it (NULL is ignored). Free its
/// clients first.
///
/// # Safety
/// `cluster` is NULL or a live handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn nessie_cluster_free(cluster: *mut NessieCluster) {
    // SAFETY: as this function\'s contract.
    unsafe { take_back(cluster) }
}

/// Starts node `node_id` of a cluster of processes and waits for its peers
/// (up to `attach_timeout`). `config_toml` as for `nessie_cluster_local`;
/// its fabric must be shm, tcp or verbs.
///
/// # Safety
/// As `nessie_cluster_local`.
#[no_mangle]
pub unsafe extern "C" fn nessie_node_start(
    config_toml: *const c_char,
    node_id: usize,
    out: *mut *mut NessieNode,
) -> NessieStatus {
    guard(|| {
        if out.is_null() {
            return null("out");
        }
        // SAFETY: the caller promises NULL or a NUL-terminated string.
        let config = match unsafe { text(config_toml, "config_toml") }.and_then(config_from) {
            Ok(c) => c,
            Err(status) => return status,
        };
        match nessie::Node::start(config, node_id) {
            // SAFETY: `out` is not null and the caller promises it writable.
            Ok(inner) => unsafe { give(out, NessieNode { inner }) },
            Err(e) => store_error(&e),
        }
    })
}

/// Starts this process's node of a job a launcher started (srun, mpirun,
/// torchrun) or that `NESSIE_NODE_ID` and `NESSIE_NODES` describe. `fabric`
/// is "shm", "tcp" or "verbs", or NULL for the configuration's; on tcp the
/// nodes meet at the launcher's rendezvous with the secret from
/// `NESSIE_SECRET` or `NESSIE_SECRET_FILE`.
///
/// # Safety
/// `config_toml` and `fabric` are NULL or NUL-terminated strings; `out`
/// is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nessie_node_from_launcher(
    config_toml: *const c_char,
    fabric: *const c_char,
    out: *mut *mut NessieNode,
) -> NessieStatus {
    guard(|| {
        if out.is_null() {
            return null("out");
        }
        // SAFETY: the caller promises NULL or NUL-terminated strings.
        let (config, fabric) = match unsafe {
            text(config_toml, "config_toml").and_then(|t| Ok((t, text(fabric, "fabric")?)))
        } {
            Ok(v) => v,
            Err(status) => return status,
        };
        let mut config = match config_from(config) {
            Ok(c) => c,
            Err(status) => return status,
        };
        if let Some(name) = fabric {
            match fabric_named(name) {
                Ok(f) => config.fabric = f,
                Err(status) => return status,
            }
        }
        match nessie::Node::launched(config) {
            // SAFETY: `out` is not null and the caller promises it writable.
            Ok(inner) => unsafe { give(out, NessieNode { inner }) },
            Err(e) => store_error(&e),
        }
    })
}

/// The node's id (`SIZE_MAX` for NULL).
///
/// # Safety
/// `node` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn nessie_node_id(node: *const NessieNode) -> usize {
    // SAFETY: the caller promises NULL or a live handle.
    unsafe { node.as_ref() }.map_or(usize::MAX, |n| n.inner.id())
}

/// The number of nodes in the node's cluster (0 for NULL).
///
/// # Safety
/// `node` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn nessie_node_count(node: *const NessieNode) -> usize {
    // SAFETY: the caller promises NULL or a live handle.
    unsafe { node.as_ref() }.map_or(0, |n| n.inner.config().nodes)
}

/// A new client running on `node`.
///
/// # Safety
/// `node` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nessie_node_client(
    node: *const NessieNode,
    out: *mut *mut NessieClient,
) -> NessieStatus {
    // SAFETY: as this function's contract.
    unsafe { new_client(node, "node", out, |n| n.inner.client()) }
}

/// Stops `node` and frees it (NULL is ignored). Free its clients first,
/// and stop only when peers no longer read this node's keys (after the
/// job's last barrier).
///
/// # Safety
/// `node` is NULL or a live handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn nessie_node_free(node: *mut NessieNode) {
    // SAFETY: as this function\'s contract.
    unsafe { take_back(node) }
}
