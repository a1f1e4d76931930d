//! The optional per-host-CPU trace: one record per interval a task ran on a
//! host CPU, for sched maps ([S4]).

/// One interval: which vCPU (or background task: vm = vcpu = -1) ran on
/// `pcpu` from `start_ns` to `end_ns`, and why the interval ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRec {
    pub pcpu: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub vm: i64,
    pub vcpu: i64,
    pub why: &'static str,
}
