//! Runs one simulator configuration (JSON, as `Config.to_json()` writes it)
//! and prints the CPU time taken: a harness for profilers (perf, callgrind).
//!
//!     cargo run --release --example sim_profile -- config.json

use std::time::Instant;

use _core::sim::{run, SimConfig};

fn main() {
    let path = std::env::args().nth(1).expect("usage: sim_profile CONFIG.json");
    let json = std::fs::read_to_string(&path).expect("read config");
    let cfg = SimConfig::from_json(&json).expect("valid config");
    let t = Instant::now();
    let r = run(&cfg).expect("run");
    let dt = t.elapsed().as_secs_f64();
    println!(
        "{:.3} s wall for {:.3} simulated s ({} summary columns)",
        dt,
        cfg.duration_ns as f64 / 1e9,
        r.summary.columns.len()
    );
}
