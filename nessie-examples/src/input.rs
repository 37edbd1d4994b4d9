//! Where a map task's input comes from: generated from a seed, or a byte
//! range of a list of files (the concatenation of the files, cut into
//! `tasks` near-equal ranges, with boundaries moved to whole records or
//! whole words).

use crate::JobError;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// A job's input, shared by every map task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Input {
    /// About `bytes` bytes over all maps, generated from `seed` (the same
    /// data for the same seed and size).
    Generated {
        /// Total input bytes.
        bytes: u64,
        /// Seed.
        seed: u64,
    },
    /// Files, split among the maps by byte ranges.
    Files {
        /// The files, in order.
        paths: Vec<PathBuf>,
    },
}

/// How split boundaries are moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// To multiples of a fixed record size (every file must be a whole
    /// number of records).
    Records(usize),
    /// To word boundaries: a word belongs to the split holding its first
    /// byte; a split skips a word begun before it and finishes one it
    /// begins. File ends are word boundaries.
    Words,
}

/// The byte range `[start, end)` of `total` that task `task` of `tasks`
/// reads (before alignment).
#[must_use]
pub fn split_range(total: u64, task: usize, tasks: usize) -> (u64, u64) {
    let tasks = tasks.max(1) as u128;
    let at = |t: u128| (u128::from(total) * t / tasks) as u64;
    (at(task as u128), at(task as u128 + 1))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JobError + '_ {
    move |e| JobError::io(path)(e)
}

/// Reads task `task`'s split of the concatenation of `paths`: one piece per
/// file it touches.
///
/// # Errors
/// [`JobError::Io`] if a file cannot be read; [`JobError::Input`] if a file
/// is not a whole number of records under [`Align::Records`].
pub fn read_split(
    paths: &[PathBuf],
    task: usize,
    tasks: usize,
    align: Align,
) -> Result<Vec<Vec<u8>>, JobError> {
    let mut sizes = Vec::with_capacity(paths.len());
    for p in paths {
        let len = std::fs::metadata(p).map_err(io(p))?.len();
        if let Align::Records(n) = align {
            if n == 0 || len % n as u64 != 0 {
                return Err(JobError::Input {
                    path: p.clone(),
                    why: format!("{len} bytes is not a whole number of {n}-byte records"),
                });
            }
        }
        sizes.push(len);
    }
    let total: u64 = sizes.iter().sum();
    let (mut start, mut end) = split_range(total, task, tasks);
    if let Align::Records(n) = align {
        let n = n as u64;
        start -= start % n;
        end -= end % n;
    }
    let mut pieces = Vec::new();
    let mut file_start = 0u64;
    for (path, &size) in paths.iter().zip(&sizes) {
        let file_end = file_start + size;
        let (lo, hi) = (start.max(file_start), end.min(file_end));
        if lo < hi {
            let piece = match align {
                Align::Records(_) => read_range(path, lo - file_start, hi - file_start)?,
                Align::Words => read_words(
                    path,
                    lo - file_start,
                    hi - file_start,
                    lo > file_start,
                    hi < file_end,
                )?,
            };
            if !piece.is_empty() {
                pieces.push(piece);
            }
        }
        file_start = file_end;
    }
    Ok(pieces)
}

fn read_range(path: &Path, from: u64, to: u64) -> Result<Vec<u8>, JobError> {
    let mut f = File::open(path).map_err(io(path))?;
    f.seek(SeekFrom::Start(from)).map_err(io(path))?;
    let len = usize::try_from(to - from).map_err(|_| JobError::Input {
        path: path.to_owned(),
        why: "split larger than the address space".into(),
    })?;
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).map_err(io(path))?;
    Ok(buf)
}

/// Reads `[from, to)` of one file, moved to word boundaries: `cut_start`
/// when `from` is not the file's start, `cut_end` when `to` is not its end.
fn read_words(
    path: &Path,
    from: u64,
    to: u64,
    cut_start: bool,
    cut_end: bool,
) -> Result<Vec<u8>, JobError> {
    let mut buf = read_range(path, if cut_start { from - 1 } else { from }, to)?;
    if cut_start {
        let before = buf.remove(0);
        if !before.is_ascii_whitespace() {
            // The word at `from` began in the previous split, which
            // finishes it.
            match buf.iter().position(u8::is_ascii_whitespace) {
                Some(k) => {
                    buf.drain(..k);
                }
                None => return Ok(Vec::new()),
            }
        }
    }
    if cut_end && buf.last().is_some_and(|b| !b.is_ascii_whitespace()) {
        // Finish the word this split began.
        let mut f = File::open(path).map_err(io(path))?;
        f.seek(SeekFrom::Start(to)).map_err(io(path))?;
        let mut block = [0u8; 4096];
        loop {
            let n = f.read(&mut block).map_err(io(path))?;
            if n == 0 {
                break;
            }
            match block[..n].iter().position(u8::is_ascii_whitespace) {
                Some(k) => {
                    buf.extend_from_slice(&block[..k]);
                    break;
                }
                None => buf.extend_from_slice(&block[..n]),
            }
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pieces: &[Vec<u8>]) -> Vec<String> {
        pieces
            .iter()
            .flat_map(|p| p.split(u8::is_ascii_whitespace))
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect()
    }

    #[test]
    fn ranges_cover_everything_once() {
        for tasks in 1..7 {
            let mut at = 0;
            for t in 0..tasks {
                let (s, e) = split_range(1001, t, tasks);
                assert_eq!(s, at);
                at = e;
            }
            assert_eq!(at, 1001);
        }
    }

    #[test]
    fn every_word_is_read_by_exactly_one_split() {
        let dir = tempfile::tempdir().unwrap();
        let texts = [
            "alpha beta  gamma\ndelta epsilon zeta eta theta",
            "iota",
            "",
            "  kappa lambda mu nu xi omicron pi rho sigma tau upsilon  ",
            "phi chi psi omega",
        ];
        let paths: Vec<PathBuf> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, t).unwrap();
                p
            })
            .collect();
        let all: Vec<String> = texts
            .iter()
            .flat_map(|t| t.split_ascii_whitespace())
            .map(str::to_owned)
            .collect();
        for tasks in 1..40 {
            let mut got = Vec::new();
            for t in 0..tasks {
                got.extend(words(&read_split(&paths, t, tasks, Align::Words).unwrap()));
            }
            assert_eq!(got, all, "{tasks} tasks");
        }
    }

    #[test]
    fn record_splits_are_whole_records() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, (0..70u8).collect::<Vec<_>>()).unwrap();
        std::fs::write(&b, (70..100u8).collect::<Vec<_>>()).unwrap();
        let paths = vec![a.clone(), b];
        for tasks in 1..12 {
            let mut all = Vec::new();
            for t in 0..tasks {
                for piece in read_split(&paths, t, tasks, Align::Records(10)).unwrap() {
                    assert_eq!(piece.len() % 10, 0);
                    all.extend(piece);
                }
            }
            assert_eq!(all, (0..100u8).collect::<Vec<_>>());
        }
        let e = read_split(&[a], 0, 1, Align::Records(100)).unwrap_err();
        assert!(matches!(e, JobError::Input { .. }), "{e}");
        let e = read_split(&[dir.path().join("none")], 0, 1, Align::Words).unwrap_err();
        assert!(matches!(e, JobError::Io { .. }), "{e}");
    }
}
