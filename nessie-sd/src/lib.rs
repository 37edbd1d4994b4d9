//! # nessie-sd: the server-driven baseline
//!
//! Will hold the HERD-like server-driven store of DESIGN §7: each key has a
//! home node (hash mod nodes) holding its index and data; clients WRITE
//! requests into polled rings in the home node's memory, server worker
//! threads execute them and WRITE replies back. It shares `nessie`'s fabric,
//! layouts and hashing and implements `nessie::KvClient`.
