//! Expansion of compressed host lists, the form Slurm uses for node lists
//! (`node[01-03],gpu7`).

use crate::Error;

/// The most host names one host list may expand to. Slurm refuses larger
/// ranges too; a longer list is a malformed (or hostile) value, not a job.
pub const MAX_HOSTS: usize = 1 << 16;

/// The most digits one number of a bracket group may have (every such number
/// fits a `u64`).
const MAX_DIGITS: usize = 18;

/// One piece of a host list item: literal text or a bracket group.
enum Segment {
    Text(String),
    /// Ranges `(lo, hi, width)`: numbers `lo..=hi`, each zero-padded to
    /// `width` digits.
    Group(Vec<(u64, u64, usize)>),
}

/// Expands a compressed host list into host names, in order.
///
/// The list is a comma-separated sequence of items. An item is host name text
/// (ASCII letters, digits, `-`, `.`, `_`) with any number of bracket groups;
/// a group is a comma-separated list of numbers `n` and ranges `lo-hi`
/// (`lo <= hi`). Every number of a range is zero-padded to the width of its
/// `lo` as written, as Slurm does: `n[08-10]` is `n08,n09,n10` and
/// `n[010-100]` starts at `n010`. An item with several groups expands to
/// every combination, the first group varying slowest:
/// `r[1-2]n[1-2]` is `r1n1,r1n2,r2n1,r2n2`. Duplicates are kept.
///
/// ```
/// use nessie::bootstrap::expand_hostlist;
/// assert_eq!(
///     expand_hostlist("node[01-03],gpu7")?,
///     ["node01", "node02", "node03", "gpu7"]
/// );
/// # Ok::<(), nessie::Error>(())
/// ```
///
/// # Errors
/// [`Error::Config`] describing the first problem: an empty list or item, a
/// character a host name may not hold, an unbalanced or nested bracket, an
/// empty or reversed range, a number of more than 18 digits, or more than
/// [`MAX_HOSTS`] names in all.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, Error> {
    let items = parse(list).map_err(|m| Error::Config(format!("host list {list:?}: {m}")))?;
    let mut total: usize = 0;
    for item in &items {
        let mut count: usize = 1;
        for segment in item {
            if let Segment::Group(ranges) = segment {
                let group = ranges.iter().try_fold(0usize, |sum, &(lo, hi, _)| {
                    usize::try_from(hi - lo)
                        .ok()
                        .and_then(|n| n.checked_add(1))
                        .and_then(|n| sum.checked_add(n))
                });
                count = group
                    .and_then(|g| count.checked_mul(g))
                    .unwrap_or(usize::MAX);
            }
        }
        total = total.saturating_add(count);
    }
    if total > MAX_HOSTS {
        return Err(Error::Config(format!(
            "host list {list:?} names more than {MAX_HOSTS} hosts"
        )));
    }
    let mut hosts = Vec::with_capacity(total);
    for item in &items {
        let mut names = vec![String::new()];
        for segment in item {
            match segment {
                Segment::Text(text) => names.iter_mut().for_each(|n| n.push_str(text)),
                Segment::Group(ranges) => {
                    let mut next = Vec::new();
                    for name in &names {
                        for &(lo, hi, width) in ranges {
                            for number in lo..=hi {
                                next.push(format!("{name}{number:0width$}"));
                            }
                        }
                    }
                    names = next;
                }
            }
        }
        hosts.append(&mut names);
    }
    Ok(hosts)
}

/// Splits the list into items of segments, checking the syntax.
fn parse(list: &str) -> Result<Vec<Vec<Segment>>, String> {
    let mut items = Vec::new();
    let mut item: Vec<Segment> = Vec::new();
    let mut text = String::new();
    let mut chars = list.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            ',' => {
                if !text.is_empty() {
                    item.push(Segment::Text(std::mem::take(&mut text)));
                }
                if item.is_empty() {
                    return Err(format!("empty host name at byte {at}"));
                }
                items.push(std::mem::take(&mut item));
            }
            '[' => {
                if !text.is_empty() {
                    item.push(Segment::Text(std::mem::take(&mut text)));
                }
                let mut body = String::new();
                let closed = loop {
                    match chars.next() {
                        Some((_, ']')) => break true,
                        Some((_, '[')) => {
                            return Err(format!("nested '[' in the group at byte {at}"))
                        }
                        Some((_, c)) => body.push(c),
                        None => break false,
                    }
                };
                if !closed {
                    return Err(format!("'[' at byte {at} is never closed"));
                }
                item.push(Segment::Group(
                    group(&body).map_err(|m| format!("group [{body}]: {m}"))?,
                ));
            }
            ']' => return Err(format!("']' at byte {at} closes no group")),
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') => text.push(c),
            c => return Err(format!("{c:?} at byte {at} cannot be part of a host name")),
        }
    }
    if !text.is_empty() {
        item.push(Segment::Text(text));
    }
    if item.is_empty() {
        return Err(if list.is_empty() {
            "no host names".to_owned()
        } else {
            "empty host name at the end".to_owned()
        });
    }
    items.push(item);
    Ok(items)
}

/// Parses the inside of a bracket group: `1,3,05-07`.
fn group(body: &str) -> Result<Vec<(u64, u64, usize)>, String> {
    body.split(',')
        .map(|part| {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let width = lo.len();
            let (lo, hi) = (number(lo)?, number(hi)?);
            if lo > hi {
                return Err(format!("range {part:?} runs backwards"));
            }
            Ok((lo, hi, width))
        })
        .collect()
}

/// A run of 1 to 18 ASCII digits.
fn number(digits: &str) -> Result<u64, String> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{digits:?} is not a number"));
    }
    if digits.len() > MAX_DIGITS {
        return Err(format!("{digits:?} has more than {MAX_DIGITS} digits"));
    }
    digits.parse().map_err(|e| format!("{digits:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(list: &str) -> Vec<String> {
        expand_hostlist(list).unwrap_or_else(|e| panic!("{list:?}: {e}"))
    }

    fn bad(list: &str) -> String {
        match expand_hostlist(list) {
            Err(Error::Config(m)) => m,
            other => panic!("{list:?}: expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn plain_names_and_lists() {
        assert_eq!(ok("gpu7"), ["gpu7"]);
        assert_eq!(ok("a.example.org,b-2,c_3"), ["a.example.org", "b-2", "c_3"]);
        assert_eq!(ok("a,a"), ["a", "a"]);
    }

    #[test]
    fn ranges_keep_the_width_of_their_start() {
        assert_eq!(
            ok("node[01-03],gpu7"),
            ["node01", "node02", "node03", "gpu7"]
        );
        assert_eq!(ok("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(ok("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(ok("n[099-101]"), ["n099", "n100", "n101"]);
        assert_eq!(ok("n[010-100]")[..2], ["n010", "n011"]);
        assert_eq!(ok("n[010-100]").len(), 91);
        assert_eq!(ok("n[00-01]"), ["n00", "n01"]);
        assert_eq!(ok("n[007]"), ["n007"]);
        assert_eq!(ok("n[1,3,05-06]"), ["n1", "n3", "n05", "n06"]);
    }

    #[test]
    fn groups_with_text_around_and_between() {
        assert_eq!(ok("n[1-2]-ib"), ["n1-ib", "n2-ib"]);
        assert_eq!(ok("r[1-2]n[01-02]"), ["r1n01", "r1n02", "r2n01", "r2n02"]);
        assert_eq!(ok("[1-2]"), ["1", "2"]);
        assert_eq!(ok("a[1-2],b[3],c"), ["a1", "a2", "b3", "c"]);
    }

    #[test]
    fn malformed_lists_are_refused() {
        for list in [
            "",
            ",",
            "a,",
            ",a",
            "a,,b",
            "n[",
            "n[1-2",
            "n]",
            "n[1-2]]",
            "n[]",
            "n[1-]",
            "n[-2]",
            "n[a]",
            "n[3-1]",
            "n[1,,2]",
            "n[[1]]",
            "n 1",
            "n:1",
            "n[1-2-3]",
            "n[1234567890123456789]",
        ] {
            assert!(!bad(list).is_empty(), "{list:?}");
        }
        assert!(bad("n[3-1]").contains("backwards"));
        assert!(bad("n[1-2").contains("never closed"));
    }

    #[test]
    fn huge_lists_are_refused_before_expansion() {
        assert_eq!(ok("n[1-65536]").len(), MAX_HOSTS);
        assert!(bad("n[1-65537]").contains("more than"));
        assert!(bad("n[0-999999999999999999]").contains("more than"));
        assert!(bad("a[0-999999]b[0-999999]c[0-999999]").contains("more than"));
        assert!(bad("a[1-40000],b[1-40000]").contains("more than"));
    }
}
