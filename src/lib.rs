//! vcpulab's Rust core.
//!
//! * [`kvm`]: safe wrappers around real KVM (all ioctl/mmap `unsafe` lives here).
//! * [`schedule`]: the reasons vcpulab's vCPU scheduler gives a token on, shared by
//!   the real scheduler and the simulator's twin of it.
//! * [`sim`]: the deterministic overcommit simulator (no `unsafe`, no pyo3).
//! * `py` (feature `python`): the only pyo3 code, a thin binding layer.
//!
//! Comments cite their sources by tag: `[S1]`-`[S5]` are the published threads and
//! `[K1]`-`[K7]` the kernel files and documents listed in docs/sources.md.

pub mod kvm;
pub mod schedule;
pub mod sim;

#[cfg(feature = "python")]
mod py;
