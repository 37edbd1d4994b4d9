//! The distributed sort: 100-byte records with 10-byte keys, as in the
//! sort benchmark (gensort's format), range-partitioned, sorted by key.
//!
//! A generated record `j` of seed `s` is the 10 first bytes of
//! `xxh3_128(j, s)` (the key, uniform), `j` as 16 hex digits, 72 filler
//! letters derived from the hash, and `\r\n`. The same seed and size give
//! the same records whatever the number of tasks: map `i` of `n` generates
//! records `⌊i·N/n⌋ … ⌊(i+1)·N/n⌋ − 1` of `N = bytes / 100`.

use crate::digest::Digest;
use crate::input::{read_split, split_range, Align, Input};
use crate::job::{MapOutput, MapReduce, ReduceOutput, Reduced};
use crate::merge::kmerge_by;
use crate::partition::RangePartitioner;
use crate::JobError;
use twox_hash::XxHash3_128;

/// Bytes of a record.
pub const RECORD_BYTES: usize = 100;
/// Bytes of a record's key (its first bytes).
pub const KEY_BYTES: usize = 10;

/// One record.
pub type Record = [u8; RECORD_BYTES];

/// The key of a record (or of a record-sized slice).
#[must_use]
pub fn key(record: &[u8]) -> &[u8] {
    &record[..KEY_BYTES.min(record.len())]
}

/// Generated record `index` of seed `seed`.
#[must_use]
pub fn record(seed: u64, index: u64) -> Record {
    let h = XxHash3_128::oneshot_with_seed(seed, &index.to_le_bytes()).to_be_bytes();
    let mut r = [0u8; RECORD_BYTES];
    r[..KEY_BYTES].copy_from_slice(&h[..KEY_BYTES]);
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for (i, b) in r[KEY_BYTES..KEY_BYTES + 16].iter_mut().enumerate() {
        *b = HEX[((index >> (60 - 4 * i)) & 0xf) as usize];
    }
    for (i, b) in r[KEY_BYTES + 16..RECORD_BYTES - 2].iter_mut().enumerate() {
        *b = b'A' + (h[KEY_BYTES + i % 6].wrapping_add(i as u8)) % 26;
    }
    r[RECORD_BYTES - 2..].copy_from_slice(b"\r\n");
    r
}

/// Records `first .. first + count` of seed `seed`.
#[must_use]
pub fn generate(seed: u64, first: u64, count: u64) -> Vec<Record> {
    (first..first + count).map(|j| record(seed, j)).collect()
}

/// The distributed sort of `input`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sort {
    /// Generated records or files of 100-byte records.
    pub input: Input,
}

impl Sort {
    /// Map `task`'s records.
    fn split(&self, task: usize, tasks: usize) -> Result<Vec<Record>, JobError> {
        match &self.input {
            Input::Generated { bytes, seed } => {
                let (first, end) = split_range(bytes / RECORD_BYTES as u64, task, tasks);
                Ok(generate(*seed, first, end - first))
            }
            Input::Files { paths } => {
                let pieces = read_split(paths, task, tasks, Align::Records(RECORD_BYTES))?;
                Ok(pieces
                    .iter()
                    .flat_map(|p| p.chunks_exact(RECORD_BYTES))
                    .map(|c| {
                        let mut r = [0u8; RECORD_BYTES];
                        r.copy_from_slice(c);
                        r
                    })
                    .collect())
            }
        }
    }
}

impl MapReduce for Sort {
    fn name(&self) -> &'static str {
        "sort"
    }

    fn map(&self, task: usize, tasks: usize) -> Result<MapOutput, JobError> {
        let records = self.split(task, tasks)?;
        let digest = Digest::of(records.iter().map(|r| &r[..]));
        let input_bytes = (records.len() * RECORD_BYTES) as u64;
        let p = RangePartitioner::new(tasks);
        let mut buckets: Vec<Vec<Record>> = (0..tasks)
            .map(|_| Vec::with_capacity(records.len() / tasks + 16))
            .collect();
        for r in records {
            buckets[p.partition(key(&r))].push(r);
        }
        let partitions = buckets
            .into_iter()
            .map(|mut b| {
                b.sort_unstable_by(|x, y| key(x).cmp(key(y)));
                b.into_flattened()
            })
            .collect();
        Ok(MapOutput {
            partitions,
            digest,
            input_bytes,
        })
    }

    fn reduce(&self, task: usize, tasks: usize, runs: &[Vec<u8>]) -> Reduced {
        for (m, run) in runs.iter().enumerate() {
            if run.len() % RECORD_BYTES != 0 {
                return Err(JobError::malformed(
                    &format!("partition {m} of reducer {task}"),
                    "partition",
                    format!("{} bytes is not a whole number of records", run.len()),
                ));
            }
        }
        let p = RangePartitioner::new(tasks);
        let total: usize = runs.iter().map(Vec::len).sum();
        let mut output = Vec::with_capacity(total);
        let mut digest = Digest::default();
        let mut prev: Option<&[u8]> = None;
        let merged = kmerge_by(runs.iter().map(|r| r.chunks_exact(RECORD_BYTES)), |a, b| {
            key(a) < key(b)
        });
        for (index, rec) in merged.enumerate() {
            let k = key(rec);
            if prev.is_some_and(|p| p > k) {
                return Err(JobError::Unsorted {
                    task,
                    index: index as u64,
                });
            }
            let belongs = p.partition(k);
            if belongs != task {
                return Err(JobError::WrongPartition {
                    task,
                    index: index as u64,
                    belongs,
                });
            }
            digest.add(rec);
            output.extend_from_slice(rec);
            prev = Some(k);
        }
        let first_key = output.get(..KEY_BYTES).map(<[u8]>::to_vec);
        let last_key = output
            .len()
            .checked_sub(RECORD_BYTES)
            .map(|at| key(&output[at..]).to_vec());
        Ok(ReduceOutput {
            output,
            digest,
            first_key,
            last_key,
        })
    }

    fn ordered_across_reducers(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(bytes: u64) -> Sort {
        Sort {
            input: Input::Generated { bytes, seed: 42 },
        }
    }

    #[test]
    fn records_look_like_gensort_and_do_not_depend_on_the_split() {
        let r = record(1, 0x1234);
        assert_eq!(&r[KEY_BYTES..KEY_BYTES + 16], b"0000000000001234");
        assert_eq!(&r[98..], b"\r\n");
        assert!(r[26..98].iter().all(u8::is_ascii_uppercase));
        assert_eq!(generate(1, 5, 3)[1], record(1, 6));
        let sort = generated(100 * 1000);
        let whole: Vec<Record> = sort.split(0, 1).unwrap();
        let parts: Vec<Record> = (0..7).flat_map(|t| sort.split(t, 7).unwrap()).collect();
        assert_eq!(whole, parts);
    }

    #[test]
    fn map_then_reduce_sorts_and_keeps_every_record() {
        let sort = generated(100 * 5000);
        let tasks = 3;
        let maps: Vec<MapOutput> = (0..tasks).map(|t| sort.map(t, tasks).unwrap()).collect();
        let input: Digest = maps.iter().map(|m| m.digest).sum();
        assert_eq!(input.records, 5000);
        let mut all = Vec::new();
        let mut output = Digest::default();
        for r in 0..tasks {
            let runs: Vec<Vec<u8>> = maps.iter().map(|m| m.partitions[r].clone()).collect();
            let out = sort.reduce(r, tasks, &runs).unwrap();
            output += out.digest;
            all.extend_from_slice(&out.output);
        }
        assert_eq!(input, output);
        let keys: Vec<&[u8]> = all.chunks_exact(RECORD_BYTES).map(key).collect();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn bad_runs_are_reported() {
        let sort = generated(0);
        let rec = |first: u8| {
            let mut r = [0u8; RECORD_BYTES];
            r[0] = first;
            r.to_vec()
        };
        let e = sort.reduce(0, 1, &[vec![0u8; 150]]).unwrap_err();
        assert!(matches!(e, JobError::Malformed { .. }), "{e}");
        let unsorted = [rec(9), rec(3)].concat();
        let e = sort.reduce(0, 1, &[unsorted]).unwrap_err();
        assert!(matches!(e, JobError::Unsorted { task: 0, index: 1 }), "{e}");
        let e = sort.reduce(0, 2, &[rec(0xff)]).unwrap_err();
        assert!(
            matches!(e, JobError::WrongPartition { belongs: 1, .. }),
            "{e}"
        );
        let empty = sort.reduce(0, 2, &[vec![], vec![]]).unwrap();
        assert_eq!((empty.first_key, empty.last_key), (None, None));
    }
}
