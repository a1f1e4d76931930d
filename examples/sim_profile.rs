//! Runs one simulator configuration (JSON, as `Config.to_json()` writes it)
//! and prints the CPU time taken and a fingerprint (hash) of the results: a harness for
//! profilers (perf, callgrind) and for A/B runs of two builds.
//!
//!     cargo run --release --example sim_profile -- config.json

use std::hash::{Hash, Hasher};
use std::time::Instant;

use _core::sim::{run, SimConfig};

fn main() {
    let path = std::env::args().nth(1).expect("usage: sim_profile CONFIG.json");
    let json = std::fs::read_to_string(&path).expect("read config");
    let cfg = SimConfig::from_json(&json).expect("valid config");
    let t = Instant::now();
    let r = run(&cfg).expect("run");
    let dt = t.elapsed().as_secs_f64();
    // a fingerprint of the run's tables, so two builds' results can be compared
    // bit for bit (the same toolchain: the hasher is not stable across Rust
    // versions); named one by one, so that a new optional output (the decision
    // log, 0.3.31) does not change it
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{:?}{:?}{:?}{:?}{:?}", r.summary, r.vms, r.vcpus, r.pcpus, r.trace).hash(&mut h);
    eprintln!("result fingerprint {:016x}", h.finish());
    println!(
        "{:.3} s wall for {:.3} simulated s ({} summary columns)",
        dt,
        cfg.duration_ns as f64 / 1e9,
        r.summary.columns.len()
    );
}
