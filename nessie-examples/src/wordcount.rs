//! Word count on the same engine as the sort: maps count the words of
//! their split (a combiner), send each word to `hash(word) mod reducers`
//! as runs sorted by word, and reducers merge the runs, adding up the
//! counts of equal words.
//!
//! Words are maximal runs of non-whitespace bytes (ASCII whitespace
//! separates them). A run is a sequence of entries `[u32 LE length][word]
//! [u64 LE count]`, sorted by word, no word twice; the output is text, one
//! `word count` line per word, sorted by word within each reducer.
//!
//! Validation: maps digest every word occurrence, reducers digest each word
//! `count` times ([`Digest::add_times`]), so the totals agree exactly when
//! every occurrence was counted once; reducers also check that their words
//! are strictly increasing and hash to them.
//!
//! Generated text draws words from a vocabulary of [`VOCABULARY`]
//! pseudo-words with a Zipf-like skew (rank `⌊V^u⌋ − 1` for uniform `u`),
//! separated by spaces and a newline every 16 words.

use crate::digest::Digest;
use crate::input::{read_split, Align, Input};
use crate::job::{MapOutput, MapReduce, ReduceOutput, Reduced};
use crate::merge::kmerge_by;
use crate::partition::HashPartitioner;
use crate::JobError;
use std::collections::HashMap;
use std::fmt::Write as _;
use twox_hash::XxHash3_64;

/// Distinct words of generated text.
pub const VOCABULARY: u64 = 100_000;

/// Seed of the partitioning hash.
const PARTITION_SEED: u64 = 0x05ee_d0f0_c0de;

/// Pseudo-word of rank `rank`: 2 to 9 lowercase letters.
#[must_use]
pub fn word(seed: u64, rank: u64) -> Vec<u8> {
    let h = XxHash3_64::oneshot_with_seed(seed ^ 0x0077_6f72_6473, &rank.to_le_bytes());
    let len = 2 + (h % 8) as usize;
    (0..len)
        .map(|i| b'a' + ((h >> (8 + 5 * i)) % 26) as u8)
        .collect()
}

/// About `bytes` bytes of generated text for map `task`.
#[must_use]
pub fn generate_text(seed: u64, task: usize, bytes: u64) -> Vec<u8> {
    let mut text = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0).min(1 << 30) + 16);
    let vocab: Vec<Vec<u8>> = (0..VOCABULARY.min(4096)).map(|r| word(seed, r)).collect();
    let mut i = 0u64;
    let stream = seed ^ (task as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    while (text.len() as u64) < bytes {
        let h = XxHash3_64::oneshot_with_seed(stream, &i.to_le_bytes());
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        let rank = ((VOCABULARY as f64).powf(u) as u64).saturating_sub(1);
        match vocab.get(rank as usize) {
            Some(w) => text.extend_from_slice(w),
            None => text.extend_from_slice(&word(seed, rank)),
        }
        i += 1;
        text.push(if i % 16 == 0 { b'\n' } else { b' ' });
    }
    text
}

/// The words of `text`.
pub fn words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
}

/// Appends one run entry.
fn encode(out: &mut Vec<u8>, word: &[u8], count: u64) {
    out.extend_from_slice(&(word.len() as u32).to_le_bytes());
    out.extend_from_slice(word);
    out.extend_from_slice(&count.to_le_bytes());
}

/// The entries of a run, checked.
fn decode<'a>(what: &str, mut run: &'a [u8]) -> Result<Vec<(&'a [u8], u64)>, JobError> {
    let bad = |why: &str| JobError::malformed(what, "word-count run", why);
    let mut entries = Vec::new();
    while !run.is_empty() {
        let len = run
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| bad("truncated length"))?;
        let word = run.get(4..4 + len).ok_or_else(|| bad("truncated word"))?;
        let count = run
            .get(4 + len..12 + len)
            .map(|b| {
                let mut c = [0u8; 8];
                c.copy_from_slice(b);
                u64::from_le_bytes(c)
            })
            .ok_or_else(|| bad("truncated count"))?;
        entries.push((word, count));
        run = &run[12 + len..];
    }
    Ok(entries)
}

/// Word count of `input`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WordCount {
    /// Generated text or text files.
    pub input: Input,
}

impl WordCount {
    /// Map `task`'s text, in pieces.
    fn split(&self, task: usize, tasks: usize) -> Result<Vec<Vec<u8>>, JobError> {
        match &self.input {
            Input::Generated { bytes, seed } => {
                let (start, end) = crate::input::split_range(*bytes, task, tasks);
                Ok(vec![generate_text(*seed, task, end - start)])
            }
            Input::Files { paths } => read_split(paths, task, tasks, Align::Words),
        }
    }
}

impl MapReduce for WordCount {
    fn name(&self) -> &'static str {
        "wordcount"
    }

    fn map(&self, task: usize, tasks: usize) -> Result<MapOutput, JobError> {
        let pieces = self.split(task, tasks)?;
        let mut counts: HashMap<&[u8], u64> = HashMap::new();
        for piece in &pieces {
            for w in words(piece) {
                *counts.entry(w).or_insert(0) += 1;
            }
        }
        let mut digest = Digest::default();
        let p = HashPartitioner::new(tasks, PARTITION_SEED);
        let mut buckets: Vec<Vec<(&[u8], u64)>> = vec![Vec::new(); tasks];
        for (w, c) in counts {
            digest.add_times(w, c);
            buckets[p.partition(w)].push((w, c));
        }
        let partitions = buckets
            .into_iter()
            .map(|mut b| {
                b.sort_unstable();
                let mut run = Vec::new();
                for (w, c) in b {
                    encode(&mut run, w, c);
                }
                run
            })
            .collect();
        Ok(MapOutput {
            partitions,
            digest,
            input_bytes: pieces.iter().map(|p| p.len() as u64).sum(),
        })
    }

    fn reduce(&self, task: usize, tasks: usize, runs: &[Vec<u8>]) -> Reduced {
        let decoded = runs
            .iter()
            .enumerate()
            .map(|(m, r)| decode(&format!("partition {m} of reducer {task}"), r))
            .collect::<Result<Vec<_>, _>>()?;
        let p = HashPartitioner::new(tasks, PARTITION_SEED);
        let mut merged = kmerge_by(decoded, |a, b| a.0 < b.0).peekable();
        let mut output = String::new();
        let mut digest = Digest::default();
        let mut prev: Option<&[u8]> = None;
        let mut index = 0u64;
        while let Some((w, mut count)) = merged.next() {
            while let Some((_, c)) = merged.next_if(|(next, _)| *next == w) {
                count = count.wrapping_add(c);
            }
            if prev.is_some_and(|p| p >= w) {
                return Err(JobError::Unsorted { task, index });
            }
            let belongs = p.partition(w);
            if belongs != task {
                return Err(JobError::WrongPartition {
                    task,
                    index,
                    belongs,
                });
            }
            digest.add_times(w, count);
            let _ = writeln!(output, "{} {count}", String::from_utf8_lossy(w));
            prev = Some(w);
            index += 1;
        }
        Ok(ReduceOutput {
            output: output.into_bytes(),
            digest,
            first_key: None,
            last_key: None,
        })
    }

    fn ordered_across_reducers(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_across_maps_and_reducers() {
        let wc = WordCount {
            input: Input::Generated {
                bytes: 200_000,
                seed: 3,
            },
        };
        let tasks = 3;
        let maps: Vec<MapOutput> = (0..tasks).map(|t| wc.map(t, tasks).unwrap()).collect();
        let input: Digest = maps.iter().map(|m| m.digest).sum();
        let mut output = Digest::default();
        let mut total = 0u64;
        for r in 0..tasks {
            let runs: Vec<Vec<u8>> = maps.iter().map(|m| m.partitions[r].clone()).collect();
            let out = wc.reduce(r, tasks, &runs).unwrap();
            output += out.digest;
            for line in String::from_utf8(out.output).unwrap().lines() {
                total += line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap();
            }
        }
        assert_eq!(input, output);
        assert_eq!(total, input.records);
        assert!(input.records > 20_000);
    }

    #[test]
    fn reducers_merge_equal_words_and_refuse_bad_runs() {
        let wc = WordCount {
            input: Input::Generated { bytes: 0, seed: 0 },
        };
        let mut a = Vec::new();
        encode(&mut a, b"x", 2);
        encode(&mut a, b"y", 1);
        let mut b = Vec::new();
        encode(&mut b, b"x", 3);
        let out = wc.reduce(0, 1, &[a.clone(), b]).unwrap();
        assert_eq!(out.output, b"x 5\ny 1\n");
        assert_eq!(out.digest.records, 6);

        let e = wc.reduce(0, 1, &[a[..a.len() - 1].to_vec()]).unwrap_err();
        assert!(matches!(e, JobError::Malformed { .. }), "{e}");
        let mut unsorted = Vec::new();
        encode(&mut unsorted, b"y", 1);
        encode(&mut unsorted, b"x", 1);
        let e = wc.reduce(0, 1, &[unsorted]).unwrap_err();
        assert!(matches!(e, JobError::Unsorted { .. }), "{e}");
        let p = HashPartitioner::new(2, PARTITION_SEED);
        let other = usize::from(p.partition(b"x") == 0);
        let e = wc.reduce(other, 2, &[a, Vec::new()]).unwrap_err();
        assert!(matches!(e, JobError::WrongPartition { .. }), "{e}");
    }
}
