//! What vcpulab's vCPU scheduler decides, shared by the real scheduler
//! (`src/kvm/sched/`, `Run.schedule`) and its simulated twin
//! (`src/sim/tokens.rs`, the simulator's `Result.schedule`): one name per
//! reason a run token changes hands, on both sides.

/// Why a token changed hands (the `why` of a decision: `kvm::sched::Decision`
/// on a real run, a row of the simulator's schedule log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Why {
    /// The run's first tokens, once every vCPU thread has arrived.
    #[default]
    Start,
    /// The holder's slice ended.
    Slice,
    /// A directed yield: the spinner's token went to the candidate.
    Yield,
    /// Relaxed co-scheduling stopped the holder (too far ahead of a sibling).
    CoStop,
    /// The holder halted (pv halt bracket).
    Halt,
    /// The holder's program finished or its thread stopped.
    Done,
    /// A gang turn passed to the next VM.
    Gang,
    /// The watchdog kicked a holder that overran its slice.
    Watchdog,
    /// A vCPU woken from its halt got an idle CPU's token.
    Wake,
}

impl Why {
    pub const ALL: [Why; 9] =
        [Why::Start, Why::Slice, Why::Yield, Why::CoStop, Why::Halt, Why::Done, Why::Gang, Why::Watchdog, Why::Wake];
    pub fn name(self) -> &'static str {
        match self {
            Why::Start => "start",
            Why::Slice => "slice",
            Why::Yield => "yield",
            Why::CoStop => "co_stop",
            Why::Halt => "halt",
            Why::Done => "done",
            Why::Gang => "gang",
            Why::Watchdog => "watchdog",
            Why::Wake => "wake",
        }
    }
}
