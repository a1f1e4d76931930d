//! The simulator's configuration: plain data, (de)serialised as JSON.
//!
//! The Python layer (`vcpulab.sim`) builds these from frozen dataclasses whose
//! docstrings give each field's unit, default and source. Rust validates again
//! ([`SimConfig::validate`]) so that a config coming from anywhere is checked
//! before the event loop sees it; every error names the field.
//!
//! One file per topic: `host.rs` (the host and its scheduler), `vm.rs` (a VM:
//! PLE, the directed-yield policy, pv features, halt polling), `workload.rs`
//! (the phases its threads run), `guest.rs` (the guest kernel's choices),
//! `validate.rs` (the rules [`SimConfig::validate`] enforces), `schema.rs`
//! (the JSON Schema); this file holds [`SimConfig`], the limits and the serde
//! helpers the others share.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod guest;
mod host;
mod schema;
mod validate;
mod vm;
mod workload;

pub use guest::*;
pub use host::*;
pub use schema::*;
pub use vm::*;
pub use workload::*;

/// The whole experiment: one host, its VMs, a seed and a duration.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// The host.
    pub host: HostConfig,
    /// A tuple of [`Vm`][vcpulab.sim.Vm] entries.
    #[schemars(length(min = 1))]
    pub vms: Vec<VmConfig>,
    /// Simulated time limit, ns. The run also ends earlier when every VM with
    /// a finite `iterations` has completed them.
    #[schemars(range(min = 1, max = limits::MAX_DURATION_NS))]
    pub duration_ns: u64,
    /// Seed of the run's RNG (PCG64); same seed and config → identical results.
    pub seed: u64,
    /// Record the per-host-CPU trace (`Result.trace`). Default False.
    pub trace: bool,
    /// Iterations completing before this instant are not counted
    /// in ops, throughput and latency (time categories cover the whole
    /// run), ns. Default 0.
    pub warmup_ns: u64,
    /// With `trace`, record only the slices that end after
    /// this instant, ns (whole slices, not clipped): a sched map of a
    /// window of a long run then needs only that window's rows.
    /// Default 0 (from the start).
    #[schemars(extend("x-omit-default" = true))]
    pub trace_from_ns: u64,
    /// With `trace`, record only the slices that start
    /// before this instant, ns; 0 = until the run's end. Default 0.
    #[schemars(extend("x-omit-default" = true))]
    pub trace_until_ns: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            duration_ns: 100_000_000,
            trace: false,
            warmup_ns: 0,
            trace_from_ns: 0,
            trace_until_ns: 0,
            host: HostConfig::default(),
            vms: vec![VmConfig::default()],
        }
    }
}

/// Hard limits, so a typo cannot ask for a billion vCPUs.
pub const MAX_PCPUS: u32 = 4096;
pub const MAX_VCPUS_TOTAL: u64 = 65_536;
pub const MAX_PHASES: usize = 256;

/// The limits of the configuration's fields: the one place from which both
/// [`SimConfig::validate`] and the JSON Schema ([`json_schema`], the
/// `#[schemars(range(..))]` attributes) take them. Python's dataclasses read
/// them from the schema (`vcpulab.sim.config_schema()`).
pub mod limits {
    /// Upper bound of a cost or latency, ns (1 s).
    pub const MAX_COST_NS: u64 = 1_000_000_000;
    /// Upper bound of `Host.token_skew_ns` (10 s, `sched.relaxed_co`'s largest `skew_us`).
    pub const MAX_TOKEN_SKEW_NS: u64 = 10_000_000_000;
    /// Upper bound of a phase's compute or sleep time, ns (1000 s).
    pub const MAX_PHASE_NS: u64 = 1_000_000_000_000;
    /// Upper bound of `duration_ns` (2^50 ns, about 13 days).
    pub const MAX_DURATION_NS: u64 = 1 << 50;
    /// Lower bound of a period or slice (tick, slices, bursts), ns.
    pub const MIN_PERIOD_NS: u64 = 1_000;
    /// Lower bound of `tsc_khz` (1 MHz).
    pub const MIN_TSC_KHZ: u64 = 1_000;
    /// Scheduler weights: the kernel's nice-to-weight table (nice 19 .. -20 is 15 .. 88761;
    /// 2 is the smallest weight the simulator's arithmetic takes).
    pub const MIN_WEIGHT: u64 = 2;
    pub const MAX_WEIGHT: u64 = 88_761;
    /// A kernel `unsigned int` module parameter (`ple_window*`, `halt_poll_ns*`).
    pub const UINT_MAX: u64 = u32::MAX as u64;
    pub const MAX_THREADS_PER_CORE: u32 = 8;
    pub const MAX_LB_BUSY_FACTOR: u32 = 1024;
    pub const MIN_SMT_SPEED_PCT: u32 = 10;
    /// `HostSpeed`'s levels, percent of the nominal speed.
    pub const MIN_SPEED_PCT: u32 = 10;
    pub const MAX_SPEED_PCT: u32 = 1000;
    /// Shortest guest tick period, ns (CONFIG_HZ=10000 would be 100 µs; real guests use 100-1000 Hz).
    pub const MIN_GUEST_TICK_NS: u64 = 100_000;
    /// Host noise: bursts per second, and the shortest mean burst, ns.
    pub const MAX_NOISE_HZ: f64 = 100_000.0;
    pub const MIN_NOISE_NS: u64 = 100;
    /// Host noise may take at most half a CPU (`hz * ns <= 0.5e9`).
    pub const MAX_NOISE_SHARE_NS_PER_S: f64 = 0.5e9;
    pub const MAX_CANDIDATE_NS: u64 = 1_000_000;
    pub const MAX_LOCK_ID: u32 = 1023;
    /// `Lock.sites` (the phase's last lock, `lock + sites - 1`, is at most `MAX_LOCK_ID`).
    pub const MAX_LOCK_SITES: u32 = MAX_LOCK_ID + 1;
    /// `Ipi.targets` and `Send.to` (also bounded by the VM's vCPUs / threads).
    pub const MAX_IPI_TARGETS: u32 = 65_535;
    /// Guest threads per vCPU.
    pub const MAX_THREADS_PER_VCPU: u64 = 16;
    pub const MAX_SPIN_ITER_CYCLES: u64 = 1_000_000;
    pub const MAX_SPIN_THRESHOLD: u64 = 1_000_000_000;
    /// `HostNoise.kthreads_per_cpu`.
    pub const MAX_KTHREADS_PER_CPU: u32 = 64;
    /// `TaskQueue.tasks`, per frame.
    pub const MAX_TASKS: u32 = 1_000_000;
    /// A list of one VM's vCPUs (`Pv.guest_idle_poll_vcpus`): at most the run's total vCPUs.
    pub const MAX_VCPU_LIST: usize = super::MAX_VCPUS_TOTAL as usize;
}

// ---- serde defaults and schema helpers shared by the topic files

fn is_one_u32(x: &u32) -> bool {
    *x == 1
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn is_true(x: &bool) -> bool {
    *x
}

/// `vcpulab.sched`'s default slice (`slice_us=4000`), ns.
fn default_token_slice_ns() -> u64 {
    4_000_000
}

/// `vcpulab.sched.relaxed_co`'s default skew (`skew_us=3000`), ns.
fn default_token_skew_ns() -> u64 {
    3_000_000
}

fn is_default_token_skew_ns(x: &u64) -> bool {
    *x == default_token_skew_ns()
}

fn is_default_token_slice_ns(x: &u64) -> bool {
    *x == default_token_slice_ns()
}

fn dist_fixed() -> Dist {
    Dist::Fixed
}
fn mode_user() -> Mode {
    Mode::User
}
fn one() -> f64 {
    1.0
}
fn one_u32() -> u32 {
    1
}
fn lock_ticket() -> LockKind {
    LockKind::Ticket
}
fn ns_1000() -> u64 {
    1_000
}
fn ns_100000() -> u64 {
    100_000
}

/// `HostConfig.idle_states`: (exit_latency_ns, target_residency_ns) pairs, each <= 1 s.
fn idle_states_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let t =
        schemars::json_schema!({"type": "integer", "format": "uint64", "minimum": 0, "maximum": limits::MAX_COST_NS});
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "array", "prefixItems": [t, t], "minItems": 2, "maxItems": 2},
    })
}

fn vcpu_pcpus_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "integer", "format": "uint32", "minimum": 0, "maximum": MAX_PCPUS - 1},
        "maxItems": MAX_VCPUS_TOTAL,
    })
}
