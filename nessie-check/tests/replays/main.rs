//! Fixed schedules replayed step by step on the real implementation
//! (`nessie_check::scripted`), one module per source of schedules: the
//! model checkers' counterexamples, the reviews' schedules, the recycling
//! and reverse-pass races, the scan window, the time boundaries, write
//! races and MIGRATE chains. One test binary, so that they link once.
//!
//! Run one module: `cargo test -p nessie-check --test replays review_schedules`.

mod migrate_chains;
mod model_counterexamples;
mod recycling_schedules;
mod replicas;
mod reverse_pass_schedules;
mod review_schedules;
mod scan_window;
mod time_boundaries;
mod write_races;
