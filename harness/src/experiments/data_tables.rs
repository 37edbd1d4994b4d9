//! CD's data tables in the reports of `compare` and `peers`: the most
//! slots each node ever had in use, beside the sizing rule for the load
//! the run measured.

use super::Done;
use crate::report::Table;

/// CD's data tables beside the sizing rule, per node and size class used:
/// the most slots in use at once against live entries plus the node's
/// measured PUT rate times the reuse window (`expiry + max_clock_skew`).
/// `None` when no run reported tables.
pub(crate) fn data_tables_table(done: &[Done]) -> Option<Table> {
    let mut t = Table::new(
        "data-tables",
        "CD's data tables: the most slots in use at once beside the sizing rule",
        &[
            "system",
            "node",
            "values up to B",
            "slots",
            "peak in use",
            "peak MB",
            "PUTs/s",
            "rule: live + PUTs/s × window",
            "peak / rule",
        ],
    );
    for d in done {
        let (Some(f), spec) = (d.figures(), &d.record.spec) else {
            continue;
        };
        // Live entries: each key's newest version is on the node of its
        // last writer, so about keys / nodes per node.
        let live = spec.workload.keys as f64 / spec.nodes.max(1) as f64;
        for n in &f.nodes {
            for c in &n.tables {
                let rule = live + n.put_ops_s * c.reuse_after.as_secs_f64();
                t.rows.push(vec![
                    d.name(),
                    n.node.to_string(),
                    c.value_capacity.to_string(),
                    c.slots.to_string(),
                    c.peak_in_use.to_string(),
                    format!("{:.1}", c.peak_in_use_bytes() as f64 / 1e6),
                    format!("{:.0}", n.put_ops_s),
                    format!("{rule:.0}"),
                    format!("{:.2}", c.peak_in_use as f64 / rule.max(1.0)),
                ]);
            }
        }
    }
    if t.rows.is_empty() {
        return None;
    }
    t.notes.push(
        "The peak counts the preload too, whose writes may replace a node's entries faster than the measured phase; a peak near or above the table's slots means PUTs waited for slots (see Config::data_bytes_for)."
            .to_owned(),
    );
    Some(t)
}
