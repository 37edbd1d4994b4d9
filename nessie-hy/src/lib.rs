//! # nessie-hy: the hybrid baseline
//!
//! Will hold the FaRM-like hybrid store of DESIGN §7: GETs read the home
//! node's index and data one-sided; PUT and DELETE go through the
//! server-driven write path of `nessie-sd`.
