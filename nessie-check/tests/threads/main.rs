//! Every store under real OS threads: the `KvClient` conformance suite on
//! each store and fabric, and histories of threads on few keys checked for
//! linearizability. One test binary, so that it links once.

mod kv_conformance;
mod linearizable_threads;
