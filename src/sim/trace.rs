//! The optional per-host-CPU trace: one record per interval a task ran on a
//! host CPU, for sched maps ([S4]).

use super::state::Why;

/// One interval: which vCPU (or background task: vm = vcpu = -1) ran on
/// `pcpu` from `start_ns` to `end_ns`, and why the interval ended.
///
/// 32 bytes a record (checked below): a traced 1-second 8 × 20 yield storm
/// keeps ~16 M of them, so the record's size is the trace's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRec {
    pub start_ns: u64,
    pub end_ns: u64,
    pub pcpu: u32,
    pub vm: i32,
    pub vcpu: i32,
    pub why: Why,
}

const _: () = assert!(std::mem::size_of::<TraceRec>() == 32);
