//! The RAPL sampler on a fake powercap tree in a temporary directory, laid
//! out as the kernel does: zone directories nested under
//! `devices/virtual/powercap/intel-rapl/`, and `class/powercap/` holding a
//! symlink to every zone and subzone (so each subzone is reachable twice).
//! Each zone has `name`, `energy_uj`, `max_energy_range_uj` and the other
//! files the kernel puts there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use power_ipmi::{
    discover_rapl_zones, EnergyReport, EnergySampler, PowerError, RaplConfig, RaplReport,
    RaplSampler,
};

/// Real package range (2^32 × 61.035 µJ) and a real DRAM range.
const PKG_RANGE: u64 = 262_143_328_850;
const DRAM_RANGE: u64 = 65_712_999_613;

struct FakeTree {
    _dir: tempfile::TempDir,
    class: PathBuf,
    devices: PathBuf,
}

/// (id, name, max range) in kernel order.
const ZONES: &[(&str, &str, u64)] = &[
    ("intel-rapl:0", "package-0", PKG_RANGE),
    ("intel-rapl:0:0", "core", PKG_RANGE),
    ("intel-rapl:0:1", "uncore", PKG_RANGE),
    ("intel-rapl:0:2", "dram", DRAM_RANGE),
    ("intel-rapl:1", "package-1", PKG_RANGE),
    ("intel-rapl:1:0", "dram", DRAM_RANGE),
    ("intel-rapl:2", "psys", PKG_RANGE),
];

impl FakeTree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("devices/virtual/powercap");
        let class = dir.path().join("class/powercap");
        std::fs::create_dir_all(devices.join("intel-rapl")).unwrap();
        std::fs::create_dir_all(&class).unwrap();
        std::fs::write(devices.join("intel-rapl/enabled"), "1\n").unwrap();
        std::os::unix::fs::symlink(devices.join("intel-rapl"), class.join("intel-rapl")).unwrap();
        let tree = FakeTree {
            _dir: dir,
            class,
            devices,
        };
        for &(id, name, range) in ZONES {
            let zone = tree.zone_dir(id);
            std::fs::create_dir_all(&zone).unwrap();
            std::fs::write(zone.join("name"), format!("{name}\n")).unwrap();
            std::fs::write(zone.join("max_energy_range_uj"), format!("{range}\n")).unwrap();
            std::fs::write(zone.join("enabled"), "1\n").unwrap();
            std::fs::write(zone.join("constraint_0_name"), "long_term\n").unwrap();
            std::fs::write(zone.join("constraint_0_power_limit_uw"), "125000000\n").unwrap();
            tree.set(id, 1_000_000);
            std::os::unix::fs::symlink(&zone, tree.class.join(id)).unwrap();
        }
        tree
    }

    /// `intel-rapl:0:1` lives in `.../intel-rapl/intel-rapl:0/intel-rapl:0:1`.
    fn zone_dir(&self, id: &str) -> PathBuf {
        let mut path = self.devices.join("intel-rapl");
        let parts: Vec<&str> = id.split(':').collect();
        for n in 2..=parts.len() {
            path.push(parts[..n].join(":"));
        }
        path
    }

    fn set(&self, id: &str, uj: u64) {
        std::fs::write(self.zone_dir(id).join("energy_uj"), format!("{uj}\n")).unwrap();
    }

    fn sampler(root: &Path) -> RaplSampler {
        RaplSampler::new(RaplConfig {
            root: root.to_path_buf(),
            poll_interval: None,
        })
    }
}

fn rapl(report: EnergyReport) -> RaplReport {
    match report {
        EnergyReport::Rapl(r) => r,
        other => panic!("not a RAPL report: {other:?}"),
    }
}

fn joules(r: &RaplReport, id: &str) -> f64 {
    r.zones
        .iter()
        .find(|z| z.id == id)
        .unwrap_or_else(|| panic!("no zone {id}"))
        .joules
}

#[test]
fn discovers_zones_and_subzones_once_in_either_layout() {
    let tree = FakeTree::new();
    for root in [&tree.class, &tree.devices] {
        let zones = discover_rapl_zones(root).unwrap();
        let got: Vec<(&str, &str, u64)> = zones
            .iter()
            .map(|z| (z.id.as_str(), z.name.as_str(), z.max_energy_range_uj))
            .collect();
        assert_eq!(got, ZONES, "root {}", root.display());
        let parents: Vec<Option<&str>> = zones.iter().map(|z| z.parent.as_deref()).collect();
        assert_eq!(
            parents,
            [
                None,
                Some("intel-rapl:0"),
                Some("intel-rapl:0"),
                Some("intel-rapl:0"),
                None,
                Some("intel-rapl:1"),
                None
            ]
        );
    }
}

#[test]
fn energy_is_the_counter_delta_of_each_zone() {
    let tree = FakeTree::new();
    let mut s = FakeTree::sampler(&tree.class);
    s.start().unwrap();
    tree.set("intel-rapl:0", 1_000_000 + 40_000_000); // 40 J
    tree.set("intel-rapl:0:0", 1_000_000 + 25_000_000); // 25 J, inside package-0
    tree.set("intel-rapl:0:2", 1_000_000 + 5_500_000); // 5.5 J
    tree.set("intel-rapl:1", 1_000_000 + 30_000_000); // 30 J
    tree.set("intel-rapl:1:0", 1_000_000 + 4_000_000); // 4 J
    tree.set("intel-rapl:2", 1_000_000 + 120_000_000); // psys, 120 J
    let r = rapl(s.stop().unwrap());
    assert_eq!(joules(&r, "intel-rapl:0"), 40.0);
    assert_eq!(joules(&r, "intel-rapl:0:0"), 25.0);
    assert_eq!(joules(&r, "intel-rapl:0:1"), 0.0);
    assert_eq!(joules(&r, "intel-rapl:2"), 120.0);
    // Packages plus DRAM; core is inside its package, psys overlaps all.
    assert_eq!(r.total_joules(), 40.0 + 5.5 + 30.0 + 4.0);
    assert_eq!(EnergyReport::Rapl(r.clone()).joules(), Some(79.5));
    assert!(r.zones.iter().all(|z| z.wraps == 0));
    assert_eq!((r.polls, r.failed_polls), (2, 0));
    // Started again, it measures from the new start.
    s.start().unwrap();
    tree.set("intel-rapl:0", 1_000_000 + 41_000_000);
    assert_eq!(joules(&rapl(s.stop().unwrap()), "intel-rapl:0"), 1.0);
}

#[test]
fn wrap_around_adds_the_rest_of_the_range_once_per_wrap() {
    let tree = FakeTree::new();
    // A small range so that two wraps need little energy.
    let pkg = tree.zone_dir("intel-rapl:0");
    std::fs::write(pkg.join("max_energy_range_uj"), "10000000\n").unwrap();
    tree.set("intel-rapl:0", 9_000_000);
    let mut s = FakeTree::sampler(&tree.class);
    s.start().unwrap();
    tree.set("intel-rapl:0", 2_000_000); // wrapped: 1 J to the top + 2 J
    s.poll_now().unwrap();
    tree.set("intel-rapl:0", 8_000_000); // 6 J
    s.poll_now().unwrap();
    tree.set("intel-rapl:0", 1_000_000); // wrapped: 2 J + 1 J
                                         // A DRAM wrap at its real range, in the same run.
    tree.set("intel-rapl:0:2", DRAM_RANGE - 500_000);
    s.poll_now().unwrap();
    tree.set("intel-rapl:0:2", 250_000);
    let r = rapl(s.stop().unwrap());
    let pkg = r.zones.iter().find(|z| z.id == "intel-rapl:0").unwrap();
    assert_eq!((pkg.joules, pkg.wraps), (12.0, 2));
    let dram = r.zones.iter().find(|z| z.id == "intel-rapl:0:2").unwrap();
    // 1 J → DRAM_RANGE − 0.5 J, then 0.5 J to the top and 0.25 J past zero.
    let up = (DRAM_RANGE - 500_000 - 1_000_000) as f64 / 1e6;
    assert!((dram.joules - (up + 0.75)).abs() < 1e-6, "{}", dram.joules);
    assert_eq!(dram.wraps, 1);
    assert_eq!(r.polls, 5);
}

#[test]
fn background_polling_reads_while_running() {
    let tree = FakeTree::new();
    let mut s = RaplSampler::new(RaplConfig {
        root: tree.class.clone(),
        poll_interval: Some(Duration::from_millis(10)),
    });
    s.start().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let r = rapl(s.stop().unwrap());
    assert!(r.polls > 2, "only {} reads", r.polls);
    assert_eq!(r.failed_polls, 0);
}

#[test]
fn missing_or_odd_trees_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = RaplSampler::new(RaplConfig {
        root: dir.path().join("no-powercap-here"),
        poll_interval: None,
    });
    assert!(matches!(s.start(), Err(PowerError::NoRaplZones { .. })));
    assert!(matches!(s.stop(), Err(PowerError::NotStarted { .. })));

    let tree = FakeTree::new();
    tree.set("intel-rapl:1", 0);
    std::fs::write(tree.zone_dir("intel-rapl:1").join("energy_uj"), "lots\n").unwrap();
    match FakeTree::sampler(&tree.class).start() {
        Err(PowerError::Parse { line, .. }) => assert_eq!(line, "lots"),
        other => panic!("expected a parse error, got {other:?}"),
    }

    // A counter that goes down in a zone without a range cannot be read as
    // a wrap.
    let tree = FakeTree::new();
    std::fs::remove_file(tree.zone_dir("intel-rapl:2").join("max_energy_range_uj")).unwrap();
    let mut s = FakeTree::sampler(&tree.class);
    s.start().unwrap();
    tree.set("intel-rapl:2", 5);
    assert!(matches!(
        s.stop(),
        Err(PowerError::CounterWentBackwards { .. })
    ));
}

#[test]
fn unreadable_counter_is_permission_denied() {
    if nix::unistd::geteuid().is_root() {
        eprintln!("unreadable_counter_is_permission_denied: running as root, which reads any file; not checked");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tree = FakeTree::new();
    let counter = tree.zone_dir("intel-rapl:0").join("energy_uj");
    std::fs::set_permissions(&counter, std::fs::Permissions::from_mode(0o000)).unwrap();
    match FakeTree::sampler(&tree.class).start() {
        Err(e @ PowerError::PermissionDenied { .. }) => {
            assert!(e.to_string().contains("root"), "{e}");
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}
