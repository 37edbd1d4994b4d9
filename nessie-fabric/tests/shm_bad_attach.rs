//! Attaching to a peer's region file that is not what this node expects
//! fails with the error variant naming the mismatch, and leaves nothing
//! behind.
//!
//! Each test crafts node 1's index region file by hand (header encoded with
//! `RegionHeader`, mode 0600, the size a real region file has unless the
//! test is about size) and opens node 0 of a two-node cluster against it.

use nessie_fabric::conformance::{FORMAT_VERSION, LARGE as DATA, SMALL as INDEX};
use nessie_fabric::wire::region::{RegionHeader, REGION_HEADER_BYTES, REGION_MAGIC};
use nessie_fabric::{FabricError, Membership, RegionSpec, ShmFabric, ShmOptions};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

const CLUSTER: u64 = 0x00c1_u64 << 40 | 0xbad;
const LEN: u64 = 8192;
const PEER: usize = 1;

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nessie-bad-attach-")
        .tempdir()
        .expect("tempdir")
}

/// The header node 1's index region would have.
fn good_header() -> RegionHeader {
    RegionHeader {
        magic: REGION_MAGIC,
        format_version: FORMAT_VERSION,
        region: INDEX,
        node: PEER as u16,
        cluster_id: CLUSTER,
        len: LEN,
        creator_pid: 4242,
    }
}

/// Writes node 1's index region file with `header`, `file_len` bytes long.
fn craft(dir: &Path, header: &RegionHeader, file_len: u64) -> PathBuf {
    let path = ShmFabric::region_path(dir, PEER, INDEX);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("create the peer's file");
    let bytes = header.encode();
    let head = usize::try_from(file_len).map_or(bytes.len(), |l| l.min(bytes.len()));
    file.write_all(&bytes[..head]).expect("write the header");
    file.set_len(file_len).expect("size the file");
    assert_eq!(
        std::fs::metadata(&path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    path
}

fn proper_len() -> u64 {
    REGION_HEADER_BYTES as u64 + LEN
}

/// Opens node 0 against the crafted peer; asserts it fails and that node
/// 0's own region file is gone again.
fn open_node0(dir: &Path, attach_timeout: Duration) -> FabricError {
    let result = ShmFabric::open(&ShmOptions {
        dir: dir.to_path_buf(),
        membership: Membership {
            cluster_id: CLUSTER,
            format_version: FORMAT_VERSION,
            node: 0,
            nodes: 2,
            regions: vec![RegionSpec {
                id: INDEX,
                len: LEN,
            }],
        },
        attach_timeout,
        replace: false,
    });
    let own = ShmFabric::region_path(dir, 0, INDEX);
    match result {
        Ok(_) => panic!("attached to a bad peer file"),
        Err(e) => {
            assert!(!own.exists(), "a failed open left {} behind", own.display());
            assert!(!e.to_string().is_empty());
            e
        }
    }
}

fn open_against(header: &RegionHeader, file_len: u64) -> (FabricError, PathBuf) {
    let dir = scratch();
    let path = craft(dir.path(), header, file_len);
    (open_node0(dir.path(), Duration::from_secs(5)), path)
}

#[test]
fn a_well_formed_peer_file_attaches() {
    // The control: the crafting itself is right, so every failure below is
    // caused by the one field each test changes.
    let dir = scratch();
    craft(dir.path(), &good_header(), proper_len());
    let fabric = ShmFabric::open(&ShmOptions {
        dir: dir.path().to_path_buf(),
        membership: Membership {
            cluster_id: CLUSTER,
            format_version: FORMAT_VERSION,
            node: 0,
            nodes: 2,
            regions: vec![RegionSpec {
                id: INDEX,
                len: LEN,
            }],
        },
        attach_timeout: Duration::from_secs(5),
        replace: false,
    })
    .expect("attach to a well-formed peer file");
    drop(fabric);
}

#[test]
fn wrong_magic_is_refused() {
    let header = RegionHeader {
        magic: u64::from_le_bytes(*b"NOTNESSI"),
        ..good_header()
    };
    let (e, path) = open_against(&header, proper_len());
    assert!(
        matches!(&e, FabricError::WrongMagic { path: p } if *p == path),
        "{e:?}"
    );
}

#[test]
fn a_zeroed_file_has_the_wrong_magic() {
    let dir = scratch();
    let path = ShmFabric::region_path(dir.path(), PEER, INDEX);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("create");
    file.set_len(proper_len()).expect("size");
    let e = open_node0(dir.path(), Duration::from_secs(5));
    assert!(matches!(e, FabricError::WrongMagic { .. }), "{e:?}");
}

#[test]
fn wrong_format_version_is_refused() {
    let header = RegionHeader {
        format_version: FORMAT_VERSION + 1,
        ..good_header()
    };
    let (e, path) = open_against(&header, proper_len());
    assert!(
        matches!(&e, FabricError::WrongVersion { path: p, found, expected }
            if *p == path && *found == FORMAT_VERSION + 1 && *expected == FORMAT_VERSION),
        "{e:?}"
    );
}

#[test]
fn wrong_cluster_is_refused() {
    let header = RegionHeader {
        cluster_id: CLUSTER + 1,
        ..good_header()
    };
    let (e, path) = open_against(&header, proper_len());
    assert!(
        matches!(&e, FabricError::WrongCluster { path: p, found, expected }
            if *p == path && *found == CLUSTER + 1 && *expected == CLUSTER),
        "{e:?}"
    );
}

#[test]
fn wrong_region_length_in_the_header_is_refused() {
    let header = RegionHeader {
        len: 2 * LEN,
        ..good_header()
    };
    let (e, path) = open_against(&header, REGION_HEADER_BYTES as u64 + 2 * LEN);
    assert!(
        matches!(&e, FabricError::WrongSize { path: p, found, expected }
            if *p == path && *found == 2 * LEN && *expected == LEN),
        "{e:?}"
    );
}

#[test]
fn a_file_shorter_than_its_header_is_refused() {
    let (e, path) = open_against(&good_header(), 16);
    assert!(
        matches!(&e, FabricError::WrongSize { path: p, found: 16, expected }
            if *p == path && *expected == proper_len()),
        "{e:?}"
    );
}

#[test]
fn a_file_shorter_than_its_header_says_is_refused() {
    let (e, path) = open_against(&good_header(), proper_len() - 4096);
    assert!(
        matches!(&e, FabricError::WrongSize { path: p, .. } if *p == path),
        "{e:?}"
    );
}

#[test]
fn wrong_node_in_the_header_is_refused() {
    let header = RegionHeader {
        node: 0,
        ..good_header()
    };
    let (e, path) = open_against(&header, proper_len());
    assert!(
        matches!(&e, FabricError::WrongRegion { path: p, found_node: 0, found_region, node: PEER, region }
            if *p == path && *found_region == INDEX && *region == INDEX),
        "{e:?}"
    );
}

#[test]
fn wrong_region_in_the_header_is_refused() {
    let header = RegionHeader {
        region: DATA,
        ..good_header()
    };
    let (e, path) = open_against(&header, proper_len());
    assert!(
        matches!(&e, FabricError::WrongRegion { path: p, found_node: PEER, found_region, node: PEER, region }
            if *p == path && *found_region == DATA && *region == INDEX),
        "{e:?}"
    );
}

#[test]
fn a_missing_peer_is_reported_after_the_deadline() {
    let dir = scratch();
    let timeout = Duration::from_millis(100);
    let e = open_node0(dir.path(), timeout);
    let expected_path = ShmFabric::region_path(dir.path(), PEER, INDEX);
    assert!(
        matches!(&e, FabricError::Missing { path, waited } if *path == expected_path && *waited == timeout),
        "{e:?}"
    );
}

#[test]
fn a_file_of_another_owner_is_refused() {
    let dir = scratch();
    let path = craft(dir.path(), &good_header(), proper_len());
    let ours = std::fs::metadata(&path).expect("metadata").uid();
    let theirs = ours.wrapping_add(1);
    if let Err(e) = std::os::unix::fs::chown(&path, Some(theirs), None) {
        // Only a privileged user can give a file away.
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        eprintln!("skipped: cannot chown as uid {ours}: {e}");
        return;
    }
    let e = open_node0(dir.path(), Duration::from_secs(5));
    assert!(
        matches!(&e, FabricError::WrongOwner { path: p, found, expected }
            if *p == path && *found == theirs && *expected == ours),
        "{e:?}"
    );
}
