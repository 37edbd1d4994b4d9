//! The `KvClient` conformance suite on every store: Nessie (`cd`), the
//! server-driven baseline (`sd`) and the hybrid baseline (`hy`), each on the
//! local fabric, as node processes on shared memory, and on the `tcp`
//! fabric.

use nessie::Config;
use nessie_check::conformance::kv::{self, local, nodes, small_config, workers_config};

macro_rules! kv_suite {
    ($store:ident, $cluster:ty, $node:ident, $put_verbs:expr, $counted:expr) => {
        mod $store {
            use super::*;

            type S = $cluster;

            #[test]
            fn put_get_delete_overwrite() {
                kv::put_get_delete_overwrite(&local::<S>(small_config()));
            }

            #[test]
            fn many_keys_fill_most_of_a_small_index() {
                // 250 keys in 3 × 128 index slots: a 65% load factor puts
                // some keys in a later candidate, behind other keys.
                let cluster: S = local(Config {
                    index_slots_per_node: 128,
                    ..small_config()
                });
                kv::many_keys(&cluster, 250);
            }

            #[test]
            fn values_of_every_size_class() {
                let config = small_config();
                let max = config.value_size_max;
                kv::every_size_class(&local::<S>(config), max);
            }

            #[test]
            fn bad_input_gets_typed_errors_and_changes_nothing() {
                let config = small_config();
                kv::bad_input_changes_nothing(&local::<S>(config.clone()), &config, $counted);
            }

            #[test]
            fn several_workers_per_node() {
                let cluster: S = local(workers_config(3));
                kv::put_get_delete_overwrite(&cluster);
                kv::many_keys(&cluster, 300);
            }

            #[test]
            fn full_index_is_reported() {
                kv::full_index_is_reported::<S>();
            }

            #[test]
            fn mixed_operations_on_few_keys_leave_values_someone_wrote() {
                kv::concurrent_mixed(&local::<S>(workers_config(1)), 8, 4, 120);
            }

            #[test]
            fn mixed_operations_with_several_workers_per_node() {
                for workers in [2, 3] {
                    kv::concurrent_mixed(&local::<S>(workers_config(workers)), 6, 3, 120);
                }
            }

            #[test]
            fn same_key_writers_through_different_workers_stay_ordered() {
                kv::last_writer_wins(&local::<S>(workers_config(3)), 6, 40);
            }

            #[test]
            fn readers_never_miss_keys_that_are_being_moved() {
                for workers in [1, 3] {
                    kv::readers_never_miss_moved_keys::<S>(workers);
                }
            }

            #[test]
            fn readers_see_each_overwrite_whole() {
                kv::readers_see_whole_values(&local::<S>(workers_config(1)));
            }

            #[test]
            fn three_node_processes_share_one_store() {
                nodes::run_node_processes(&nessie_check::process::workload::test_name(
                    module_path!(),
                    "node_process",
                ));
            }

            #[test]
            #[ignore = "one node of three_node_processes_share_one_store, started by it"]
            fn node_process() {
                nodes::node_process($node::Node::start, $node::Node::client);
            }

            #[test]
            fn three_nodes_on_the_tcp_fabric() {
                let nodes = nodes::tcp_nodes($node::Node::start);
                let mut clients: Vec<_> = nodes.iter().map(|n| n.client().unwrap()).collect();
                nodes::across_nodes(&mut clients, $put_verbs);
            }
        }
    };
}

// Nessie's PUT costs depend on what the index holds (nessie/tests/
// tcp_store.rs checks them against the local fabric instead); it refuses a
// bad key before counting the operation or touching get_into's buffer.
kv_suite!(cd, nessie::Cluster, nessie, None, false);
// A baseline's PUT is a request WRITE and a reply WRITE on every fabric; a
// refused key counts as a failed operation.
kv_suite!(sd, nessie_sd::Cluster, nessie_sd, Some((2, 0, 0)), true);
kv_suite!(hy, nessie_hy::Cluster, nessie_hy, Some((2, 0, 0)), true);
