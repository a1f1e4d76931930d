//! Real KVM: safe wrappers over kvm-ioctls for everything vcpulab drives.
//!
//! All `unsafe` of the project lives in this module tree; every block carries a
//! `// SAFETY:` comment. Guest-memory access is bounds-checked at the API.
//!
//! * [`system::Host`]: `/dev/kvm`, capabilities, PV features.
//! * [`vm::Vm`]: guest RAM, irqchip, halt-poll and exit-disable knobs, MSIs, stats.
//! * [`vcpu::Vcpu`]: registers, MSRs, CPUID, steal time, run loops with deadlines.
//! * [`guest`]: the long-mode environment and the iced-x86 guest programs.
//! * [`trace`]: scheduler and KVM tracepoints of a run (perf_event_open, decoded with the format files).
//! * [`foreign`]: another process (pidfd), its KVM stats fds duplicated once and checked (`attach`).
//! * [`mounts`]: debugfs / tracefs mounted by mount(2) where missing, and what this process mounted.
//! * [`sched`]: vcpulab's own vCPU scheduler (run tokens per host CPU; round robin, gang, relaxed
//!   co-scheduling, balance, directed yield with the simulator's policies) and the pv bytes it publishes.
//! * [`stats`], [`steal`], [`kick`], [`exit`], [`memory`]: the building blocks.

pub mod error;
pub mod exit;
pub mod experiment;
pub mod foreign;
pub mod guest;
pub mod kick;
pub mod memory;
pub mod mounts;
pub mod os;
pub mod sched;
pub mod stats;
pub mod steal;
pub mod system;
pub mod trace;
pub mod vcpu;
pub mod vm;

pub use error::{Error, Result};
pub use exit::{Exit, IoDir};
pub use system::Host;
pub use vcpu::{RunOutcome, RunUntil, Ucall, Vcpu};
pub use vm::{Vm, VmOptions};

#[cfg(test)]
mod tests;
