//! The memory map's own checks: long batches, streamed writes.

use super::*;

fn map(words: usize) -> (MemoryMap, Vec<u64>) {
    let mut backing = vec![0u64; words];
    let mut map = MemoryMap::new(1);
    // SAFETY: `backing` is aligned, lives until the end of the test
    // (returned beside the map) and is only reached through the map.
    let memory = unsafe { RegionMemory::new(backing.as_mut_ptr(), words) };
    map.insert(0, RegionId(0), memory);
    (map, backing)
}

fn at(offset: u64) -> RemoteAddr {
    RemoteAddr {
        node: 0,
        region: RegionId(0),
        offset,
    }
}

/// A batch longer than the look-ahead runs in order across its chunks:
/// READs see the WRITEs before them, a CAS its word, a scatter READ its
/// bytes; a verb that does not resolve stops the batch there, after the
/// verbs before it and before those after it.
#[test]
fn a_long_batch_runs_in_order_and_stops_at_a_bad_verb() {
    let (map, _backing) = map(64);
    let n = ASKED_AHEAD + 4;
    let values: Vec<[u8; 8]> = (0..n as u64).map(|i| (i + 1).to_le_bytes()).collect();
    let mut writes: Vec<Verb<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Verb::Write {
            addr: at(8 * i as u64),
            data: v,
        })
        .collect();
    map.post(&mut writes).unwrap();
    let (mut first, mut head, mut tail) = ([0u8; 8], [0u8; 8], [0u8; 16]);
    let mut last = [0u8; 8];
    let mut batch = vec![
        Verb::Read {
            addr: at(0),
            buf: &mut first,
        },
        Verb::Cas {
            addr: at(8),
            expected: 2,
            new: 20,
            old: 0,
        },
    ];
    batch.extend((0..ASKED_AHEAD - 1).map(|_| Verb::Cas {
        addr: at(16),
        expected: 3,
        new: 30,
        old: 0,
    }));
    batch.push(Verb::ReadScatter {
        addr: at(8),
        head: &mut head,
        tail: &mut tail,
    });
    batch.push(Verb::Read {
        addr: at(64 * 8),
        buf: &mut last,
    });
    batch.push(Verb::Write {
        addr: at(0),
        data: &[9; 8],
    });
    let outcome = map.post(&mut batch);
    assert!(
        matches!(outcome, Err(FabricError::OutOfBounds { .. })),
        "{outcome:?}"
    );
    assert!(matches!(batch[1], Verb::Cas { old: 2, .. }));
    assert!(matches!(batch[2], Verb::Cas { old: 3, .. }));
    assert!(
        matches!(batch[3], Verb::Cas { old: 30, .. }),
        "the CAS before it took"
    );
    drop(batch);
    assert_eq!(u64::from_le_bytes(first), 1);
    assert_eq!(
        u64::from_le_bytes(head),
        20,
        "after the CAS in the chunk before"
    );
    assert_eq!(tail[..8], 30u64.to_le_bytes());
    assert_eq!(tail[8..], 4u64.to_le_bytes());
    let mut word = [0u8; 8];
    map.read(at(0), &mut word).unwrap();
    assert_eq!(
        u64::from_le_bytes(word),
        1,
        "the WRITE after the bad verb never ran"
    );
}

#[test]
fn a_streaming_write_lands_its_parts_one_after_the_other() {
    // Parts of 1, 4, 5 and 3 words cover the unrolled loop and its rest;
    // every split between cached and streamed parts, and a count past
    // the last part, land the same bytes. The part of 520 words makes the
    // first two splits stream (at least `STREAM_MIN_BYTES`), the next
    // ones write a short rest with ordinary stores.
    let parts: Vec<Vec<u8>> = [1usize, 520, 4, 5, 3, 0, 9]
        .iter()
        .enumerate()
        .map(|(i, &w)| (0..w * WORD).map(|b| (i * 31 + b) as u8).collect())
        .collect();
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    let all = parts.concat();
    for cached in 0..=parts.len() + 1 {
        let (map, _backing) = map(1024);
        map.write(at(0), &[0xee; 8 * WORD]).unwrap();
        map.write_streaming(at(8), &refs, cached).unwrap();
        let mut back = vec![0u8; WORD + all.len() + 2 * WORD];
        map.read(at(0), &mut back).unwrap();
        assert_eq!(&back[..WORD], &[0xee; WORD], "the word before is untouched");
        assert_eq!(&back[WORD..WORD + all.len()], &all[..], "{cached} cached");
        assert_eq!(
            &back[WORD + all.len()..],
            &[0; 2 * WORD][..],
            "nor after it"
        );
    }
}

/// A streaming WRITE streams only runs of at least `STREAM_MIN_BYTES`
/// past its cached parts; a shorter rest goes through the cache too.
#[cfg(target_arch = "x86_64")]
#[test]
fn only_a_long_rest_is_streamed() {
    let head = [0u8; 64];
    let big = vec![0u8; STREAM_MIN_BYTES];
    let short = vec![0u8; STREAM_MIN_BYTES - WORD];
    assert_eq!(parts_to_cache(&[&head, &big], 1), 1, "exactly the minimum");
    assert_eq!(parts_to_cache(&[&head, &short], 1), 2, "a word short");
    assert_eq!(parts_to_cache(&[&head, &short, &[0; WORD]], 1), 1);
    assert_eq!(parts_to_cache(&[&big, &head], 0), 0);
    assert_eq!(parts_to_cache(&[&big, &head], 1), 2);
    assert_eq!(parts_to_cache(&[&head], 5), 1, "at most all");
}

#[test]
fn a_streaming_write_is_checked_like_a_write() {
    let (map, _backing) = map(16);
    let word = [1u8; WORD];
    assert!(matches!(
        map.write_streaming(at(8), &[&word, &[1, 2, 3]], 1),
        Err(FabricError::Misaligned { .. })
    ));
    assert!(matches!(
        map.write_streaming(at(4), &[&word], 0),
        Err(FabricError::Misaligned { .. })
    ));
    assert!(matches!(
        map.write_streaming(at(15 * 8), &[&word, &word], 1),
        Err(FabricError::OutOfBounds { .. })
    ));
    let mut back = [0u8; 16 * WORD];
    map.read(at(0), &mut back).unwrap();
    assert!(
        back.iter().all(|&b| b == 0),
        "a refused write changes nothing"
    );
}
