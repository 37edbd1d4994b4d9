//! What a run exercises: the scenarios and the configuration they give.

use crate::sim::{Faults, ForwardStep, HostLoss, HostReturn};
use nessie::layout::dte;
use nessie::{ChecksumPolicy, Config, Optimizations, Placement};
use std::ops::RangeInclusive;
use std::time::Duration;

/// How a run's index starts out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Keys with random names (and so random candidate slots).
    Random,
    /// Layout A of the model checks and the review, on two nodes of two index
    /// slots: k1 with candidates (s1, s0) sits in s0, k3 in s2; k2 has (s0,
    /// s2) and k4 (s1, s2). Client 0 starts with PUT(k2), which must MIGRATE
    /// k1 from s0 to s1; everything after is random. The ground of
    /// docs/design.md#rules, F3–F5: zombie migrators and their helpers meet on
    /// three slots.
    A,
    /// The layout of F2
    /// (docs/design.md#f2-rule-iii-the-recycler-clears-a-committed-copys-marker),
    /// on two nodes of two index slots: k1 with candidates (s0, s1, s2) sits
    /// in s0, f3 in s3; kx has (s0, s3) and ky (s1, s3). Client 0 starts with
    /// PUT(kx), which MIGRATEs k1 from s0 to s1, and client 1 with PUT(ky),
    /// which moves that copy on to s2.
    F2,
    /// `M2a` of the model check of the reverse passes, on two nodes of two
    /// index slots: k1 with candidates (s0, s1) is absent, k2 with (s0, s2)
    /// sits in s0. Client 0 starts with PUT(k1), client 1 with DELETE(k2),
    /// PUT(k1), GET(k1), client 2 with DELETE(k1): the DELETE of k2 vacates
    /// s0 between the forward passes of the two PUTs of k1, which then
    /// choose different candidates, and only PUT's reverse pass keeps one of
    /// them from committing beside the other.
    M2a,
    /// `M3a` of the same check: k1 with candidates (s0, s1) sits in s1, k2
    /// with (s1, s2) is absent, a filler sits in s2. Client 0 starts with
    /// DELETE(k1), client 1 with PUT(k2), which must MIGRATE k1 from s1 to
    /// s0: a DELETE that reads s0 before the copy lands and s1 after the
    /// source is cleared finds k1 absent, and only its confirming re-read
    /// catches that.
    M3a,
}

/// Which optimisation switches and checksum policy a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switches {
    /// These.
    Fixed(Optimizations, ChecksumPolicy),
    /// One of the 64 combinations, chosen by the seed (and filter bits of
    /// 8, 2 or 1 when filters are on).
    PerSeed,
}

/// Whether a run checks the nodes' clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clocks {
    /// The skew bound is assumed: nothing checks it, and staged slots come
    /// back on their stamps alone.
    Assumed,
    /// The clock watch runs as a scheduled thread, checking every node's
    /// clock every heartbeat period: nodes reuse staged slots only on its
    /// word, and their clients refuse operations while it finds the clocks
    /// skewed.
    Watched,
}

/// What a simulation run exercises.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name, for reports.
    pub name: &'static str,
    /// Simulated clients (client `c` runs on node `c % nodes`).
    pub clients: usize,
    /// Nodes.
    pub nodes: usize,
    /// Copies of every share (`Config::replicas`; 1: no mirrors).
    pub replicas: usize,
    /// Operations each client issues.
    pub ops_per_client: usize,
    /// Keys the clients fight over.
    pub keys: usize,
    /// Lengths their keys may have (each key's length is drawn per seed).
    pub key_len: RangeInclusive<usize>,
    /// Lengths values may have (two size classes: up to 256 and 512 bytes).
    pub value_len: RangeInclusive<usize>,
    /// Keys preloaded to crowd the index (never written by clients).
    pub fillers: usize,
    /// Whether clients also GET the fillers (so the entries MIGRATEs move
    /// are read, and their copies helped, by others).
    pub read_fillers: bool,
    /// Percentages of PUTs and DELETEs among the clients' operations (the
    /// rest are GETs).
    pub mix: (u32, u32),
    /// How many of the clients (the last ones) only read.
    pub readers: usize,
    /// How the index starts out.
    pub layout: Layout,
    /// Where a key's candidates lie ([`Config::placement`]).
    pub placement: Placement,
    /// ITEs per node.
    pub index_slots_per_node: usize,
    /// DTE slots per node of the larger size class (the smaller gets more).
    pub data_slots_per_node: usize,
    /// DTE expiry (virtual µs).
    pub expiry_us: u64,
    /// Operation deadline (virtual µs).
    pub op_timeout_us: u64,
    /// Tolerated skew (virtual µs).
    pub skew_us: u64,
    /// Optimisation switches and checksum policy.
    pub switches: Switches,
    /// Whether every node's background recycler runs as a scheduled thread.
    pub recycler: bool,
    /// Whether CASes carry land-by times the target enforces (as on `tcp`).
    pub land_by: bool,
    /// Whether the nodes' clocks are checked.
    pub clocks: Clocks,
    /// Fault injection.
    pub faults: Faults,
}

/// Value capacity of the larger size class of every scenario.
const VALUE_MAX: usize = 512;
/// Longest key of every scenario.
pub(super) const KEY_MAX: usize = 24;

impl Scenario {
    /// A small, contended cluster: 4 hot keys, 6 clients on 3 nodes, a
    /// roomy index.
    #[must_use]
    pub fn contended() -> Scenario {
        Scenario {
            name: "contended",
            clients: 6,
            nodes: 3,
            replicas: 1,
            ops_per_client: 6,
            keys: 4,
            key_len: 1..=KEY_MAX,
            value_len: 1..=400,
            fillers: 0,
            read_fillers: false,
            mix: (40, 20),
            readers: 0,
            layout: Layout::Random,
            index_slots_per_node: 16,
            data_slots_per_node: 48,
            expiry_us: 20_000,
            op_timeout_us: 5_000,
            skew_us: 500,
            switches: Switches::PerSeed,
            placement: Placement::Spread,
            recycler: false,
            land_by: false,
            clocks: Clocks::Assumed,
            faults: Faults::none(),
        }
    }

    /// The index at load ≥ 0.8 (fillers), so PUTs MIGRATE recursively.
    #[must_use]
    pub fn crowded() -> Scenario {
        Scenario {
            name: "crowded",
            index_slots_per_node: 4,
            fillers: 7,
            keys: 3,
            ..Scenario::contended()
        }
    }

    /// Data tables so small that slots are recycled all the time, with the
    /// background recycler running.
    #[must_use]
    pub fn recycling() -> Scenario {
        Scenario {
            name: "recycling",
            data_slots_per_node: 6,
            expiry_us: 3_000,
            op_timeout_us: 1_000,
            skew_us: 100,
            ops_per_client: 8,
            recycler: true,
            ..Scenario::contended()
        }
    }

    /// Tiny index *and* tiny data tables: MIGRATE, recursive MIGRATE and
    /// recycling interleave, with the background recycler running.
    #[must_use]
    pub fn combined() -> Scenario {
        Scenario {
            name: "combined",
            index_slots_per_node: 4,
            fillers: 7,
            keys: 4,
            data_slots_per_node: 8,
            expiry_us: 3_000,
            op_timeout_us: 1_000,
            skew_us: 100,
            ops_per_client: 6,
            recycler: true,
            ..Scenario::contended()
        }
    }

    /// Zombie migrations: an index so full that nearly every PUT migrates,
    /// readers of the migrated entries, many stalls (half of them in the
    /// window where a late CAS races its helpers) and crashes, and the
    /// background recycler: the ground of F2–F5 (docs/design.md#rules).
    #[must_use]
    pub fn migrating_zombies() -> Scenario {
        let base = Scenario {
            name: "migrating-zombies",
            clients: 4,
            ops_per_client: 4,
            keys: 4,
            fillers: 8,
            read_fillers: true,
            mix: (50, 30),
            readers: 0,
            layout: Layout::Random,
            index_slots_per_node: 4,
            data_slots_per_node: 8,
            expiry_us: 3_000,
            op_timeout_us: 500,
            skew_us: 50,
            recycler: true,
            ..Scenario::contended()
        };
        let f = Scenario::faulty(base.clone()).faults;
        Scenario {
            faults: Faults {
                crash: 0.004,
                max_crashes: 2,
                stall: 0.02,
                critical_stall: 0.3,
                critical_crash: 0.05,
                tear: 0.1,
                transport: 0.0,
                ..f
            },
            ..base
        }
    }

    /// Layout A ([`Layout::A`]) under zombie stalls and crashes
    /// concentrated at the MIGRATE's critical CASes and after markers are
    /// read: every run starts a MIGRATE that helpers race.
    #[must_use]
    pub fn layout_a_races() -> Scenario {
        let zombies = Scenario::migrating_zombies();
        Scenario {
            name: "layout-a-races",
            nodes: 2,
            clients: 4,
            ops_per_client: 3,
            index_slots_per_node: 2,
            keys: 3,
            fillers: 1,
            read_fillers: true,
            mix: (40, 20),
            layout: Layout::A,
            ..zombies
        }
    }

    /// The layout of F2 ([`Layout::F2`], docs/design.md#rules) under the same
    /// faults: every run migrates k1 twice, and a crash or a passed deadline
    /// between a copy's commit and its marker's clear leaves a marker behind.
    #[must_use]
    pub fn layout_f2_races() -> Scenario {
        Scenario {
            name: "layout-f2-races",
            layout: Layout::F2,
            clients: 3,
            ops_per_client: 2,
            ..Scenario::layout_a_races()
        }
    }

    /// One node's wall clock steps ahead by twice the expiry, far beyond
    /// `max_clock_skew`, at a random point of the run, and back after two
    /// expiries, with the clock watch running: the node must not reuse the
    /// slots whose stamps its fast clock finds expired while readers
    /// elsewhere still read them without verifying their checksums
    /// (`ChecksumPolicy::AfterStall`, and `multi_read` off, so that a value
    /// is read apart from its header). Small data tables, so that slots
    /// come back all the time; reads of node 0's entries from every node.
    #[must_use]
    pub fn clock_step_watched() -> Scenario {
        let optimizations = Optimizations {
            multi_read: false,
            cache: false,
            ..Optimizations::default()
        };
        Scenario {
            name: "clock-step-watched",
            nodes: 2,
            clients: 6,
            ops_per_client: 24,
            mix: (50, 10),
            readers: 2,
            data_slots_per_node: 6,
            expiry_us: 20_000,
            op_timeout_us: 3_000,
            skew_us: 8_000,
            switches: Switches::Fixed(optimizations, ChecksumPolicy::AfterStall),
            recycler: true,
            clocks: Clocks::Watched,
            faults: Faults {
                priority_runs: 0.5,
                priority_change: 0.02,
                forward_step: Some(ForwardStep {
                    node: 0,
                    by_us: 40_000,
                    p: 0.01,
                    back_after_us: 10_000,
                }),
                ..Faults::none()
            },
            ..Scenario::contended()
        }
    }

    /// The race of [`Layout::M2a`]: writers of one absent key choosing
    /// different candidates because another key's DELETE vacated one
    /// between their forward passes; with priority scheduling, short stalls
    /// and torn verbs, no crashes (every write's outcome stays known).
    #[must_use]
    pub fn vacated_candidates() -> Scenario {
        let base = Scenario {
            name: "vacated-candidates",
            nodes: 2,
            clients: 3,
            ops_per_client: 4,
            index_slots_per_node: 2,
            keys: 2,
            fillers: 0,
            read_fillers: false,
            mix: (40, 30),
            layout: Layout::M2a,
            ..Scenario::contended()
        };
        let f = Scenario::faulty(base.clone()).faults;
        Scenario {
            faults: Faults {
                crash: 0.0,
                max_crashes: 0,
                critical_crash: 0.0,
                transport: 0.0,
                ..f
            },
            ..base
        }
    }

    /// The race of [`Layout::M3a`]: a DELETE of a present key while a PUT
    /// of another key migrates it between the DELETE's candidate reads,
    /// under the faults of [`Scenario::vacated_candidates`].
    #[must_use]
    pub fn migrating_under_delete() -> Scenario {
        Scenario {
            name: "migrating-under-delete",
            clients: 2,
            ops_per_client: 3,
            fillers: 2,
            read_fillers: true,
            layout: Layout::M3a,
            ..Scenario::vacated_candidates()
        }
    }

    /// `base` with every fault within the protocol's stated bounds: up to 4
    /// crashes at any verb; stalls of any length before READs, WRITEs and
    /// back-offs and up to the landing bound before CASes (zombies); torn
    /// READs and WRITEs; transport errors with unknown outcome; wall-clock
    /// steps within `max_clock_skew`.
    #[must_use]
    pub fn faulty(base: Scenario) -> Scenario {
        let config = base.config_with(Optimizations::default(), ChecksumPolicy::AfterStall, 8);
        let landing = config.landing_bound().as_micros() as u64;
        Scenario {
            name: match base.name {
                "contended" => "contended+faults",
                "crowded" => "crowded+faults",
                "recycling" => "recycling+faults",
                "combined" => "combined+faults",
                other => other,
            },
            faults: Faults {
                crash: 0.004,
                max_crashes: 4,
                stall: 0.03,
                stall_max_us: base.expiry_us * 3,
                // A little under the bound: the scheduler may run other
                // threads for a few µs before the stalled one resumes.
                cas_stall_max_us: landing - landing / 10,
                dead_after_us: dead_after_us(&config),
                critical_stall: 0.05,
                critical_crash: 0.01,
                watch_reads: true,
                priority_runs: 0.5,
                priority_change: 0.02,
                tear: 0.3,
                transport: 0.002,
                clock_step: 0.01,
                clock_offset_max_us: base.skew_us / 2,
                forward_step: None,
                crash_at: None,
                stall_at: None,
                host_loss: None,
                host_return: None,
            },
            ..base
        }
    }

    /// `base` with each key's candidates on one node
    /// ([`Placement::OneNode`]): fewer slots per key to contend for, and
    /// MIGRATEs that stay on the node.
    #[must_use]
    pub fn one_node(base: Scenario) -> Scenario {
        Scenario {
            name: match base.name {
                "combined+faults" => "one-node-combined+faults",
                "crowded+faults" => "one-node-crowded+faults",
                "host-lost-combined" => "one-node-host-lost-combined",
                other => other,
            },
            placement: Placement::OneNode,
            ..base
        }
    }

    /// `base` on three nodes with every share kept twice (`replicas` = 2),
    /// under every fault of [`Scenario::faulty`]; the zombie window follows
    /// the later death of owners with replicas
    /// (docs/replication.md#rp2b). After each run the mirrors are audited
    /// against their primaries, or, where a sync was cut short, promoted
    /// (see `run.rs`).
    #[must_use]
    pub fn replicated(base: Scenario) -> Scenario {
        let name = match base.name {
            "contended" => "replicated-contended",
            "crowded" => "replicated-crowded",
            "recycling" => "replicated-recycling",
            "combined" => "replicated-combined",
            other => other,
        };
        Scenario::faulty(Scenario {
            name,
            nodes: 3,
            replicas: 2,
            ..base
        })
    }

    /// [`Scenario::replicated`] of [`Scenario::combined`] (MIGRATE and
    /// recycling together) without crashes or transport errors: every sync
    /// finishes unless a deadline cuts it short, so most runs end with the
    /// mirror audit, every mirror equal to its primary.
    #[must_use]
    pub fn mirrored_zombies() -> Scenario {
        let mut s = Scenario::replicated(Scenario::combined());
        s.name = "mirrored-zombies";
        s.faults.crash = 0.0;
        s.faults.max_crashes = 0;
        s.faults.critical_crash = 0.0;
        s.faults.transport = 0.0;
        s
    }

    /// [`Scenario::replicated`] with the loss of one host at a point the
    /// scheduler draws ([`HostLoss`]): its clients crash, its memory is
    /// wiped, the survivors change the view and go on. A run the loss
    /// never struck loses a host after its clients are done.
    #[must_use]
    pub fn host_lost(base: Scenario) -> Scenario {
        let name = match base.name {
            "contended" => "host-lost-contended",
            "crowded" => "host-lost-crowded",
            "recycling" => "host-lost-recycling",
            "combined" => "host-lost-combined",
            other => other,
        };
        let mut s = Scenario::replicated(base);
        s.name = name;
        let config = s.config_with(Optimizations::default(), ChecksumPolicy::AfterStall, 8);
        s.faults.host_loss = Some(HostLoss::for_config(&config, 0.004));
        s
    }

    /// [`Scenario::host_lost`] in which the lost host returns empty
    /// ([`HostReturn`]): once the view without it is active, at a point
    /// the scheduler draws, a replacement restores its replicas while the
    /// clients go on under every fault, and a view names it active again;
    /// every key is audited after the restore, and the mirrors against
    /// their primaries where no sync was cut short. The clients issue
    /// twice as many operations, so that most restores overlap them. A
    /// run whose host is still lost when its clients are done restores it
    /// then.
    #[must_use]
    pub fn host_returns(base: Scenario) -> Scenario {
        let name = match base.name {
            "contended" => "host-returns-contended",
            "crowded" => "host-returns-crowded",
            "recycling" => "host-returns-recycling",
            "combined" => "host-returns-combined",
            other => other,
        };
        let ops = base.ops_per_client * 2;
        let mut s = Scenario::host_lost(base);
        s.name = name;
        s.ops_per_client = ops;
        if let Some(loss) = s.faults.host_loss.as_mut() {
            loss.p = 0.006;
        }
        s.faults.host_return = Some(HostReturn { p: 0.01, losses: 1 });
        s
    }

    /// [`Scenario::host_returns`] of [`Scenario::combined`] without crashes
    /// or transport errors (as [`Scenario::mirrored_zombies`]): most runs
    /// end with the mirror audit after the restore, every mirror, the
    /// restored ones included, equal to its primary.
    #[must_use]
    pub fn host_returns_mirrored() -> Scenario {
        let mut s = Scenario::host_returns(Scenario::combined());
        s.name = "host-returns-mirrored";
        s.faults.crash = 0.0;
        s.faults.max_crashes = 0;
        s.faults.critical_crash = 0.0;
        s.faults.transport = 0.0;
        s
    }

    /// [`Scenario::host_returns`] with two losses one after the other, each
    /// restored before the next may strike (the second may take the node
    /// just restored, or the node whose mirrors it restored).
    #[must_use]
    pub fn host_returns_twice(base: Scenario) -> Scenario {
        let name = match base.name {
            "contended" => "host-returns-twice-contended",
            "crowded" => "host-returns-twice-crowded",
            "recycling" => "host-returns-twice-recycling",
            "combined" => "host-returns-twice-combined",
            other => other,
        };
        let ops = base.ops_per_client * 3;
        let mut s = Scenario::host_returns(base);
        s.name = name;
        s.ops_per_client = ops;
        if let Some(ret) = s.faults.host_return.as_mut() {
            ret.losses = 2;
        }
        s
    }

    /// Whether the clock watch runs ([`Clocks::Watched`]).
    #[must_use]
    pub fn watched(&self) -> bool {
        self.clocks == Clocks::Watched
    }

    /// The configuration of a run with these switches.
    #[must_use]
    pub fn config_with(
        &self,
        optimizations: Optimizations,
        verify_checksums: ChecksumPolicy,
        filter_bits: u32,
    ) -> Config {
        let large_slot = dte::entry_bytes(KEY_MAX, VALUE_MAX);
        Config {
            cluster: format!("sim-{}", self.name),
            nodes: self.nodes,
            replicas: self.replicas,
            index_slots_per_node: self.index_slots_per_node,
            hashes: 3,
            filter_bits,
            key_size_max: KEY_MAX,
            value_size_max: VALUE_MAX,
            // Two classes share it equally: the larger gets
            // `data_slots_per_node` slots.
            data_bytes_per_node: 2 * large_slot * self.data_slots_per_node,
            // A small reserve, so that tombstones' slots are reused (and
            // audited after reuse) as often as entries' slots.
            tombstone_reserve: 2,
            expiry: Duration::from_micros(self.expiry_us),
            op_timeout: Duration::from_micros(self.op_timeout_us),
            max_clock_skew: Duration::from_micros(self.skew_us),
            cache_entries: 8,
            max_migrate_depth: 4,
            optimizations,
            verify_checksums,
            placement: self.placement,
            ..Config::default()
        }
    }

    /// The configuration of `seed`.
    #[must_use]
    pub fn config(&self, seed: u64) -> Config {
        match self.switches {
            Switches::Fixed(o, c) => self.config_with(o, c, 8),
            Switches::PerSeed => {
                let bits = seed % 64;
                let on = |b: u64| bits & (1 << b) == 0;
                let o = Optimizations {
                    filter: on(0),
                    cache: on(1),
                    prev_versions: on(2),
                    multi_read: on(3),
                    batched_reads: on(4),
                    // A bit above those of the switches and the filter
                    // width, so that adding it moved no seed's other
                    // choices.
                    hints: (seed / 192) % 2 == 0,
                };
                let policy = if on(5) {
                    ChecksumPolicy::AfterStall
                } else {
                    ChecksumPolicy::Always
                };
                let filter_bits = [8, 2, 1][((seed / 64) % 3) as usize];
                self.config_with(o, policy, filter_bits)
            }
        }
    }
}

/// How long after its start an operation's owner counts as dead to its
/// helpers (µs): a stall this long makes a zombie. With replicas, only once
/// every CAS it armed has landed (docs/replication.md#rp2b), as the
/// library's `Timing` says.
fn dead_after_us(config: &Config) -> u64 {
    let mirrors_land = if config.replicas > 1 {
        config.landing_bound()
    } else {
        Duration::ZERO
    };
    (config.op_timeout + config.max_clock_skew * 2 + mirrors_land).as_micros() as u64 + 1
}
