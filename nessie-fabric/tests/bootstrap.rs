//! The bootstrap suite on the `tcp` fabric: nodes that meet through the
//! authenticated rendezvous on 127.0.0.1 refuse another secret, replayed
//! and tampered messages, a duplicate node id and another node count, each
//! with a typed error, and still open for the honest nodes.

use nessie_fabric::{Fabric, FabricError, RendezvousOptions, TcpFabric, TcpOptions};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn open_tcp(rendezvous: RendezvousOptions) -> Result<Arc<dyn Fabric>, FabricError> {
    let options = TcpOptions {
        closed: false,
        membership: rendezvous.membership.clone(),
        joins: nessie_fabric::Joins::Off,
        peers: Vec::new(),
        secret: rendezvous.secret.clone(),
        threads: 2,
        attach_timeout: rendezvous.timeout,
        handshake_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(10),
        frame_limit: 256 << 10,
        rendezvous: Some(rendezvous),
    };
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| FabricError::Bind {
        addr: "127.0.0.1:0".into(),
        source,
    })?;
    Ok(Arc::new(TcpFabric::with_listener(&options, listener)?))
}

fn cluster() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    0x7463_7000_0000_0000
        | u64::from(std::process::id()) << 16
        | NEXT.fetch_add(1, Ordering::Relaxed)
}

nessie_fabric::bootstrap_tests!(open_tcp, cluster,);
