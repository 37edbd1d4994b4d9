//! The C API called from Rust as C would call it.

use super::*;
use std::ptr;

const SMALL: &CStr = c"index_slots_per_node = 1024\ndata_bytes_per_node = 8388608\n";

fn last_error() -> String {
    // SAFETY: nessie_last_error returns a NUL-terminated string owned by
    // this thread's slot, read before the next call.
    unsafe { CStr::from_ptr(nessie_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn local() -> *mut NessieCluster {
    let mut cluster = ptr::null_mut();
    // SAFETY: a valid C string and a writable out pointer.
    let status = unsafe { nessie_cluster_local(SMALL.as_ptr(), &raw mut cluster) };
    assert_eq!(status, NessieStatus::NessieOk, "{}", last_error());
    cluster
}

fn client(cluster: *mut NessieCluster, node: usize) -> *mut NessieClient {
    let mut c = ptr::null_mut();
    // SAFETY: a live cluster and a writable out pointer.
    let status = unsafe { nessie_cluster_client(cluster, node, &raw mut c) };
    assert_eq!(status, NessieStatus::NessieOk, "{}", last_error());
    c
}

#[test]
fn put_get_delete_through_the_c_functions() {
    let cluster = local();
    let (a, b) = (client(cluster, 0), client(cluster, 2));
    let mut buf = [0u8; 64];
    let mut len = 99;
    // SAFETY: live handles, and pointers to live buffers of the lengths
    // given, in every call below.
    unsafe {
        assert_eq!(
            nessie_client_put(a, b"key".as_ptr(), 3, b"value".as_ptr(), 5),
            NessieStatus::NessieOk
        );
        assert_eq!(
            nessie_client_get(b, b"key".as_ptr(), 3, buf.as_mut_ptr(), 64, &raw mut len),
            NessieStatus::NessieOk
        );
        assert_eq!(&buf[..len], b"value");
        let mut existed = false;
        assert_eq!(
            nessie_client_delete(b, b"key".as_ptr(), 3, &raw mut existed),
            NessieStatus::NessieOk
        );
        assert!(existed);
        assert_eq!(
            nessie_client_get(a, b"key".as_ptr(), 3, buf.as_mut_ptr(), 64, &raw mut len),
            NessieStatus::NessieNotFound
        );
        assert_eq!(len, 0);
        // An empty value from a NULL pointer.
        assert_eq!(
            nessie_client_put(a, b"e".as_ptr(), 1, ptr::null(), 0),
            NessieStatus::NessieOk
        );
        assert_eq!(
            nessie_client_get(a, b"e".as_ptr(), 1, ptr::null_mut(), 0, &raw mut len),
            NessieStatus::NessieOk
        );
        assert_eq!(len, 0);
        nessie_client_free(a);
        nessie_client_free(b);
        nessie_cluster_free(cluster);
    }
}

#[test]
fn a_buffer_too_small_reports_the_length_needed() {
    let cluster = local();
    let c = client(cluster, 1);
    let value = [7u8; 300];
    let mut small = [0u8; 10];
    let mut len = 0;
    // SAFETY: live handles and buffers of the lengths given.
    unsafe {
        nessie_client_put(c, b"k".as_ptr(), 1, value.as_ptr(), value.len());
        assert_eq!(
            nessie_client_get(c, b"k".as_ptr(), 1, small.as_mut_ptr(), 10, &raw mut len),
            NessieStatus::NessieBufferTooSmall
        );
        assert_eq!(len, 300);
        assert_eq!(small, [0; 10]);
        assert!(last_error().contains("300"), "{}", last_error());
        nessie_client_free(c);
        nessie_cluster_free(cluster);
    }
}

#[test]
fn errors_are_codes_with_messages() {
    let cluster = local();
    let c = client(cluster, 0);
    let mut len = 0;
    let mut out = ptr::null_mut();
    let mut cl = ptr::null_mut();
    let mut nd = ptr::null_mut();
    // SAFETY: live handles; the NULL pointers are the point of the test
    // and are checked before use.
    unsafe {
        assert_eq!(
            nessie_client_put(c, ptr::null(), 0, ptr::null(), 0),
            NessieStatus::NessieEmptyKey
        );
        assert_eq!(last_error(), "key is empty");
        assert_eq!(
            nessie_client_put(c, ptr::null(), 5, ptr::null(), 0),
            NessieStatus::NessieInvalidArgument
        );
        assert_eq!(
            nessie_client_get(c, b"k".as_ptr(), 1, ptr::null_mut(), 0, ptr::null_mut()),
            NessieStatus::NessieInvalidArgument
        );
        assert_eq!(
            nessie_client_get(
                ptr::null_mut(),
                b"k".as_ptr(),
                1,
                ptr::null_mut(),
                0,
                &raw mut len
            ),
            NessieStatus::NessieInvalidArgument
        );
        assert_eq!(last_error(), "client must not be NULL");
        let long = [b'k'; 200];
        assert_eq!(
            nessie_client_delete(c, long.as_ptr(), long.len(), ptr::null_mut()),
            NessieStatus::NessieKeyTooLarge
        );
        assert_eq!(
            nessie_cluster_client(cluster, 3, &raw mut out),
            NessieStatus::NessieConfig
        );
        assert_eq!(
            nessie_cluster_local(c"nodes = 0".as_ptr(), &raw mut cl),
            NessieStatus::NessieConfig
        );
        assert!(last_error().contains("nodes"), "{}", last_error());
        assert_eq!(
            nessie_node_start(SMALL.as_ptr(), 0, &raw mut nd),
            NessieStatus::NessieConfig
        );
        assert_eq!(
            nessie_node_from_launcher(ptr::null(), c"pigeon".as_ptr(), &raw mut nd),
            NessieStatus::NessieConfig
        );
        assert_eq!(nessie_node_id(ptr::null()), usize::MAX);
        assert_eq!(nessie_node_count(ptr::null()), 0);
        nessie_client_free(ptr::null_mut());
        nessie_node_free(ptr::null_mut());
        nessie_client_free(c);
        nessie_cluster_free(cluster);
    }
}

#[test]
fn every_status_has_its_header_name() {
    for (code, status) in NessieStatus::ALL.iter().enumerate() {
        assert_eq!(*status as usize, code);
        // SAFETY: the name is a static C string.
        let name = unsafe { CStr::from_ptr(nessie_status_name(code as i32)) };
        assert_eq!(name, status.name());
    }
    // SAFETY: as above.
    let unknown = unsafe { CStr::from_ptr(nessie_status_name(-1)) };
    assert_eq!(unknown, c"NESSIE_UNKNOWN");
}

#[test]
fn a_panic_becomes_a_status() {
    let status = guard(|| panic!("deliberate"));
    assert_eq!(status, NessieStatus::NessiePanic);
    assert!(last_error().contains("deliberate"));
}
