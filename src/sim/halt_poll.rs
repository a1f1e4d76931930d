//! Halt polling ([K3]): the per-vCPU state machine of
//! `kvm_vcpu_halt` with four window policies, and a small deterministic event
//! simulation of vCPUs halting on one host CPU.
//!
//! # The state machine ([`HaltPollState`])
//!
//! One value per vCPU, driven by the caller with times in ns:
//!
//! 1. [`HaltPollState::on_halt`] at the start of `kvm_vcpu_halt`: reads the
//!    maximum, clamps the window (`v.halt_poll_ns`) to it and says whether and
//!    until when to poll;
//! 2. while polling, the caller checks for a wake event (`kvm_vcpu_check_block`)
//!    and for another runnable task on the CPU (`single_task_running()`); when
//!    the poll loop ends without a wake event (the window is over or another task
//!    became runnable) it calls [`HaltPollState::on_poll_stop`] and blocks;
//! 3. [`HaltPollState::on_wakeup`] when `kvm_vcpu_wake_up` wakes the *blocked* vCPU
//!    (`halt_wakeup++`);
//! 4. [`HaltPollState::on_halt_end`] when the vCPU leaves `kvm_vcpu_halt`: with
//!    `waited = false` if the poll loop saw the event (or `kvm_vcpu_block`
//!    returned without sleeping), `true` after it slept. It updates the stats
//!    where the kernel does and grows/shrinks the window by the policy.
//!
//! Policies ([`Policy`]):
//! * `Off`: never poll (as the kernel with a maximum of 0);
//! * `Fixed`: always poll up to the maximum (Feb 2015, before the dynamic series);
//! * `DynamicV3`: Wanpeng Li's 2015 v3 (never merged), as vcpulab reconstructs
//!   it from the review's description (the patch text was not found): a halt
//!   whose interrupt the poll caught shrinks the window (÷`shrink`, 0 = reset);
//!   a halt that slept but lasted less than `v4_idle_ns` grows it (×`grow`,
//!   the first step to `v3_start_ns`, 500 µs: the review's "0 → 500 µs");
//!   longer halts shrink it. On an idle ticking guest this gives the review's
//!   oscillation 0 → 500 µs → 1 ms → 2 ms → 4 ms → 0;
//! * `DynamicV4`: Wanpeng Li's 2015 v4 (never merged): grow when the interrupt
//!   arrived while polling, shrink when the vCPU was idle. vcpulab's
//!   reconstruction from [S5]: the window starts at `v4_start_ns`
//!   (default: the maximum) and "idle" means a halt that slept longer than
//!   `v4_idle_ns`; a failed poll of a shorter halt changes nothing;
//! * `BlockTime`: upstream since v4.3 (`aca6ff29c406`, later refined): the decision
//!   compares the whole halt (poll + block) with the window and the maximum.
//!
//! # The scenario simulation ([`simulate`])
//!
//! vCPUs share one host CPU under a FIFO, non-preemptive scheduler
//! (simplification: no time slices; the bursts here are µs long). Other host
//! work on that CPU ([`Background`]) is an on/off process: while "busy",
//! another task is runnable there, so `single_task_running()` is false and
//! polls stop at once; vCPUs still get the CPU first (simplification: CFS
//! wake-up preemption of a CPU-bound task is taken as immediate). Each vCPU loops: run guest code for `wake_to_cue_ns` (entry,
//! interrupt handler, its loop), announce "about to halt" (the cue of the real
//! ping-pong), run `cue_to_halt_ns` more (instructions + the HLT exit), then
//! enter `kvm_vcpu_halt`. Its interrupts come either from a host sender that
//! waits `gap` after each cue (the real MSI ping-pong) or from a periodic timer
//! (an idle ticking guest). A polling vCPU holds the CPU; it stops when another
//! task becomes runnable there. A blocked vCPU is runnable again as soon as its
//! interrupt arrives, and runs `wake_latency_ns` (+ exponential jitter) later at
//! the earliest (scheduler wake-up, context switch, return to the halt path).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::SimError;

/// `KVM_HALT_POLL_NS_DEFAULT` on x86, ns (kernel default).
pub const KVM_HALT_POLL_NS_DEFAULT: u64 = 200_000;
/// `halt_poll_ns_grow` default (kernel).
pub const DEFAULT_GROW: u32 = 2;
/// `halt_poll_ns_grow_start` default, ns (kernel).
pub const DEFAULT_GROW_START: u64 = 10_000;
/// `halt_poll_ns_shrink` default (kernel, since ~v6.8; 0 = reset before).
pub const DEFAULT_SHRINK: u32 = 2;
/// v4's idle threshold, ns (vcpulab reconstruction: one 100 Hz tick).
pub const DEFAULT_V4_IDLE_NS: u64 = 10_000_000;
/// A kernel `unsigned int` (the module parameters and the per-VM cap).
pub const UINT_MAX: u64 = u32::MAX as u64;
/// Upper bound of `v4_idle_ns`, ns (10^13 ns, about 2.8 h).
pub const MAX_V4_IDLE_NS: u64 = 10_000_000_000_000;
/// v3's first growth, ns (the review's "0 → 500 µs"; also the fixed
/// `halt_poll_ns` of the 4.0-4.2 kernels that the series started from).
pub const DEFAULT_V3_START_NS: u64 = 500_000;

/// Which rule sets the per-vCPU poll window. One vocabulary for the engine
/// (`HaltPoll.policy`) and the calibration model (`halt_poll.Params.policy`):
/// `off`, `fixed`, `dynamic-v3`, `dynamic-v4`, `block-time`. The engine's
/// first names (`dynamic` = block-time, `dynamic_v4`) are read as aliases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "HaltPollPolicy")]
pub enum Policy {
    /// Block at once.
    Off,
    /// Always poll up to the maximum (the Feb 2015 `halt_poll_ns`).
    Fixed,
    /// The 2015 v3 proposal (never merged; vcpulab's reconstruction).
    DynamicV3,
    /// The 2015 v4 proposal (never merged; vcpulab's reconstruction).
    #[serde(alias = "dynamic_v4", alias = "v4")]
    DynamicV4,
    /// Upstream since 4.3: grow or shrink from the length of the whole halt.
    #[serde(alias = "dynamic")]
    BlockTime,
}

/// The policy names, in the order documented.
pub const POLICY_NAMES: [&str; 5] = ["off", "fixed", "dynamic-v3", "dynamic-v4", "block-time"];

impl Policy {
    /// A policy by name, or one of its old names (the serde aliases above,
    /// the one list of them).
    pub fn parse(s: &str) -> Result<Policy, String> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
            format!("policy must be one of {}, got {s:?}", POLICY_NAMES.map(|n| format!("'{n}'")).join(", "))
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Policy::Off => "off",
            Policy::Fixed => "fixed",
            Policy::DynamicV3 => "dynamic-v3",
            Policy::DynamicV4 => "dynamic-v4",
            Policy::BlockTime => "block-time",
        }
    }
}

fn d_halt_poll_ns() -> u64 {
    KVM_HALT_POLL_NS_DEFAULT
}
fn d_grow() -> u32 {
    DEFAULT_GROW
}
fn d_grow_start() -> u64 {
    DEFAULT_GROW_START
}
fn d_shrink() -> u32 {
    DEFAULT_SHRINK
}
fn d_v4_idle() -> u64 {
    DEFAULT_V4_IDLE_NS
}
fn d_v3_start() -> u64 {
    DEFAULT_V3_START_NS
}
fn d_policy() -> Policy {
    Policy::Off
}
fn d_true() -> bool {
    true
}

/// The module parameters, the per-VM cap and the policy ([K3]).
/// The one halt-polling configuration: the engine's `VmConfig.halt_poll`
/// and the calibration model's (Python: `vcpulab.sim.HaltPoll`). JSON names
/// carry their unit (`max_ns`, `grow_start_ns`); the kernel's parameter names
/// `halt_poll_ns` and `grow_start` are read as aliases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HaltPollConfig {
    /// `"off"` (block at once; default), `"fixed"` (always poll
    /// up to `max_ns`, the Feb 2015 halt_poll_ns), `"block-time"`
    /// (upstream since 4.3: the per-vCPU window grows when a halt was
    /// short and shrinks when it was longer than `max_ns`, §3.2),
    /// `"dynamic-v3"` or `"dynamic-v4"` (the 2015 v3 and v4
    /// proposals, never merged; vcpulab's reconstructions from the
    /// review, see [`vcpulab.sim.halt_poll`][]). The same names as
    /// `halt_poll.Params.policy`; the old `"dynamic"` and
    /// `"dynamic_v4"` are read as `"block-time"` and `"dynamic-v4"`
    /// with a DeprecationWarning. The window and the stats come from
    /// the same per-vCPU state machine (and the same Rust configuration
    /// type) as [`vcpulab.sim.halt_poll`][].
    #[serde(default = "d_policy")]
    pub policy: Policy,
    /// halt_poll_ns (or the KVM_CAP_HALT_POLL value), ns. Default
    /// 200000 (kernel x86 `KVM_HALT_POLL_NS_DEFAULT`).
    #[serde(default = "d_halt_poll_ns", rename = "max_ns", alias = "halt_poll_ns")]
    #[schemars(range(max = UINT_MAX))]
    pub halt_poll_ns: u64,
    /// halt_poll_ns_grow, multiplier (0: never grow; a kernel uint).
    /// Default 2 (kernel).
    #[serde(default = "d_grow")]
    pub grow: u32,
    /// halt_poll_ns_grow_start, ns: the first non-zero
    /// window; a window shrunk below it becomes 0. Default 10000 (kernel).
    #[serde(default = "d_grow_start", rename = "grow_start_ns", alias = "grow_start")]
    #[schemars(range(max = UINT_MAX))]
    pub grow_start: u64,
    /// halt_poll_ns_shrink, divisor; 0 resets to 0 (a kernel uint).
    /// Default 2 (kernel ≥ ~6.8; 0 before).
    #[serde(default = "d_shrink")]
    pub shrink: u32,
    /// False when the guest turned host polling off by writing
    /// 0 to `MSR_KVM_POLL_CONTROL` (its own cpuidle-haltpoll driver
    /// then polls instead, see `Pv.guest_idle_poll_ns`). Default True.
    #[serde(default = "d_true")]
    pub poll_allowed: bool,
    /// Per-VM maximum set with `KVM_CAP_HALT_POLL`
    /// (`override_halt_poll_ns`), ns; None (default): not set, `max_ns`
    /// applies (kernel `kvm_vcpu_max_halt_poll_ns`).
    #[serde(default)]
    #[schemars(range(max = UINT_MAX))]
    #[schemars(extend("x-omit-default" = true))]
    pub vm_max_ns: Option<u64>,
    /// `"dynamic-v4"` only: the initial window, ns; None
    /// (default): the maximum. vcpulab reconstruction (v4 was never
    /// merged): with 0, v4 never polls, since it grows only when an
    /// interrupt arrives while polling.
    #[serde(default)]
    #[schemars(range(max = UINT_MAX))]
    #[schemars(extend("x-omit-default" = true))]
    pub v4_start_ns: Option<u64>,
    /// `"dynamic-v3"` / `"dynamic-v4"`: a halt that slept
    /// longer than this is "idle" and shrinks the window, ns. Default
    /// 10000000 (vcpulab reconstruction: one 100 Hz tick; guests ticking
    /// at 250 Hz and up are not idle, as in [S5]'s 15 % C0 result).
    #[serde(default = "d_v4_idle")]
    #[schemars(range(min = 1, max = MAX_V4_IDLE_NS))]
    #[schemars(extend("x-omit-default" = true))]
    pub v4_idle_ns: u64,
    /// `"dynamic-v3"` only: the first growth from 0, ns.
    /// Default 500000 (the review's "0 → 500 µs").
    #[serde(default = "d_v3_start")]
    #[schemars(range(max = UINT_MAX))]
    #[schemars(extend("x-omit-default" = true))]
    pub v3_start_ns: u64,
}

impl Default for HaltPollConfig {
    fn default() -> Self {
        HaltPollConfig::new(Policy::Off)
    }
}

impl HaltPollConfig {
    pub fn new(policy: Policy) -> Self {
        HaltPollConfig {
            policy,
            halt_poll_ns: KVM_HALT_POLL_NS_DEFAULT,
            grow: DEFAULT_GROW,
            grow_start: DEFAULT_GROW_START,
            shrink: DEFAULT_SHRINK,
            vm_max_ns: None,
            poll_allowed: true,
            v4_start_ns: None,
            v4_idle_ns: DEFAULT_V4_IDLE_NS,
            v3_start_ns: DEFAULT_V3_START_NS,
        }
    }

    /// `kvm_vcpu_max_halt_poll_ns`: the per-VM cap when set, else the module parameter.
    pub fn max_ns(&self) -> u64 {
        self.vm_max_ns.unwrap_or(self.halt_poll_ns)
    }

    /// Check each field against the limits its attributes state
    /// (`#[schemars(range(…))]`: [`UINT_MAX`], [`MAX_V4_IDLE_NS`]), read
    /// back from this type's JSON Schema by the walk `SimConfig::validate`
    /// uses; the error names the field by its JSON name. Used where the
    /// calibration model runs this configuration alone; inside a
    /// `SimConfig` the whole config's walk has checked it.
    pub fn validate(&self) -> Result<(), String> {
        static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
        let s = SCHEMA.get_or_init(|| {
            serde_json::to_value(schemars::schema_for!(HaltPollConfig)).expect("the schema serialises")
        });
        let v = serde_json::to_value(self).map_err(|e| format!("invalid halt-poll configuration: {e}"))?;
        super::schema_walk::check_ranges(s, s, &v, "")
    }
}

/// The kernel's halt-polling stats of one vCPU ([K3]), plus
/// the number of grow/shrink decisions (the `kvm_halt_poll_ns` tracepoint).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HaltStats {
    pub halt_exits: u64,
    pub halt_successful_poll: u64,
    pub halt_attempted_poll: u64,
    pub halt_poll_invalid: u64,
    pub halt_wakeup: u64,
    pub halt_poll_success_ns: u64,
    pub halt_poll_fail_ns: u64,
    pub halt_wait_ns: u64,
    pub grows: u64,
    pub shrinks: u64,
}

/// What one halt did (returned by [`HaltPollState::on_halt_end`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HaltRecord {
    pub start: u64,
    /// The clamped window this halt polled for (0 if it did not poll), ns.
    pub window_ns: u64,
    /// Time spent in the poll loop, ns.
    pub poll_ns: u64,
    /// Whole halt (poll + block), ns.
    pub halt_ns: u64,
    pub waited: bool,
    pub polled: bool,
}

#[derive(Clone, Copy, Debug)]
struct Current {
    start: u64,
    poll_end: u64,
    do_poll: bool,
    allowed: bool,
    window: u64,
}

/// Per-vCPU halt-polling state: `vcpu->halt_poll_ns` and the stats.
#[derive(Clone, Debug, Default)]
pub struct HaltPollState {
    /// `vcpu->halt_poll_ns`, ns.
    pub halt_poll_ns: u64,
    pub stats: HaltStats,
    cur: Option<Current>,
}

impl HaltPollState {
    pub fn new(cfg: &HaltPollConfig) -> Self {
        let halt_poll_ns = match cfg.policy {
            Policy::DynamicV4 => cfg.v4_start_ns.unwrap_or_else(|| cfg.max_ns()),
            Policy::Fixed => cfg.max_ns(),
            Policy::Off | Policy::BlockTime | Policy::DynamicV3 => 0, // a new vCPU starts at 0
        };
        HaltPollState { halt_poll_ns, stats: HaltStats::default(), cur: None }
    }

    /// True between [`on_halt`](Self::on_halt) and [`on_halt_end`](Self::on_halt_end).
    pub fn halted(&self) -> bool {
        self.cur.is_some()
    }

    /// The guest executed HLT (`__kvm_emulate_halt`: `halt_exits++`). The
    /// caller then calls [`on_halt`](Self::on_halt), unless a wake-up is
    /// already pending (the kernel then skips `kvm_vcpu_halt`).
    pub fn on_halt_exit(&mut self) {
        self.stats.halt_exits += 1;
    }

    /// Start of `kvm_vcpu_halt` at `now`. Returns the poll deadline, or None
    /// when it does not poll.
    pub fn on_halt(&mut self, cfg: &HaltPollConfig, now: u64) -> Option<u64> {
        let max = if cfg.policy == Policy::Off { 0 } else { cfg.max_ns() };
        let allowed = cfg.poll_allowed;
        if cfg.policy == Policy::Fixed {
            self.halt_poll_ns = max;
        }
        if self.halt_poll_ns > max {
            self.halt_poll_ns = max;
        }
        let do_poll = allowed && self.halt_poll_ns != 0;
        let window = if do_poll { self.halt_poll_ns } else { 0 };
        self.cur = Some(Current { start: now, poll_end: now, do_poll, allowed, window });
        do_poll.then(|| now.saturating_add(window))
    }

    /// The poll loop ended at `now` without seeing a wake event (window over,
    /// or another task became runnable): `poll_end = now`; the vCPU now blocks.
    pub fn on_poll_stop(&mut self, now: u64) {
        if let Some(c) = self.cur.as_mut() {
            c.poll_end = now.max(c.start);
        }
    }

    /// `kvm_vcpu_wake_up` woke this vCPU from `kvm_vcpu_block`'s sleep.
    pub fn on_wakeup(&mut self) {
        self.stats.halt_wakeup += 1;
    }

    /// The vCPU leaves `kvm_vcpu_halt` at `now`. `waited`: it slept in
    /// `kvm_vcpu_block` (false: the poll loop saw the event, or the block
    /// returned at once). `valid_wakeup`: `kvm_vcpu_valid_wakeup` (always true
    /// on x86). Returns None if no halt was in progress.
    pub fn on_halt_end(
        &mut self,
        cfg: &HaltPollConfig,
        now: u64,
        waited: bool,
        valid_wakeup: bool,
    ) -> Option<HaltRecord> {
        let mut c = self.cur.take()?;
        let now = now.max(c.start);
        if !waited {
            // the poll loop's `goto out`: poll_end is the last time it looked
            c.poll_end = if c.do_poll { now } else { c.poll_end };
        } else {
            self.stats.halt_wait_ns += now - c.poll_end.min(now);
        }
        let halt_ns = now - c.start;
        let poll_ns = c.poll_end.min(now) - c.start;
        if c.do_poll {
            self.stats.halt_attempted_poll += 1;
            if !waited {
                self.stats.halt_successful_poll += 1;
                if !valid_wakeup {
                    self.stats.halt_poll_invalid += 1;
                }
                self.stats.halt_poll_success_ns += poll_ns;
            } else {
                self.stats.halt_poll_fail_ns += poll_ns;
            }
        }
        if c.allowed {
            let max = if cfg.policy == Policy::Off { 0 } else { cfg.max_ns() }; // re-read
            match cfg.policy {
                Policy::Off => self.halt_poll_ns = 0,
                Policy::Fixed => self.halt_poll_ns = max,
                Policy::BlockTime => {
                    if !valid_wakeup {
                        self.shrink(cfg);
                    } else if max != 0 {
                        if halt_ns <= self.halt_poll_ns {
                            // the window was enough
                        } else if self.halt_poll_ns != 0 && halt_ns > max {
                            self.shrink(cfg);
                        } else if self.halt_poll_ns < max && halt_ns < max {
                            self.grow(cfg);
                        }
                    } else {
                        self.halt_poll_ns = 0;
                    }
                }
                Policy::DynamicV3 => {
                    if max == 0 {
                        self.halt_poll_ns = 0;
                    } else if c.do_poll && !waited {
                        // the poll caught the interrupt: the window was enough, try less
                        self.shrink(cfg);
                    } else if waited && halt_ns < cfg.v4_idle_ns {
                        // slept, but not idle: a longer window might have caught it
                        if self.halt_poll_ns < max {
                            self.grow_from(cfg, cfg.v3_start_ns);
                        }
                    } else if waited && self.halt_poll_ns != 0 {
                        self.shrink(cfg);
                    }
                }
                Policy::DynamicV4 => {
                    if max == 0 {
                        self.halt_poll_ns = 0;
                    } else if c.do_poll && !waited {
                        // an interrupt arrived while polling
                        if self.halt_poll_ns < max {
                            self.grow(cfg);
                        }
                    } else if waited && halt_ns > cfg.v4_idle_ns && self.halt_poll_ns != 0 {
                        // idle vCPU detected
                        self.shrink(cfg);
                    }
                }
            }
        }
        Some(HaltRecord { start: c.start, window_ns: c.window, poll_ns, halt_ns, waited, polled: c.do_poll })
    }

    /// `grow_halt_poll_ns`: ×grow, at least grow_start; no clamp (next halt clamps).
    fn grow(&mut self, cfg: &HaltPollConfig) {
        self.grow_from(cfg, cfg.grow_start)
    }

    /// `grow` with another first step (v3).
    fn grow_from(&mut self, cfg: &HaltPollConfig, start: u64) {
        if cfg.grow == 0 {
            return;
        }
        let mut val = self.halt_poll_ns.saturating_mul(cfg.grow as u64).min(u32::MAX as u64);
        if val < start {
            val = start;
        }
        self.halt_poll_ns = val;
        self.stats.grows += 1;
    }

    /// `shrink_halt_poll_ns`: ÷shrink (0: reset); below grow_start becomes 0.
    fn shrink(&mut self, cfg: &HaltPollConfig) {
        let mut val = if cfg.shrink == 0 { 0 } else { self.halt_poll_ns / cfg.shrink as u64 };
        if val < cfg.grow_start {
            val = 0;
        }
        self.halt_poll_ns = val;
        self.stats.shrinks += 1;
    }
}

// ============================================================ the scenario simulation

/// Where a vCPU's interrupts come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Wake {
    /// The real MSI ping-pong: the host sender sees the "about to halt" cue,
    /// waits `gap_ns` more (fixed, or exponential with that mean), sends.
    Message {
        gap_ns: u64,
        #[serde(default)]
        exponential: bool,
    },
    /// A periodic guest timer (the idle ticking guest).
    Timer { hz: u32 },
}

/// Host and guest costs, ns (defaults: measured by `vcpulab.calibrate` on
/// the project's machine; see `python/vcpulab/sim/halt_poll.py`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    /// Halt end → the guest announces its next halt (VM entry, interrupt handler, loop).
    pub wake_to_cue_ns: u64,
    /// The cue → `kvm_vcpu_halt` starts (remaining instructions, HLT exit).
    pub cue_to_halt_ns: u64,
    /// The sender: the cue is visible → it starts waiting the gap.
    pub cue_observe_ns: u64,
    /// MSI ioctl → the interrupt is pending for the vCPU.
    pub deliver_ns: u64,
    /// Pending interrupt → the poll loop notices it.
    pub poll_detect_ns: u64,
    /// Blocked vCPU made runnable → running again in `kvm_vcpu_halt` (idle CPU).
    pub wake_latency_ns: u64,
    /// Mean of an exponential extra delay added to each wake-up (host noise).
    pub wake_jitter_ns: u64,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            wake_to_cue_ns: 19_600,
            cue_to_halt_ns: 4_650,
            cue_observe_ns: 200,
            deliver_ns: 3_000,
            poll_detect_ns: 200,
            wake_latency_ns: 27_200,
            wake_jitter_ns: 0,
        }
    }
}

/// Other work on the host CPU: alternating busy periods (another task is
/// runnable there; exponential, mean `busy_ns`) and idle periods (exponential,
/// mean `idle_ns`). The busy fraction is `busy_ns / (busy_ns + idle_ns)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Background {
    pub busy_ns: u64,
    pub idle_ns: u64,
}

/// One simulated experiment: vCPUs halting on one host CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub halt_poll: HaltPollConfig,
    /// One entry per vCPU (all pinned to the same host CPU).
    pub vcpus: Vec<Wake>,
    #[serde(default)]
    pub costs: Costs,
    #[serde(default)]
    pub background: Option<Background>,
    /// Stop after this much simulated time, ns (0: no limit).
    #[serde(default)]
    pub duration_ns: u64,
    /// Stop each message-passing vCPU after this many round trips (0: no limit).
    #[serde(default)]
    pub rounds: u64,
    #[serde(default)]
    pub seed: u64,
    /// Keep one trace row per halt.
    #[serde(default)]
    pub trace: bool,
}

impl Scenario {
    pub fn validate(&self) -> Result<(), String> {
        self.halt_poll.validate()?;
        if self.vcpus.is_empty() {
            return Err("vcpus must list at least one vCPU".into());
        }
        if self.vcpus.len() > 4096 {
            return Err(format!("vcpus: at most 4096 vCPUs, got {}", self.vcpus.len()));
        }
        for (i, w) in self.vcpus.iter().enumerate() {
            if let Wake::Timer { hz } = w {
                if !(1..=1_000_000).contains(hz) {
                    return Err(format!("vcpus[{i}].hz must be 1..=1000000, got {hz}"));
                }
            }
        }
        if self.duration_ns == 0 && self.rounds == 0 {
            return Err("duration_ns or rounds must be > 0 (the run must end)".into());
        }
        if self.duration_ns == 0 && self.vcpus.iter().any(|w| matches!(w, Wake::Timer { .. })) {
            return Err("duration_ns must be > 0 with timer-driven vCPUs".into());
        }
        if let Some(b) = &self.background {
            if b.busy_ns == 0 || b.idle_ns == 0 {
                return Err("background.busy_ns and background.idle_ns must be > 0".into());
            }
            if b.busy_ns > 10_000_000_000_000 || b.idle_ns > 10_000_000_000_000 {
                return Err("background.busy_ns and background.idle_ns must be <= 10^13".into());
            }
        }
        let lim = 10_000_000_000_000u64; // 10^4 s: keeps every sum far from overflow
        let c = &self.costs;
        for (n, v) in [
            ("costs.wake_to_cue_ns", c.wake_to_cue_ns),
            ("costs.cue_to_halt_ns", c.cue_to_halt_ns),
            ("costs.cue_observe_ns", c.cue_observe_ns),
            ("costs.deliver_ns", c.deliver_ns),
            ("costs.poll_detect_ns", c.poll_detect_ns),
            ("costs.wake_latency_ns", c.wake_latency_ns),
            ("costs.wake_jitter_ns", c.wake_jitter_ns),
            ("duration_ns", self.duration_ns),
        ] {
            if v > lim {
                return Err(format!("{n} must be <= {lim}, got {v}"));
            }
        }
        if self.rounds > 100_000_000 {
            return Err(format!("rounds must be <= 100000000, got {}", self.rounds));
        }
        if c.wake_to_cue_ns + c.cue_to_halt_ns == 0 {
            return Err(
                "costs.wake_to_cue_ns + costs.cue_to_halt_ns must be > 0 (a vCPU needs time between halts)".into()
            );
        }
        Ok(())
    }
}

/// Per-vCPU results: the kernel stats plus host CPU and latency measures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct VcpuResult {
    pub stats: HaltStats,
    /// Host CPU time spent in the poll loop, ns (= success_ns + fail_ns).
    pub poll_cpu_ns: u64,
    /// Host CPU time of the vCPU thread (guest code, exits, polling), ns.
    pub busy_ns: u64,
    /// Interrupt pending → vCPU back from `kvm_vcpu_halt`, per halt, ns.
    pub wake_latency_ns: Vec<u64>,
    /// MSI sent → next cue (the real experiment's round trip), ns.
    pub rtt_ns: Vec<u64>,
    /// `vcpu->halt_poll_ns` at the end, ns.
    pub final_halt_poll_ns: u64,
    /// Mean clamped window over halts, ns.
    pub mean_window_ns: f64,
    pub rounds: u64,
}

/// One row per halt (when `trace` is set).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HaltTrace {
    pub vcpu: Vec<u32>,
    pub start_ns: Vec<u64>,
    pub window_ns: Vec<u64>,
    pub poll_ns: Vec<u64>,
    pub halt_ns: Vec<u64>,
    pub waited: Vec<bool>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScenarioResult {
    pub vcpus: Vec<VcpuResult>,
    /// Simulated time at the end, ns.
    pub end_ns: u64,
    /// Time another task was runnable on the CPU, ns.
    pub background_ns: u64,
    pub trace: Option<HaltTrace>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Task {
    Vcpu(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// vCPU `i` reaches its cue (epoch-free: only one guest segment at a time).
    Cue(usize),
    /// vCPU `i` executes HLT: `kvm_vcpu_halt` starts.
    Halt(usize),
    /// The interrupt for vCPU `i` becomes pending.
    Irq(usize),
    /// Poll window of vCPU `i` ends (stale unless the epoch matches).
    PollStop(usize, u64),
    /// The poll loop of vCPU `i` noticed its interrupt.
    PollHit(usize, u64),
    /// The task chosen by the CPU starts running.
    Start(Task),
    /// Background work on the CPU turns busy (true) or idle (false).
    Bg(bool),
    /// Timer tick for vCPU `i`.
    Tick(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VState {
    /// Running guest code (holds the CPU).
    Guest,
    /// Polling in `kvm_vcpu_halt` (holds the CPU).
    Polling,
    /// Asleep in `kvm_vcpu_block`.
    Blocked,
    /// Woken, waiting for the CPU.
    Waking,
    /// Finished its rounds.
    Done,
    /// Not started yet.
    Fresh,
}

struct V {
    wake: Wake,
    hp: HaltPollState,
    st: VState,
    pending: bool,
    epoch: u64,
    irq_at: u64,
    sent_at: Option<u64>,
    res: VcpuResult,
    seg_start: u64,
    windows: u128,
}

struct Sim<'a> {
    sc: &'a Scenario,
    now: u64,
    q: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    cpu: Option<Task>,
    runq: VecDeque<(Task, u64)>,
    v: Vec<V>,
    rng: Pcg64,
    bg_ns: u64,
    bg_busy: bool,
    bg_since: u64,
    trace: Option<HaltTrace>,
}

impl Sim<'_> {
    fn push(&mut self, t: u64, e: Ev) {
        self.seq += 1;
        self.q.push(Reverse((t, self.seq, e)));
    }

    fn exp(&mut self, mean: u64) -> u64 {
        if mean == 0 {
            return 0;
        }
        let u: f64 = self.rng.random::<f64>();
        (-(1.0 - u).ln() * mean as f64).min(1e15) as u64
    }

    /// A task becomes runnable on the CPU at `now`, able to run from `ready`.
    fn enqueue(&mut self, t: Task, ready: u64) {
        self.runq.push_back((t, ready));
        // single_task_running() is now false: a polling holder stops polling
        if let Some(Task::Vcpu(i)) = self.cpu {
            if self.v[i].st == VState::Polling {
                self.poll_stop(i);
            }
        }
        self.dispatch();
    }

    fn release(&mut self) {
        self.cpu = None;
        self.dispatch();
    }

    fn dispatch(&mut self) {
        if self.cpu.is_some() {
            return;
        }
        if let Some((t, ready)) = self.runq.pop_front() {
            self.cpu = Some(t);
            self.push(ready.max(self.now), Ev::Start(t));
        }
    }

    fn charge(&mut self, i: usize) {
        let v = &mut self.v[i];
        v.res.busy_ns += self.now - v.seg_start;
        v.seg_start = self.now;
    }

    /// The poll loop of vCPU `i` ends without an interrupt: it blocks.
    fn poll_stop(&mut self, i: usize) {
        self.charge(i);
        let v = &mut self.v[i];
        v.hp.on_poll_stop(self.now);
        if v.pending {
            // kvm_vcpu_block finds the event already pending: returns without sleeping
            self.halt_end(i, false);
            return;
        }
        v.st = VState::Blocked;
        v.epoch += 1;
        self.release();
    }

    fn halt_end(&mut self, i: usize, waited: bool) {
        let cfg = &self.sc.halt_poll;
        let v = &mut self.v[i];
        if let Some(r) = v.hp.on_halt_end(cfg, self.now, waited, true) {
            v.res.wake_latency_ns.push(self.now.saturating_sub(v.irq_at));
            v.windows += r.window_ns as u128;
            if let Some(tr) = self.trace.as_mut() {
                tr.vcpu.push(i as u32);
                tr.start_ns.push(r.start);
                tr.window_ns.push(r.window_ns);
                tr.poll_ns.push(r.poll_ns);
                tr.halt_ns.push(r.halt_ns);
                tr.waited.push(r.waited);
            }
        }
        v.pending = false;
        v.st = VState::Guest;
        v.seg_start = self.now;
        let c = &self.sc.costs;
        let t = self.now + c.wake_to_cue_ns;
        self.push(t, Ev::Cue(i));
    }

    fn start_halt(&mut self, i: usize) {
        let cfg = &self.sc.halt_poll;
        let v = &mut self.v[i];
        v.hp.on_halt_exit();
        let deadline = v.hp.on_halt(cfg, self.now);
        v.epoch += 1;
        let ep = v.epoch;
        let others = !self.runq.is_empty() || self.bg_busy;
        match deadline {
            Some(stop) => {
                v.st = VState::Polling;
                if v.pending {
                    // kvm_vcpu_check_block fails at the first look
                    let t = self.now;
                    self.push(t, Ev::PollHit(i, ep));
                } else if others {
                    // the loop body runs once, then single_task_running() is false
                    self.poll_stop(i);
                } else {
                    self.push(stop, Ev::PollStop(i, ep));
                }
            }
            None => {
                if v.pending {
                    // kvm_vcpu_block returns without sleeping
                    self.charge(i);
                    self.halt_end(i, false);
                } else {
                    self.charge(i);
                    self.v[i].st = VState::Blocked;
                    self.release();
                }
            }
        }
    }

    fn run(&mut self, interrupted: &dyn Fn() -> bool) -> Result<(), SimError> {
        let sc = self.sc;
        let end = if sc.duration_ns == 0 { u64::MAX } else { sc.duration_ns };
        // a bound on the vCPU events of a run that can only be exceeded by a bug
        // (a stuck vCPU); background on/off events do not count (a background of
        // 1 ns periods is valid and makes many of them)
        let mut budget: u64 =
            if sc.duration_ns == 0 { 1_000_000 + 64 * sc.rounds * sc.vcpus.len() as u64 } else { u64::MAX };
        let mut events: u64 = 0;
        while let Some(Reverse((t, _, e))) = self.q.pop() {
            if t > end {
                break;
            }
            events += 1;
            if events & ((1 << 16) - 1) == 0 && interrupted() {
                return Err(SimError::Interrupted);
            }
            if !matches!(e, Ev::Bg(_)) {
                budget = budget.saturating_sub(1);
            }
            if budget == 0 {
                return Err(SimError::Bug(format!("the halt-poll model's run did not finish by t={t} ns")));
            }
            self.now = t;
            match e {
                Ev::Start(Task::Vcpu(i)) => {
                    let v = &mut self.v[i];
                    v.seg_start = self.now;
                    match v.st {
                        VState::Waking => self.halt_end(i, true),
                        VState::Fresh => {
                            v.st = VState::Guest;
                            let t = self.now + sc.costs.wake_to_cue_ns;
                            self.push(t, Ev::Cue(i));
                        }
                        s => unreachable!("vCPU {i} started in state {s:?}"),
                    }
                }
                Ev::Bg(busy) => {
                    let Some(b) = sc.background.clone() else { continue };
                    if self.bg_busy {
                        self.bg_ns += self.now - self.bg_since;
                    }
                    self.bg_busy = busy;
                    self.bg_since = self.now;
                    let next = if busy { self.exp(b.busy_ns) } else { self.exp(b.idle_ns) };
                    self.push(self.now + next.max(1), Ev::Bg(!busy));
                    if busy {
                        if let Some(Task::Vcpu(i)) = self.cpu {
                            if self.v[i].st == VState::Polling {
                                self.poll_stop(i);
                            }
                        }
                    }
                }
                Ev::Cue(i) => {
                    let c = &sc.costs;
                    if let Wake::Message { gap_ns, exponential } = self.v[i].wake {
                        if let Some(s) = self.v[i].sent_at.take() {
                            self.v[i].res.rtt_ns.push(self.now - s + c.cue_observe_ns);
                            self.v[i].res.rounds += 1;
                        }
                        if sc.rounds != 0 && self.v[i].res.rounds >= sc.rounds {
                            self.charge(i);
                            self.v[i].st = VState::Done;
                            self.release();
                            continue;
                        }
                        let gap = if exponential { self.exp(gap_ns) } else { gap_ns };
                        let send = self.now + c.cue_observe_ns + gap;
                        self.v[i].sent_at = Some(send);
                        self.push(send + c.deliver_ns, Ev::Irq(i));
                    }
                    self.push(self.now + c.cue_to_halt_ns, Ev::Halt(i));
                }
                Ev::Halt(i) => self.start_halt(i),
                Ev::Tick(i) => {
                    if let Wake::Timer { hz } = self.v[i].wake {
                        let period = 1_000_000_000 / hz as u64;
                        self.push(self.now + period.max(1), Ev::Tick(i));
                    }
                    self.irq(i);
                }
                Ev::Irq(i) => self.irq(i),
                Ev::PollStop(i, ep) => {
                    if self.v[i].epoch == ep && self.v[i].st == VState::Polling {
                        self.poll_stop(i);
                    }
                }
                Ev::PollHit(i, ep) => {
                    if self.v[i].epoch == ep && self.v[i].st == VState::Polling {
                        self.charge(i);
                        self.halt_end(i, false);
                    }
                }
            }
            if self.v.iter().all(|v| v.st == VState::Done) {
                break;
            }
        }
        if sc.duration_ns != 0 && self.v.iter().any(|v| v.st != VState::Done) {
            // a timed run ends at its duration, not at its last event
            self.now = end;
        }
        // charge the CPU holder up to the end
        if let Some(Task::Vcpu(i)) = self.cpu {
            if matches!(self.v[i].st, VState::Guest | VState::Polling) {
                let now = self.now;
                let v = &mut self.v[i];
                v.res.busy_ns += now.saturating_sub(v.seg_start);
                if v.st == VState::Polling {
                    // an unfinished poll: count its CPU time (not a kernel stat yet)
                    v.res.poll_cpu_ns += now.saturating_sub(v.seg_start);
                }
            }
        }
        Ok(())
    }

    /// The interrupt of vCPU `i` becomes pending.
    fn irq(&mut self, i: usize) {
        let detect = self.sc.costs.poll_detect_ns;
        let v = &mut self.v[i];
        if v.pending || v.st == VState::Done {
            return;
        }
        v.pending = true;
        v.irq_at = self.now;
        match v.st {
            VState::Polling => {
                let ep = v.epoch;
                let t = self.now + detect;
                self.push(t, Ev::PollHit(i, ep));
            }
            VState::Blocked => {
                v.hp.on_wakeup();
                v.st = VState::Waking;
                let j = self.exp(self.sc.costs.wake_jitter_ns);
                let ready = self.now + self.sc.costs.wake_latency_ns + j;
                self.enqueue(Task::Vcpu(i), ready);
            }
            VState::Guest | VState::Waking | VState::Done | VState::Fresh => {}
        }
    }
}

/// Runs a scenario. Deterministic for a given `seed`. Never panics on valid
/// input; callers across an FFI should still wrap it in `catch_unwind`.
pub fn simulate(sc: &Scenario) -> Result<ScenarioResult, SimError> {
    simulate_checked(sc, &|| false)
}

/// [`simulate`], polling `interrupted()` every 2^16 events; when it returns
/// true the run stops with [`SimError::Interrupted`]. An invalid scenario is
/// [`SimError::Config`] naming the field.
pub fn simulate_checked(sc: &Scenario, interrupted: &dyn Fn() -> bool) -> Result<ScenarioResult, SimError> {
    sc.validate().map_err(SimError::Config)?;
    let mut sim = Sim {
        sc,
        now: 0,
        q: BinaryHeap::new(),
        seq: 0,
        cpu: None,
        runq: VecDeque::new(),
        v: sc
            .vcpus
            .iter()
            .map(|w| V {
                wake: w.clone(),
                hp: HaltPollState::new(&sc.halt_poll),
                st: VState::Fresh,
                pending: false,
                epoch: 0,
                irq_at: 0,
                sent_at: None,
                res: VcpuResult::default(),
                seg_start: 0,
                windows: 0,
            })
            .collect(),
        rng: Pcg64::seed_from_u64(sc.seed),
        bg_ns: 0,
        bg_busy: false,
        bg_since: 0,
        trace: sc.trace.then(HaltTrace::default),
    };
    // every vCPU starts queued on the CPU, about to run guest code up to its first cue
    for i in 0..sc.vcpus.len() {
        sim.runq.push_back((Task::Vcpu(i), 0));
        if let Wake::Timer { hz } = sc.vcpus[i] {
            let period = 1_000_000_000 / hz as u64;
            sim.push(period.max(1), Ev::Tick(i));
        }
    }
    sim.dispatch();
    if let Some(b) = &sc.background {
        // start in the stationary state: busy with probability busy / (busy + idle)
        let rho = b.busy_ns as f64 / (b.busy_ns as f64 + b.idle_ns as f64);
        let busy = sim.rng.random::<f64>() < rho;
        sim.push(0, Ev::Bg(busy));
    }
    sim.run(interrupted)?;
    let end = sim.now;
    if sim.bg_busy {
        sim.bg_ns += end.saturating_sub(sim.bg_since);
    }
    let vcpus = sim
        .v
        .into_iter()
        .map(|mut v| {
            let s = &v.hp.stats;
            v.res.poll_cpu_ns += s.halt_poll_success_ns + s.halt_poll_fail_ns;
            v.res.final_halt_poll_ns = v.hp.halt_poll_ns;
            v.res.mean_window_ns = if s.halt_exits > 0 { v.windows as f64 / s.halt_exits as f64 } else { 0.0 };
            v.res.stats = v.hp.stats.clone();
            v.res
        })
        .collect();
    Ok(ScenarioResult { vcpus, end_ns: end, background_ns: sim.bg_ns, trace: sim.trace })
}

#[cfg(test)]
#[path = "halt_poll_tests.rs"]
mod tests;
