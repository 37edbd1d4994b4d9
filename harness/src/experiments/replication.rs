//! `--replicas` in `compare` and `peers`: the client-driven store's runs
//! with a replica count ([`nessie::Config::replicas`]), and the report of
//! what replication costs — CD at r = 1 and at r = N in the same
//! experiment, their runs interleaved, side by side with the ratio.
//!
//! SD, HY and the peers keep one copy of everything; their runs are planned
//! as without the flag, and the summary's `r` column says they are
//! unreplicated.

use super::summary::median;
use super::{Ctx, Done};
use crate::error::{HarnessError, Result};
use crate::measure::RunFigures;
use crate::report::{num, Report, Table};
use crate::spec::{check_replicas, RunSpec};
use crate::workload::WorkloadSpec;
use nessie_examples::StoreKind;

/// What an experiment was asked to replicate: CD at each of `levels`,
/// `rounds` times over, runs of one round back to back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replication {
    /// The replica counts CD runs at, in the order of a round.
    pub levels: Vec<usize>,
    /// How many times each level runs.
    pub rounds: usize,
}

impl Replication {
    /// `compare --replicas N`: r = 1 beside r = N (only r = 1 for N = 1),
    /// `rounds` times, after checking that `nodes` can hold N copies and
    /// that `systems` has CD.
    ///
    /// # Errors
    /// [`HarnessError::Replicas`] for N copies on too few nodes;
    /// [`HarnessError::Usage`] without CD among `systems`.
    pub fn side_by_side(
        replicas: usize,
        rounds: usize,
        nodes: usize,
        systems: &[StoreKind],
    ) -> Result<Self> {
        let levels = if replicas > 1 {
            vec![1, replicas]
        } else {
            vec![1]
        };
        Self::checked(levels, rounds, replicas, nodes, systems)
    }

    /// `peers --replicas N`: CD at r = N, once.
    ///
    /// # Errors
    /// As [`Replication::side_by_side`].
    pub fn only(replicas: usize, nodes: usize, systems: &[StoreKind]) -> Result<Self> {
        Self::checked(vec![replicas], 1, replicas, nodes, systems)
    }

    fn checked(
        levels: Vec<usize>,
        rounds: usize,
        replicas: usize,
        nodes: usize,
        systems: &[StoreKind],
    ) -> Result<Self> {
        check_replicas(replicas, nodes)?;
        if !systems.contains(&StoreKind::Cd) {
            return Err(HarnessError::Usage(
                "--replicas sets the client-driven store's copies, and --systems leaves CD out"
                    .into(),
            ));
        }
        Ok(Replication {
            levels,
            rounds: rounds.max(1),
        })
    }

    /// The highest replica count, the one r = 1 is held against.
    #[must_use]
    pub fn top(&self) -> usize {
        self.levels.iter().copied().max().unwrap_or(1)
    }

    /// The label of CD's run at `r` in round `round` (from 0): `CD r=2`,
    /// and `CD r=2 #2` from the second round on.
    #[must_use]
    pub fn label(&self, r: usize, round: usize) -> String {
        if round == 0 {
            format!("CD r={r}")
        } else {
            format!("CD r={r} #{}", round + 1)
        }
    }

    /// The runs: each system of `systems` once, in order, except CD, which
    /// runs at every level in every round (the levels of a round back to
    /// back, so that a drift of the host's load falls on all of them).
    #[must_use]
    pub fn specs(
        &self,
        ctx: &Ctx,
        workload: &WorkloadSpec,
        systems: &[StoreKind],
        duration_ms: u64,
    ) -> Vec<RunSpec> {
        let mut specs = Vec::new();
        for &system in systems {
            if system != StoreKind::Cd {
                specs.push(ctx.spec(
                    system.label().to_owned(),
                    system,
                    workload.clone(),
                    duration_ms,
                ));
                continue;
            }
            for round in 0..self.rounds {
                for &r in &self.levels {
                    let mut spec =
                        ctx.spec(self.label(r, round), system, workload.clone(), duration_ms);
                    spec.replicas = Some(r);
                    specs.push(spec);
                }
            }
        }
        specs
    }

    /// The report and runs of an experiment that runs `workload` on each
    /// of `systems`, CD as [`Replication::specs`] plans it; the report's
    /// parameters are those of [`Ctx::one_run_each`] and the replication.
    pub fn plan(
        &self,
        ctx: &Ctx,
        experiment: &str,
        title: &str,
        workload: &WorkloadSpec,
        systems: &[StoreKind],
        duration_ms: u64,
    ) -> (Report, Vec<RunSpec>) {
        let report = ctx.report(
            experiment,
            title,
            serde_json::json!({
                "workload": workload,
                "systems": systems,
                "duration_ms": duration_ms,
                "replicas": self.levels,
                "replica_rounds": self.rounds,
            }),
        );
        (report, self.specs(ctx, workload, systems, duration_ms))
    }
}

/// CD's measured runs at `r`.
fn cd_at(done: &[Done], r: usize) -> Vec<&RunFigures> {
    done.iter()
        .filter(|d| d.record.system == StoreKind::Cd && d.record.spec.replicas == Some(r))
        .filter_map(Done::figures)
        .collect()
}

/// The cost table's figures of one set of runs (medians over them).
fn figures(runs: &[&RunFigures]) -> Option<[f64; 11]> {
    if runs.is_empty() {
        return None;
    }
    let m = |get: fn(&RunFigures) -> f64| median(runs.iter().map(|f| get(f)).collect());
    Some([
        m(|f| f.throughput_ops_s / 1e3),
        m(|f| f.get.p50_us),
        m(|f| f.get.p99_us),
        m(|f| f.put.p50_us),
        m(|f| f.put.p99_us),
        m(|f| f.get.remote_bytes_per_op),
        m(|f| f.put.remote_bytes_per_op),
        m(|f| f.all.remote_bytes_per_op),
        m(|f| f.get.round_trips_per_op),
        m(|f| f.put.round_trips_per_op),
        m(|f| f.all.round_trips_per_op),
    ])
}

/// The cost of replication: CD's figures at r = 1 and at the top level of
/// `replication`, each the median of its rounds, and their ratio. `None`
/// without two levels.
#[must_use]
pub fn cost_table(done: &[Done], replication: &Replication) -> Option<Table> {
    let top = replication.top();
    if top == 1 {
        return None;
    }
    let mut t = Table::new(
        "replication",
        &format!(
            "Cost of replication: CD with r = 1 and r = {top} on the same workload, runs interleaved"
        ),
        &[
            "r",
            "runs",
            "kops/s",
            "GET p50 µs",
            "GET p99 µs",
            "PUT p50 µs",
            "PUT p99 µs",
            "net B/GET",
            "net B/PUT",
            "net B/op",
            "round trips/GET",
            "round trips/PUT",
            "round trips/op",
        ],
    );
    let (one, many) = (cd_at(done, 1), cd_at(done, top));
    let planned = replication.rounds.to_string();
    for (r, runs) in [(1, &one), (top, &many)] {
        let mut row = vec![r.to_string(), format!("{} of {planned}", runs.len())];
        match figures(runs) {
            Some(cells) => row.extend(cells.map(num)),
            None => row.resize(t.columns.len(), "-".into()),
        }
        t.row(row);
    }
    let mut ratio = vec![format!("{top} / 1"), "-".to_owned()];
    match (figures(&one), figures(&many)) {
        (Some(a), Some(b)) => ratio.extend(a.iter().zip(b).map(|(a, b)| {
            if *a > 0.0 {
                format!("{:.2}", b / a)
            } else {
                "-".into()
            }
        })),
        _ => ratio.resize(t.columns.len(), "-".into()),
    }
    t.row(ratio);
    t.notes.push(format!(
        "Each cell is the median of the runs at that r ({planned} planned, r = 1 and r = {top} back to back in every round). Network bytes and round trips come from the store's own verb counters of each operation (a batch of verbs is one round trip). A GET reads only the primaries, so its counts should match at both r; a PUT also writes its image to r − 1 mirrors and commits them first (docs/replication.md, \"Round trips\"). The other systems of this report are unreplicated."
    ));
    Some(t)
}

/// Adds the cost table of `done` to `report`, right after the summary.
pub fn add_cost_table(report: &mut Report, done: &[Done], replication: &Replication) {
    let Some(table) = cost_table(done, replication) else {
        return;
    };
    let at = report
        .tables
        .iter()
        .position(|t| t.name == "summary")
        .map_or(report.tables.len(), |i| i + 1);
    report.tables.insert(at, table);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::KindSummary;
    use crate::report::{RunRecord, RunStatus};

    /// A measured CD run at `r` whose PUTs take `put_trips` round trips.
    fn cd(r: usize, kops: f64, put_trips: f64) -> Done {
        let kind = |trips: f64, bytes: f64| KindSummary {
            ok: 100,
            p50_us: 2.0,
            p99_us: 20.0,
            round_trips_per_op: trips,
            remote_bytes_per_op: bytes,
            ..KindSummary::default()
        };
        let mut spec = RunSpec::new("t", StoreKind::Cd, WorkloadSpec::default());
        spec.replicas = Some(r);
        Done {
            record: RunRecord {
                label: format!("CD r={r}"),
                system: StoreKind::Cd,
                status: RunStatus::Ok,
                reason: None,
                spec,
                figures: Some(RunFigures {
                    throughput_ops_s: kops * 1e3,
                    get: kind(2.0, 16_500.0),
                    put: kind(put_trips, 150.0 * r as f64),
                    all: kind(2.0, 1_000.0),
                    ..RunFigures::default()
                }),
                dir: "runs/t".into(),
            },
            merged: None,
        }
    }

    #[test]
    fn the_cost_table_holds_both_levels_and_their_ratio() {
        let plan = Replication {
            levels: vec![1, 2],
            rounds: 3,
        };
        // Three interleaved rounds; the medians are the middle ones.
        let done = vec![
            cd(1, 100.0, 4.0),
            cd(2, 80.0, 5.0),
            cd(1, 90.0, 4.0),
            cd(2, 60.0, 5.0),
            cd(1, 110.0, 4.0),
            cd(2, 70.0, 5.0),
        ];
        let t = cost_table(&done, &plan).unwrap();
        assert_eq!(t.rows.len(), 3);
        assert!(t.rows.iter().all(|r| r.len() == t.columns.len()));
        let col = |name: &str| t.columns.iter().position(|c| c == name).unwrap();
        assert_eq!(t.rows[0][..3], ["1", "3 of 3", "100"]);
        assert_eq!(t.rows[1][..3], ["2", "3 of 3", "70.0"]);
        assert_eq!(t.rows[2][0], "2 / 1");
        assert_eq!(t.rows[2][col("kops/s")], "0.70");
        assert_eq!(t.rows[2][col("round trips/GET")], "1.00");
        assert_eq!(t.rows[2][col("round trips/PUT")], "1.25");
        assert_eq!(t.rows[2][col("net B/PUT")], "2.00");
        // The summary names each level and says SD is unreplicated.
        let mut with_sd = vec![cd(1, 100.0, 4.0), cd(2, 80.0, 5.0)];
        let mut sd = cd(1, 1.0, 1.0);
        sd.record.system = StoreKind::Sd;
        sd.record.spec.replicas = None;
        with_sd.push(sd);
        let s = super::super::summary_table("summary", "Summary", &with_sd);
        assert_eq!(s.columns[..2], ["system", "r"]);
        let heads: Vec<_> = s.rows.iter().map(|r| (&r[0][..], &r[1][..])).collect();
        assert_eq!(
            heads,
            [("CD r=1", "1"), ("CD r=2", "2"), ("SD", "1 (unreplicated)")]
        );
    }

    #[test]
    fn a_missing_level_leaves_dashes_and_one_level_no_table() {
        let plan = Replication {
            levels: vec![1, 3],
            rounds: 1,
        };
        let t = cost_table(&[cd(1, 100.0, 4.0)], &plan).unwrap();
        assert_eq!(t.rows[1][..3], ["3", "0 of 1", "-"]);
        assert!(t.rows[2][1..].iter().all(|c| c == "-"));
        let single = Replication {
            levels: vec![1],
            rounds: 1,
        };
        assert!(cost_table(&[cd(1, 1.0, 1.0)], &single).is_none());
    }

    #[test]
    fn plans_are_checked() {
        let cd_sd = [StoreKind::Cd, StoreKind::Sd];
        let p = Replication::side_by_side(2, 2, 3, &cd_sd).unwrap();
        assert_eq!((p.levels.clone(), p.rounds, p.top()), (vec![1, 2], 2, 2));
        assert_eq!(p.label(2, 0), "CD r=2");
        assert_eq!(p.label(1, 1), "CD r=1 #2");
        assert_eq!(
            Replication::side_by_side(1, 1, 2, &cd_sd).unwrap().levels,
            [1]
        );
        assert_eq!(Replication::only(3, 3, &cd_sd).unwrap().levels, [3]);
        assert!(matches!(
            Replication::side_by_side(2, 1, 2, &cd_sd),
            Err(HarnessError::Replicas {
                replicas: 2,
                nodes: 2
            })
        ));
        assert!(matches!(
            Replication::only(2, 3, &[StoreKind::Sd]),
            Err(HarnessError::Usage(_))
        ));
    }
}
