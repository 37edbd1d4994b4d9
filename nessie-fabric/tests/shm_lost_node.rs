//! The loss of a host, emulated on `shm`: once a node is declared lost its
//! regions are wiped and every process refuses verbs to it; a replacement
//! takes the same files (which every peer has mapped) and verbs reach it
//! again, on memory that starts empty.

use nessie_fabric::conformance::{FORMAT_VERSION, SMALL as INDEX};
use nessie_fabric::{
    Fabric, FabricError, Membership, RegionSpec, RemoteAddr, ShmFabric, ShmOptions,
};
use std::path::Path;
use std::time::Duration;

const LEN: u64 = 4096;

fn regions() -> Vec<RegionSpec> {
    vec![RegionSpec {
        id: INDEX,
        len: LEN,
    }]
}

fn options(dir: &Path, node: usize, replace: bool) -> ShmOptions {
    ShmOptions {
        dir: dir.to_path_buf(),
        membership: Membership {
            cluster_id: 0x5eed,
            format_version: FORMAT_VERSION,
            node,
            nodes: 2,
            regions: regions(),
        },
        attach_timeout: Duration::from_secs(10),
        replace,
    }
}

fn open_both(dir: &Path) -> (ShmFabric, ShmFabric) {
    std::thread::scope(|s| {
        let a = s.spawn(|| ShmFabric::open(&options(dir, 0, false)).unwrap());
        let b = s.spawn(|| ShmFabric::open(&options(dir, 1, false)).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    })
}

fn word(f: &dyn Fabric, at: RemoteAddr) -> Result<u64, FabricError> {
    let mut w = [0u8; 8];
    f.read(at, &mut w)?;
    Ok(u64::from_le_bytes(w))
}

#[test]
fn a_lost_node_is_refused_and_wiped_and_its_replacement_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (zero, one) = open_both(dir.path());
    let at = RemoteAddr::new(1, INDEX, 64);
    zero.write(at, &42u64.to_le_bytes()).unwrap();
    assert_eq!(word(&one, at).unwrap(), 42);

    ShmFabric::lose(dir.path(), 1, &regions(), Duration::from_millis(10)).unwrap();
    assert!(matches!(
        word(&zero, at),
        Err(FabricError::Lost { node: 1 })
    ));
    assert!(matches!(
        zero.cas(at, 42, 43),
        Err(FabricError::Lost { node: 1 })
    ));
    assert!(!FabricError::Lost { node: 1 }.may_have_executed());
    // The lost node's process goes; its files stay for a replacement.
    drop(one);
    assert!(ShmFabric::region_path(dir.path(), 1, INDEX).exists());

    let replacement = ShmFabric::open(&options(dir.path(), 1, true)).unwrap();
    // Taken, wiped, and still closed: nothing reads the empty memory as
    // its predecessor's until the replacement opens it.
    assert!(matches!(
        word(&zero, at),
        Err(FabricError::Lost { node: 1 })
    ));
    replacement.close_own_memory(false);
    assert_eq!(
        word(&zero, at).unwrap(),
        0,
        "the peer's old mapping sees the wiped, taken file"
    );
    replacement.write(at, &7u64.to_le_bytes()).unwrap();
    assert_eq!(word(&zero, at).unwrap(), 7);
    // Node 0's own region was never lost.
    let own = RemoteAddr::new(0, INDEX, 0);
    zero.write(own, &5u64.to_le_bytes()).unwrap();
    assert_eq!(word(&replacement, own).unwrap(), 5);
}

#[test]
fn a_replacement_refuses_the_files_of_a_node_that_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (_zero, _one) = open_both(dir.path());
    let err = ShmFabric::open(&options(dir.path(), 1, true)).unwrap_err();
    assert!(matches!(err, FabricError::Refused { node: 1, .. }), "{err}");
}
