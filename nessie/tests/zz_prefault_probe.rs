use nessie::{Cluster, Config, FabricConfig, Node};
use std::time::Duration;

fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(7).unwrap().parse().unwrap()
}

#[test]
fn probe() {
    for shm in [false, true] {
        let mut config = Config {
            nodes: 1,
            index_slots_per_node: 1 << 14,
            data_bytes_per_node: 256 << 20,
            ..Config::default()
        };
        let (_c, _n, mut client);
        if shm {
            config.cluster = format!("probe-{}", std::process::id());
            config.fabric = FabricConfig::Shm { dir: None };
            let n = Node::start(config.clone(), 0).unwrap();
            client = n.client().unwrap();
            _n = Some(n);
            _c = None;
        } else {
            let c = Cluster::local(config.clone()).unwrap();
            client = c.client(0).unwrap();
            _c = Some(c);
            _n = None;
        }
        let value = vec![7u8; 16 << 10];
        let mut k = 0;
        for round in 0..6 {
            std::thread::sleep(Duration::from_millis(300));
            let before = minor_faults();
            for _ in 0..200 {
                client.put(format!("key-{k}").as_bytes(), &value).unwrap();
                k += 1;
            }
            println!(
                "shm {shm} round {round}: {} faults over 200 PUTs",
                minor_faults() - before
            );
        }
    }
}
