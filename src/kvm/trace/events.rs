//! The decoded events of a trace, and the decoder's state: which tracepoint
//! a raw record is, its fields, the KVM exit names, the bounded event list.

use super::*;

/// A decoded event. `tid`/`pid` are the thread and process that ran when it
/// fired (`PERF_SAMPLE_TID`); comms are indices into [`Collected::comms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub time_ns: u64,
    pub cpu: u32,
    pub tid: u32,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Switch {
        prev_pid: i32,
        prev_comm: u32,
        next_pid: i32,
        next_comm: u32,
    },
    Wakeup {
        pid: i32,
        target_cpu: i32,
    },
    /// `reason`: index into [`Collected::exit_reasons`].
    KvmExit {
        reason: u32,
        vcpu_id: u32,
    },
    KvmEntry {
        vcpu_id: u32,
    },
    /// End of a halt: its length (polling included), whether it waited (did not
    /// end in the poll loop) and whether the wake-up was valid.
    VcpuWakeup {
        ns: u64,
        waited: bool,
        valid: bool,
    },
    HaltPollNs {
        vcpu_id: u32,
        new: u32,
        old: u32,
        grow: bool,
    },
    /// `reason`: index into [`Collected::exit_reasons`] (the kernel's name, e.g. `KVM_EXIT_IO`).
    UserspaceExit {
        reason: u32,
        errno: i32,
    },
    MsiSetIrq,
    /// A vCPU sent an IPI through its local APIC (counted only).
    ApicIpi,
    /// The guest FPU loaded (`load`: start of KVM_RUN) or put back (its end).
    Fpu {
        load: bool,
    },
    /// vcpulab's run loop issued a `KVM_RUN` (`run_loop.rs`; `cpu` is [`NO_CPU`]).
    LoopEntry,
    /// vcpulab's run loop got a `KVM_RUN` back; `reason`: index into
    /// [`Collected::exit_reasons`] (`cpu` is [`NO_CPU`]).
    LoopExit {
        reason: u32,
    },
}

/// The `cpu` of an event that no CPU's buffer recorded (the run loop's).
pub const NO_CPU: u32 = u32::MAX;

/// Which tracepoint an id is, with the fields its decoder reads.
pub(super) enum Decoder {
    Switch { prev_pid: Field, prev_comm: Field, next_pid: Field, next_comm: Field },
    Wakeup { pid: Field, target_cpu: Field },
    KvmExit { reason: Field, isa: Option<Field>, vcpu_id: Field },
    KvmEntry { vcpu_id: Field },
    VcpuWakeup { ns: Field, waited: Field, valid: Field },
    HaltPollNs { vcpu_id: Field, new: Field, old: Field, grow: Field },
    UserspaceExit { reason: Field, errno: Field },
    MsiSetIrq,
    ApicIpi,
    Fpu { load: Field },
}

impl Decoder {
    pub(super) fn new(fmt: &EventFormat) -> Result<Self> {
        let f = |n: &str| fmt.field(n);
        Ok(match fmt.name.as_str() {
            "sched_switch" => Decoder::Switch {
                prev_pid: f("prev_pid")?,
                prev_comm: f("prev_comm")?,
                next_pid: f("next_pid")?,
                next_comm: f("next_comm")?,
            },
            "sched_wakeup" => Decoder::Wakeup { pid: f("pid")?, target_cpu: f("target_cpu")? },
            "kvm_exit" => Decoder::KvmExit { reason: f("exit_reason")?, isa: f("isa").ok(), vcpu_id: f("vcpu_id")? },
            "kvm_entry" => Decoder::KvmEntry { vcpu_id: f("vcpu_id")? },
            "kvm_vcpu_wakeup" => Decoder::VcpuWakeup { ns: f("ns")?, waited: f("waited")?, valid: f("valid")? },
            "kvm_halt_poll_ns" => {
                Decoder::HaltPollNs { vcpu_id: f("vcpu_id")?, new: f("new")?, old: f("old")?, grow: f("grow")? }
            }
            "kvm_userspace_exit" => Decoder::UserspaceExit { reason: f("reason")?, errno: f("errno")? },
            "kvm_msi_set_irq" => Decoder::MsiSetIrq,
            "kvm_apic_ipi" => Decoder::ApicIpi,
            "kvm_fpu" => Decoder::Fpu { load: f("load")? },
            other => return Err(Error::Unsupported(format!("no decoder for tracepoint {other}"))),
        })
    }

    pub(super) fn is_kvm(&self) -> bool {
        !matches!(self, Decoder::Switch { .. } | Decoder::Wakeup { .. })
    }
}

/// Exit-reason names from `kvm_exit`'s print format: the table applied to
/// `exit_reason & 0xffff` when `isa` is 1 (VMX), the one applied to the plain
/// `exit_reason` otherwise (SVM), as the kernel's own `TP_printk` does.
#[derive(Debug, Default, Clone)]
pub struct ExitNames {
    pub(super) vmx: HashMap<i64, String>,
    pub(super) other: HashMap<i64, String>,
}

impl ExitNames {
    pub fn from_format(fmt: &EventFormat) -> Self {
        let mut n = ExitNames::default();
        for (arg, table) in fmt.symbol_tables() {
            let map: HashMap<i64, String> = table.into_iter().collect();
            if arg.contains("0xffff") {
                n.vmx = map;
            } else if arg.contains("exit_reason") {
                n.other = map;
            }
        }
        n
    }

    /// The kernel's name of `reason` (or `reason 0x…` when it has none).
    pub fn name(&self, reason: u32, isa: Option<i64>) -> String {
        let hit = if isa == Some(1) {
            self.vmx.get(&((reason & 0xffff) as i64))
        } else {
            // the SVM table spells -1 for 0xffffffff
            self.other.get(&(reason as i64)).or_else(|| self.other.get(&(reason as i32 as i64)))
        };
        hit.cloned().unwrap_or_else(|| format!("reason {reason:#x}"))
    }
}

/// Everything a trace recorded.
#[derive(Debug, Default)]
pub struct Collected {
    pub events: Vec<Event>,
    /// The KVM tracepoints were recorded ([`TraceOptions::kvm_events`]).
    pub kvm_events: bool,
    /// Task names seen (indices of `Kind::Switch`'s comms).
    pub comms: Vec<Comm>,
    /// Exit-reason names (indices of `Kind::KvmExit`'s reason).
    pub exit_reasons: Vec<String>,
    /// Records the kernel could not write because a ring buffer was full.
    pub lost: u64,
    /// Events decoded after `max_events` was reached (not kept).
    pub dropped: u64,
    /// Records whose raw data was shorter than its format (not kept).
    pub malformed: u64,
    /// The earliest time of a dropped event, CLOCK_MONOTONIC ns: every event
    /// before it was kept (the reader drains the CPUs' buffers in turn, so
    /// events dropped from one CPU's buffer may predate ones kept from
    /// another's); None when nothing was dropped.
    pub first_dropped_ns: Option<u64>,
    /// Per buffer's CPU, the earliest time of an event dropped from it: that
    /// CPU's own records (its switches) are complete before it.
    pub first_dropped_by_cpu: HashMap<u32, u64>,
    /// Events seen per tracepoint name (kept or not; lost ones excluded).
    pub counts: HashMap<String, u64>,
    /// CPUs whose scheduler and KVM events were recorded.
    pub cpus: Vec<usize>,
    /// When recording started / stopped, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Collected {
    /// True when events are missing: the kernel's buffer was full (`lost`),
    /// the cap was reached (`dropped`), or records could not be decoded
    /// (`malformed`: a format file that does not describe the records).
    pub fn truncated(&self) -> bool {
        self.lost > 0 || self.dropped > 0 || self.malformed > 0
    }

    /// Up to when the events are complete as far as the cap goes: the first
    /// dropped event's time, else `end_ns`. Frames end there (see
    /// [`Frames::build`]); lost and malformed records leave gaps no time
    /// bounds, which [`Collected::truncated`] reports.
    pub fn complete_until_ns(&self) -> u64 {
        self.first_dropped_ns.map_or(self.end_ns, |t| t.min(self.end_ns))
    }

    /// Adds the run loop's rows (`run_loop.rs`) as events: each `KVM_RUN`'s
    /// issue and return, on no CPU, kept in time order with the kernel's;
    /// counted as `vcpulab:kvm_run` (one per row). The cap (`max_events`)
    /// holds for all of them together: past it the latest events go, counted
    /// as dropped and cut as a full buffer cuts ([`Collected::first_dropped_ns`],
    /// per CPU for the kernel's own), as do rows the log itself could not keep.
    pub fn add_run_loop(&mut self, log: LoopRows, max_events: usize) {
        let n = log.rows.len() as u64;
        let mut add = Vec::with_capacity(2 * log.rows.len());
        // each name looked up once (the rows carry a handful of static names)
        let mut index: HashMap<&'static str, u32> = HashMap::new();
        for r in &log.rows {
            let reason =
                *index.entry(r.reason).or_insert_with(|| match self.exit_reasons.iter().position(|x| x == r.reason) {
                    Some(i) => i as u32,
                    None => {
                        self.exit_reasons.push(r.reason.to_string());
                        self.exit_reasons.len() as u32 - 1
                    }
                });
            add.push(Event { time_ns: r.entry_ns, cpu: NO_CPU, tid: r.tid, kind: Kind::LoopEntry });
            add.push(Event { time_ns: r.exit_ns, cpu: NO_CPU, tid: r.tid, kind: Kind::LoopExit { reason } });
        }
        // stable: at equal times the kernel's records stay first, a row's issue before its return
        add.sort_by_key(|e| e.time_ns);
        let old = std::mem::take(&mut self.events);
        self.events = merge_by_time(old, add);
        if self.events.len() > max_events {
            for e in self.events.drain(max_events..) {
                self.dropped += 1;
                self.first_dropped_ns = Some(self.first_dropped_ns.map_or(e.time_ns, |d| d.min(e.time_ns)));
                if e.cpu != NO_CPU {
                    let t = self.first_dropped_by_cpu.entry(e.cpu).or_insert(e.time_ns);
                    *t = (*t).min(e.time_ns);
                }
            }
        }
        if n > 0 {
            self.counts.insert("vcpulab:kvm_run".into(), n);
        }
        self.dropped += log.dropped;
        if let Some(t) = log.first_dropped_ns {
            self.first_dropped_ns = Some(self.first_dropped_ns.map_or(t, |d| d.min(t)));
        }
    }
}

/// Two time-sorted event lists as one (`a`'s first at equal times).
fn merge_by_time(a: Vec<Event>, b: Vec<Event>) -> Vec<Event> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.time_ns <= y.time_ns,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.push(if take_a { a.next() } else { b.next() }.expect("peeked"));
    }
}

/// Trace limits.
#[derive(Debug, Clone, Copy)]
pub struct TraceOptions {
    /// Cap on decoded events kept (memory: about 40 bytes each).
    pub max_events: usize,
    /// Kernel ring buffer per CPU, bytes (rounded up to a power of two).
    pub buffer_bytes: usize,
    /// Keep KVM events only of this process's threads (None: every process).
    pub kvm_pid: Option<i32>,
    /// Record the KVM tracepoints (exits, halts, halt-poll windows, MSIs,
    /// IPIs); false: only `sched_switch` and `sched_wakeup` (a sched map's
    /// events, at none of the exits' recording cost).
    pub kvm_events: bool,
    /// The exits to user space of this process's vCPUs are timed by their own
    /// run loop ([`Tracer::exit_log`], `run_loop.rs`), not by the kernel's
    /// `kvm_userspace_exit` and `kvm_fpu` records, which are not opened.
    pub run_loop_exits: bool,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            max_events: DEFAULT_MAX_EVENTS,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            kvm_pid: None,
            kvm_events: true,
            run_loop_exits: false,
        }
    }
}

pub(super) struct Decoding {
    /// The recorded tracepoints, found by a linear scan of their ids (about
    /// ten: cheaper than hashing the id of every record).
    pub(super) tracepoints: Vec<Recorded>,
    pub(super) common_type: Field,
    pub(super) exit_names: ExitNames,
    pub(super) uexit_names: HashMap<i64, String>,
    /// Exit reasons already interned, by the record's numbers (no name is
    /// formatted or hashed per record).
    pub(super) reason_index: HashMap<ReasonKey, u32>,
    pub(super) comm_index: HashMap<Comm, u32>,
    pub(super) traced: Vec<bool>,
    pub(super) opts: TraceOptions,
    pub(super) out: Collected,
}

/// One recorded tracepoint: its id, `system:event` name, decoder and the
/// events of it decoded so far (`Collected::counts`).
pub(super) struct Recorded {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) decoder: Decoder,
    pub(super) seen: u64,
}

/// What names an exit reason: `kvm_exit`'s (reason, isa), or
/// `kvm_userspace_exit`'s reason with its errno class (0: none, 1: -EINTR,
/// 2: another error), as the print format names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum ReasonKey {
    Kvm(u32, Option<i64>),
    User(i64, u8),
}

impl Decoding {
    pub(super) fn comm(&mut self, c: Comm) -> u32 {
        let n = self.out.comms.len() as u32;
        *self.comm_index.entry(c).or_insert_with(|| {
            self.out.comms.push(c);
            n
        })
    }

    /// The index of an exit reason in `Collected::exit_reasons`, its name
    /// made (by `name`) only the first time the key is seen.
    pub(super) fn exit_reason(&mut self, key: ReasonKey) -> u32 {
        if let Some(&i) = self.reason_index.get(&key) {
            return i;
        }
        let name = match key {
            ReasonKey::Kvm(reason, isa) => self.exit_names.name(reason, isa),
            // as the event's print format: a negative errno is "restart" (-EINTR) or "error"
            ReasonKey::User(_, 1) => "restart".to_string(),
            ReasonKey::User(_, 2) => "error".to_string(),
            ReasonKey::User(reason, _) => {
                self.uexit_names.get(&reason).cloned().unwrap_or_else(|| format!("KVM_EXIT {reason}"))
            }
        };
        // two keys may share a name ("error" of any reason): one index per name
        let i = match self.out.exit_reasons.iter().position(|n| *n == name) {
            Some(i) => i as u32,
            None => {
                self.out.exit_reasons.push(name);
                self.out.exit_reasons.len() as u32 - 1
            }
        };
        self.reason_index.insert(key, i);
        i
    }

    pub(super) fn sample(&mut self, time_ns: u64, cpu: u32, pid: u32, tid: u32, raw: &[u8]) {
        let Some(ty) = read_int(raw, &self.common_type) else {
            self.out.malformed += 1;
            return;
        };
        let Some(tp) = self.tracepoints.iter().position(|t| t.id == ty as u64) else { return };
        let dec = &self.tracepoints[tp].decoder;
        if dec.is_kvm() && self.opts.kvm_pid.is_some_and(|p| p as u32 != pid) {
            return;
        }
        let traced = |c: i64| usize::try_from(c).ok().and_then(|c| self.traced.get(c).copied()).unwrap_or(false);
        // decode into plain values first (borrowing the decoder), then intern
        enum Pre {
            Switch(i64, Comm, i64, Comm),
            Exit(u32, Option<i64>, u32),
            Uexit(i64, i64),
            Done(Kind),
            Skip,
        }
        let r = |f: &Field| read_int(raw, f);
        let pre = (|| -> Option<Pre> {
            Some(match dec {
                Decoder::Switch { prev_pid, prev_comm, next_pid, next_comm } => {
                    Pre::Switch(r(prev_pid)?, read_comm(raw, prev_comm)?, r(next_pid)?, read_comm(raw, next_comm)?)
                }
                Decoder::Wakeup { pid, target_cpu } => {
                    let t = r(target_cpu)?;
                    if !traced(t) {
                        Pre::Skip
                    } else {
                        Pre::Done(Kind::Wakeup { pid: r(pid)? as i32, target_cpu: t as i32 })
                    }
                }
                Decoder::KvmExit { reason, isa, vcpu_id } => {
                    let isa = match isa {
                        Some(f) => Some(r(f)?),
                        None => None,
                    };
                    Pre::Exit(r(reason)? as u32, isa, r(vcpu_id)? as u32)
                }
                Decoder::KvmEntry { vcpu_id } => Pre::Done(Kind::KvmEntry { vcpu_id: r(vcpu_id)? as u32 }),
                Decoder::VcpuWakeup { ns, waited, valid } => {
                    Pre::Done(Kind::VcpuWakeup { ns: r(ns)? as u64, waited: r(waited)? != 0, valid: r(valid)? != 0 })
                }
                Decoder::HaltPollNs { vcpu_id, new, old, grow } => Pre::Done(Kind::HaltPollNs {
                    vcpu_id: r(vcpu_id)? as u32,
                    new: r(new)? as u32,
                    old: r(old)? as u32,
                    grow: r(grow)? != 0,
                }),
                Decoder::UserspaceExit { reason, errno } => Pre::Uexit(r(reason)?, r(errno)?),
                Decoder::MsiSetIrq => Pre::Done(Kind::MsiSetIrq),
                Decoder::ApicIpi => Pre::Done(Kind::ApicIpi),
                // only a load (the next KVM_RUN's entry) is read (`Frames::build`); the
                // kernel's filter keeps puts out where it can (`Tracer::start`)
                Decoder::Fpu { load } => {
                    if r(load)? != 0 {
                        Pre::Done(Kind::Fpu { load: true })
                    } else {
                        Pre::Skip
                    }
                }
            })
        })();
        let Some(pre) = pre else {
            self.out.malformed += 1;
            return;
        };
        if matches!(pre, Pre::Skip) {
            return;
        }
        self.tracepoints[tp].seen += 1;
        if self.out.events.len() >= self.opts.max_events {
            self.drop_event(time_ns, cpu);
            return;
        }
        let kind = match pre {
            Pre::Switch(pp, pc, np, nc) => {
                let (pc, nc) = (self.comm(pc), self.comm(nc));
                Kind::Switch { prev_pid: pp as i32, prev_comm: pc, next_pid: np as i32, next_comm: nc }
            }
            Pre::Exit(reason, isa, vcpu_id) => {
                Kind::KvmExit { reason: self.exit_reason(ReasonKey::Kvm(reason, isa)), vcpu_id }
            }
            Pre::Uexit(reason, errno) => {
                let class = match errno {
                    e if e < 0 && e == -(libc::EINTR as i64) => 1,
                    e if e < 0 => 2,
                    _ => 0,
                };
                Kind::UserspaceExit { reason: self.exit_reason(ReasonKey::User(reason, class)), errno: errno as i32 }
            }
            Pre::Done(k) => k,
            Pre::Skip => unreachable!("returned above"),
        };
        if self.out.events.try_reserve(1).is_err() {
            self.drop_event(time_ns, cpu);
            return;
        }
        self.out.events.push(Event { time_ns, cpu, tid, kind });
    }

    pub(super) fn drop_event(&mut self, time_ns: u64, cpu: u32) {
        self.out.dropped += 1;
        self.out.first_dropped_ns = Some(self.out.first_dropped_ns.map_or(time_ns, |t| t.min(time_ns)));
        let t = self.out.first_dropped_by_cpu.entry(cpu).or_insert(time_ns);
        *t = (*t).min(time_ns);
    }
}
