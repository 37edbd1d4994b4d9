//! # power-ipmi
//!
//! Will hold the energy samplers of the harness's `energy` experiment: IPMI
//! DCMI power readings through `ipmitool`, RAPL counters from
//! `/sys/class/powercap`, and per-process CPU time from `/proc` (always
//! available), each behind one sampler trait that reports `Unavailable`
//! rather than a made-up number.
