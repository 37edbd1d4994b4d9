//! Arbitrary byte streams into the tcp software NIC's frame decoder:
//! `cargo +nightly fuzz run tcp_frames` (from this directory's parent).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nessie_fabric::conformance::serve_tcp_bytes(data);
});
