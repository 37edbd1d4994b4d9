//! The tcp software NIC's frame decoder against arbitrary byte streams:
//! no panic, no memory touched without a well-formed frame, and every
//! answer it gives is a well-formed response frame. CI runs 100,000 cases
//! (`PROPTEST_CASES` overrides).

use nessie_fabric::conformance::serve_tcp_bytes as serve;
use nessie_fabric::wire::frame::{
    FrameHeader, VerbHeader, OP_CAS, OP_READ, OP_WRITE, REQUEST_MAGIC, RESPONSE_MAGIC,
};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

/// A stream that starts like a real request (right magic, plausible
/// counts), so the decoder gets past the first check, then turns arbitrary.
fn framed() -> impl Strategy<Value = Vec<u8>> {
    (
        0u32..4,
        0u64..512,
        proptest::collection::vec(
            (
                prop::sample::select(vec![OP_READ, OP_WRITE, OP_CAS, 0, 9]),
                0u16..3,
                0u64..5000,
                0u64..300,
            ),
            0..4,
        ),
        proptest::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(|(verbs, payload, heads, tail)| {
            let mut out = FrameHeader {
                magic: REQUEST_MAGIC,
                verbs,
                payload,
            }
            .encode()
            .to_vec();
            for (op, region, offset, len) in heads {
                VerbHeader {
                    op,
                    region,
                    offset,
                    len,
                }
                .encode_into(&mut out);
            }
            out.extend_from_slice(&tail);
            out
        })
}

fn responses_are_well_formed(frames: usize, out: &[u8]) -> Result<(), TestCaseError> {
    let mut rest = out;
    for _ in 0..frames {
        prop_assert!(rest.len() >= 16, "response shorter than its header");
        let mut h = [0u8; 16];
        h.copy_from_slice(&rest[..16]);
        let header = FrameHeader::decode(&h);
        prop_assert_eq!(header.magic, RESPONSE_MAGIC);
        let len = usize::try_from(header.payload).unwrap();
        prop_assert!(rest.len() >= 16 + len);
        rest = &rest[16 + len..];
    }
    prop_assert!(rest.is_empty(), "bytes beyond the answered frames");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (frames, out) = serve(&bytes);
        if bytes.len() < 4 || bytes[..4] != REQUEST_MAGIC.to_le_bytes() {
            prop_assert_eq!(frames, 0);
            prop_assert!(out.is_empty());
        }
        responses_are_well_formed(frames, &out)?;
    }

    #[test]
    fn request_shaped_bytes_never_panic(bytes in framed()) {
        let (frames, out) = serve(&bytes);
        responses_are_well_formed(frames, &out)?;
    }
}
