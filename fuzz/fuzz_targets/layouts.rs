//! Arbitrary bytes decoded as every remote-memory layout: ITEs, DTE headers,
//! region headers and tcp hellos must decode without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nessie::layout::dte::DteHeader;
use nessie::fabric::wire::frame::Hello;
use nessie::fabric::wire::region::{RegionHeader, REGION_HEADER_USED};
use nessie::layout::{Ite, DTE_HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    if data.len() >= 8 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&data[..8]);
        let ite = Ite(u64::from_le_bytes(w));
        let _ = (ite.kind(), ite.emptied(), ite.target());
    }
    if data.len() >= DTE_HEADER_BYTES {
        let h = DteHeader::decode(data);
        let _ = (h.state.status(), h.state.key_len(), h.state.value_len());
    }
    if data.len() >= REGION_HEADER_USED {
        let _ = RegionHeader::decode(data);
    }
    let _ = Hello::decode(data);
});
