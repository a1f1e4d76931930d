//! Kernel tracepoints of a run: scheduler and KVM events, per host CPU,
//! through `perf_event_open` (the `perf-event2` crate), decoded with the
//! kernel's own event format files.
//!
//! One ring buffer per traced CPU: the first event opened on a CPU owns it
//! (`perf_event2::Sampler`), every other tracepoint on that CPU writes into it
//! (`PERF_EVENT_IOC_SET_OUTPUT`). Each sample carries `PERF_SAMPLE_TID | TIME
//! | CPU | RAW`; its time is `CLOCK_MONOTONIC` (`attr.clockid`), so it lines up
//! with [`monotonic_ns`](super::os::monotonic_ns) and the run's start. A reader thread drains the
//! buffers (woken by `poll` when a buffer is a quarter full, or every 50 ms)
//! and decodes each raw record with the field offsets, sizes and signedness
//! of `/sys/kernel/tracing/events/<system>/<event>/format`; the event is
//! recognised by its `common_type` field (the tracepoint's id). Nothing of
//! ftrace's global state is touched, so other tracers keep working.
//!
//! Memory is bounded twice: the kernel's ring buffer (`buffer_bytes` per CPU;
//! records that do not fit are counted by the kernel as lost) and the decoded
//! event list (`max_events`; further events are counted as dropped). Either
//! sets `truncated`. Dropping a [`Tracer`] stops the reader and closes every
//! perf fd, on every path (error, Ctrl-C, deadline).
//!
//! Which events, on which CPUs (see [`EVENTS`]):
//! * on the traced CPUs: `sched:sched_switch` and the KVM events;
//! * on every online CPU: `sched:sched_wakeup` whose `target_cpu` is traced
//!   (a wake-up is raised on the waker's CPU, which may be another one).
//!
//! KVM events are kept only for threads of one process (`kvm_pid`), so other
//! VMs running on the same CPUs do not fill the buffer.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use perf_event::events::Tracepoint;
use perf_event::{Builder, Clock, Counter, SampleFlag, Sampler};

use super::error::{Error, Result};
use super::os::monotonic_ns;

/// The tracepoints recorded, as (system, event, required). A missing optional
/// event (an older kernel) is skipped; a missing required one is an error.
pub const EVENTS: &[(&str, &str, bool)] = &[
    ("sched", "sched_switch", true),
    ("sched", "sched_wakeup", true),
    ("kvm", "kvm_exit", true),
    ("kvm", "kvm_entry", true),
    ("kvm", "kvm_vcpu_wakeup", true),
    ("kvm", "kvm_halt_poll_ns", false),
    ("kvm", "kvm_userspace_exit", false),
    ("kvm", "kvm_msi_set_irq", false),
    ("kvm", "kvm_apic_ipi", false),
    ("kvm", "kvm_fpu", false),
];

/// Default cap on decoded events: 2 M events of 40 bytes (80 MB).
pub const DEFAULT_MAX_EVENTS: usize = 2_000_000;
/// Default kernel ring buffer per traced CPU, bytes (a power of two).
pub const DEFAULT_BUFFER_BYTES: usize = 4 << 20;

// ------------------------------------------------------------------ tracefs

/// The `events` directory of tracefs. Mounts tracefs at /sys/kernel/tracing
/// when it is absent and this process is root ([`super::mounts`]: by mount(2);
/// it stays mounted).
pub fn events_dir() -> Result<PathBuf> {
    for p in ["/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"] {
        if Path::new(p).join("sched").is_dir() {
            return Ok(PathBuf::from(p));
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::TraceUnavailable(
            "tracefs is not mounted at /sys/kernel/tracing and this process is not root to mount it \
             (mount -t tracefs nodev /sys/kernel/tracing)"
                .into(),
        ));
    }
    if let Err(e) = super::mounts::ensure_mounted(super::mounts::PseudoFs::Tracefs) {
        return Err(Error::TraceUnavailable(format!("tracefs is not mounted and mounting it failed: {e}")));
    }
    let p = PathBuf::from("/sys/kernel/tracing/events");
    if p.join("sched").is_dir() {
        Ok(p)
    } else {
        Err(Error::TraceUnavailable("tracefs mounted, but it has no sched events (kernel without tracepoints)".into()))
    }
}

/// Host CPUs online now (`/sys/devices/system/cpu/online`, e.g. "0-3,6").
pub fn online_cpus() -> Vec<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let mut it = part.splitn(2, '-');
        let a = it.next().and_then(|x| x.trim().parse::<usize>().ok());
        let b = it.next().and_then(|x| x.trim().parse::<usize>().ok());
        match (a, b) {
            (Some(a), Some(b)) if b >= a => out.extend(a..=b),
            (Some(a), None) => out.push(a),
            _ => {}
        }
    }
    out
}

// ------------------------------------------------------------ format files

/// One field of a tracepoint's record, as its format file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

/// A tracepoint's format file: its id, fields and print format.
#[derive(Debug, Clone)]
pub struct EventFormat {
    pub name: String,
    pub id: u64,
    pub fields: Vec<Field>,
    pub print_fmt: String,
}

impl EventFormat {
    /// Parses the text of `events/<system>/<event>/format`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |what: &str| Error::InvalidArgument(format!("tracepoint format file: {what}"));
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        let mut print_fmt = String::new();
        for line in text.lines() {
            let l = line.trim();
            if let Some(v) = l.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = l.strip_prefix("ID:") {
                id = Some(v.trim().parse::<u64>().map_err(|_| bad("bad ID"))?);
            } else if let Some(v) = l.strip_prefix("print fmt:") {
                print_fmt = v.trim().to_string();
            } else if l.starts_with("field:") {
                // field:TYPE NAME[N];	offset:O;	size:S;	signed:G;
                let mut decl = None;
                let (mut off, mut size, mut signed) = (None, None, None);
                for part in l.split(';').map(str::trim).filter(|p| !p.is_empty()) {
                    if let Some(d) = part.strip_prefix("field:") {
                        decl = Some(d.trim());
                    } else if let Some(v) = part.strip_prefix("offset:") {
                        off = v.parse::<usize>().ok();
                    } else if let Some(v) = part.strip_prefix("size:") {
                        size = v.parse::<usize>().ok();
                    } else if let Some(v) = part.strip_prefix("signed:") {
                        signed = v.parse::<u8>().ok().map(|s| s != 0);
                    }
                }
                let decl = decl.ok_or_else(|| bad("field without a declaration"))?;
                // the name is the last word, without an array suffix
                let last = decl.rsplit(|c: char| c.is_whitespace() || c == '*').next().unwrap_or(decl);
                let fname = last.split('[').next().unwrap_or(last).to_string();
                match (off, size, signed) {
                    (Some(offset), Some(size), Some(signed)) => {
                        fields.push(Field { name: fname, offset, size, signed })
                    }
                    _ => return Err(bad(&format!("field {fname} lacks offset, size or signed"))),
                }
            }
        }
        Ok(EventFormat {
            name: name.ok_or_else(|| bad("no name"))?,
            id: id.ok_or_else(|| bad("no ID"))?,
            fields,
            print_fmt,
        })
    }

    /// Reads `<events>/<system>/<event>/format`.
    pub fn load(events: &Path, system: &str, event: &str) -> Result<Self> {
        let p = events.join(system).join(event).join("format");
        let text = std::fs::read_to_string(&p)
            .map_err(|e| Error::TraceUnavailable(format!("tracepoint {system}:{event} ({}): {e}", p.display())))?;
        Self::parse(&text)
    }

    /// The field `name`, or an error naming the event (its format changed).
    pub fn field(&self, name: &str) -> Result<Field> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .cloned()
            .ok_or_else(|| Error::Unsupported(format!("tracepoint {} has no field {name} on this kernel", self.name)))
    }

    /// The `__print_symbolic(ARG, { value, "name" }, …)` tables of the print
    /// format, as (ARG, [(value, name)]), in order.
    pub fn symbol_tables(&self) -> Vec<(String, Vec<(i64, String)>)> {
        let mut out = Vec::new();
        let s = self.print_fmt.as_str();
        let mut rest = s;
        while let Some(i) = rest.find("__print_symbolic(") {
            rest = &rest[i + "__print_symbolic(".len()..];
            let Some(brace) = rest.find('{') else { break };
            let arg = rest[..brace].trim().trim_end_matches(',').trim().to_string();
            let mut entries = Vec::new();
            let mut cur = &rest[brace..];
            loop {
                cur = cur.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
                if !cur.starts_with('{') {
                    break;
                }
                let Some(end) = cur.find('}') else { break };
                let inner = &cur[1..end];
                if let Some((expr, names)) = inner.split_once(',') {
                    // adjacent string literals concatenate ("KVM_EXIT_" "IO")
                    let name: String = names.split('"').skip(1).step_by(2).collect();
                    if let Some(v) = eval_sum(expr) {
                        entries.push((v, name));
                    }
                }
                cur = &cur[end + 1..];
            }
            rest = cur;
            out.push((arg, entries));
        }
        out
    }
}

/// Evaluates `0x040 + 13`, `-1`, `12`: a sum of decimal / hex integers.
fn eval_sum(expr: &str) -> Option<i64> {
    let mut total: i64 = 0;
    for term in expr.split('+') {
        let t = term.trim();
        let (neg, t) = match t.strip_prefix('-') {
            Some(r) => (true, r.trim()),
            None => (false, t),
        };
        let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            i64::from_str_radix(h, 16).ok()?
        } else {
            t.parse::<i64>().ok()?
        };
        total = total.checked_add(if neg { -v } else { v })?;
    }
    Some(total)
}

/// Reads field `f` of a raw record as an integer (sign-extended when the
/// format says signed); None when the record is too short.
fn read_int(raw: &[u8], f: &Field) -> Option<i64> {
    let b = raw.get(f.offset..f.offset.checked_add(f.size)?)?;
    Some(match (f.size, f.signed) {
        (1, false) => b[0] as i64,
        (1, true) => b[0] as i8 as i64,
        (2, false) => u16::from_ne_bytes(b.try_into().ok()?) as i64,
        (2, true) => i16::from_ne_bytes(b.try_into().ok()?) as i64,
        (4, false) => u32::from_ne_bytes(b.try_into().ok()?) as i64,
        (4, true) => i32::from_ne_bytes(b.try_into().ok()?) as i64,
        (8, _) => i64::from_ne_bytes(b.try_into().ok()?),
        _ => return None,
    })
}

/// A task name (`char[16]` of the format), NUL-padded.
pub type Comm = [u8; 16];

fn read_comm(raw: &[u8], f: &Field) -> Option<Comm> {
    let b = raw.get(f.offset..f.offset.checked_add(f.size)?)?;
    let mut c = [0u8; 16];
    let n = b.len().min(16);
    c[..n].copy_from_slice(&b[..n]);
    Some(c)
}

/// The text of a comm (up to its first NUL, lossy UTF-8).
pub fn comm_str(c: &Comm) -> String {
    let n = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..n]).into_owned()
}

// ----------------------------------------------------------------- events

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
}

/// Which tracepoint an id is, with the fields its decoder reads.
enum Decoder {
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
    fn new(fmt: &EventFormat) -> Result<Self> {
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

    fn is_kvm(&self) -> bool {
        !matches!(self, Decoder::Switch { .. } | Decoder::Wakeup { .. })
    }
}

/// Exit-reason names from `kvm_exit`'s print format: the table applied to
/// `exit_reason & 0xffff` when `isa` is 1 (VMX), the one applied to the plain
/// `exit_reason` otherwise (SVM), as the kernel's own `TP_printk` does.
#[derive(Debug, Default, Clone)]
pub struct ExitNames {
    vmx: HashMap<i64, String>,
    other: HashMap<i64, String>,
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
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions { max_events: DEFAULT_MAX_EVENTS, buffer_bytes: DEFAULT_BUFFER_BYTES, kvm_pid: None }
    }
}

struct Decoding {
    decoders: HashMap<u64, (String, Decoder)>,
    common_type: Field,
    exit_names: ExitNames,
    uexit_names: HashMap<i64, String>,
    exit_index: HashMap<String, u32>,
    comm_index: HashMap<Comm, u32>,
    traced: Vec<bool>,
    opts: TraceOptions,
    /// Events seen per tracepoint id (names filled in at the end).
    seen: HashMap<u64, u64>,
    out: Collected,
}

impl Decoding {
    fn comm(&mut self, c: Comm) -> u32 {
        let n = self.out.comms.len() as u32;
        *self.comm_index.entry(c).or_insert_with(|| {
            self.out.comms.push(c);
            n
        })
    }

    fn exit_reason(&mut self, name: String) -> u32 {
        let n = self.out.exit_reasons.len() as u32;
        if let Some(&i) = self.exit_index.get(&name) {
            return i;
        }
        self.out.exit_reasons.push(name.clone());
        self.exit_index.insert(name, n);
        n
    }

    fn sample(&mut self, time_ns: u64, cpu: u32, pid: u32, tid: u32, raw: &[u8]) {
        let Some(ty) = read_int(raw, &self.common_type) else {
            self.out.malformed += 1;
            return;
        };
        let Some((_, dec)) = self.decoders.get(&(ty as u64)) else { return };
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
                Decoder::Fpu { load } => Pre::Done(Kind::Fpu { load: r(load)? != 0 }),
            })
        })();
        let Some(pre) = pre else {
            self.out.malformed += 1;
            return;
        };
        if matches!(pre, Pre::Skip) {
            return;
        }
        *self.seen.entry(ty as u64).or_insert(0) += 1;
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
                let n = self.exit_names.name(reason, isa);
                Kind::KvmExit { reason: self.exit_reason(n), vcpu_id }
            }
            Pre::Uexit(reason, errno) => {
                // as the event's print format: a negative errno is "restart" (-EINTR) or "error"
                let n = match errno {
                    e if e < 0 && e == -(libc::EINTR as i64) => "restart".to_string(),
                    e if e < 0 => "error".to_string(),
                    _ => self.uexit_names.get(&reason).cloned().unwrap_or_else(|| format!("KVM_EXIT {reason}")),
                };
                Kind::UserspaceExit { reason: self.exit_reason(n), errno: errno as i32 }
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

    fn drop_event(&mut self, time_ns: u64, cpu: u32) {
        self.out.dropped += 1;
        self.out.first_dropped_ns = Some(self.out.first_dropped_ns.map_or(time_ns, |t| t.min(time_ns)));
        let t = self.out.first_dropped_by_cpu.entry(cpu).or_insert(time_ns);
        *t = (*t).min(time_ns);
    }
}

/// One CPU's ring buffer and the other events writing into it.
struct CpuBuffer {
    sampler: Sampler,
    followers: Vec<Counter>,
}

/// A running trace. [`Tracer::stop`] returns what it recorded; dropping it
/// without `stop` stops it too (the reader thread ends, every fd is closed).
pub struct Tracer {
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Collected>>,
    cpus: Vec<usize>,
}

impl Tracer {
    /// Starts tracing `cpus` (scheduler and KVM events) and the wake-ups aimed at them.
    pub fn start(cpus: &[usize], opts: TraceOptions) -> Result<Tracer> {
        let online = online_cpus();
        if cpus.is_empty() {
            return Err(Error::InvalidArgument("tracing needs at least one host CPU".into()));
        }
        if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(Error::InvalidArgument(format!("host CPU {c} is not online (online CPUs: {online:?})")));
        }
        if opts.max_events == 0 {
            return Err(Error::InvalidArgument("max_events must be at least 1".into()));
        }
        if !(4096..=(1 << 30)).contains(&opts.buffer_bytes) {
            return Err(Error::InvalidArgument(format!(
                "buffer_bytes must be between 4 KiB and 1 GiB, got {}",
                opts.buffer_bytes
            )));
        }
        let events = events_dir()?;
        let mut decoders = HashMap::new();
        let mut ids: Vec<(u64, bool)> = Vec::new(); // (id, on every online CPU)
        let mut common_type = None;
        let mut exit_names = ExitNames::default();
        let mut uexit_names = HashMap::new();
        for &(sys, ev, required) in EVENTS {
            let fmt = match EventFormat::load(&events, sys, ev) {
                Ok(f) => f,
                Err(e) if required => return Err(e),
                Err(_) => continue,
            };
            if common_type.is_none() {
                common_type = Some(fmt.field("common_type")?);
            }
            if ev == "kvm_exit" {
                exit_names = ExitNames::from_format(&fmt);
            }
            if ev == "kvm_userspace_exit" {
                uexit_names =
                    fmt.symbol_tables().into_iter().next().map(|(_, t)| t.into_iter().collect()).unwrap_or_default();
            }
            let dec = Decoder::new(&fmt)?;
            ids.push((fmt.id, ev == "sched_wakeup"));
            decoders.insert(fmt.id, (format!("{sys}:{ev}"), dec));
        }
        let common_type = common_type.ok_or_else(|| Error::TraceUnavailable("no tracepoint format found".into()))?;
        let max_cpu = online.iter().copied().max().unwrap_or(0);
        let mut traced = vec![false; max_cpu + 1];
        for &c in cpus {
            traced[c] = true;
        }
        let mut buffers = Vec::new();
        for &cpu in &online {
            let mut leader: Option<Sampler> = None;
            let mut followers = Vec::new();
            for &(id, everywhere) in &ids {
                if !(traced[cpu] || everywhere) {
                    continue;
                }
                let mut b = Builder::new(Tracepoint::with_id(id));
                b.one_cpu(cpu)
                    .any_pid()
                    .include_kernel()
                    .sample_period(1)
                    .sample(SampleFlag::TID | SampleFlag::TIME | SampleFlag::CPU | SampleFlag::RAW)
                    .clockid(Clock::MONOTONIC)
                    .enabled(false);
                if leader.is_none() {
                    b.wakeup_watermark(opts.buffer_bytes.next_power_of_two() / 4);
                }
                let counter = b.build().map_err(|e| match e.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) => Error::TraceUnavailable(format!(
                        "perf_event_open refused a tracepoint ({e}): tracing needs root, or CAP_PERFMON and \
                         kernel.perf_event_paranoid <= 1 with read access to tracefs"
                    )),
                    _ => Error::Ioctl { call: "perf_event_open (tracepoint)", source: e },
                })?;
                match &leader {
                    None => {
                        let s = counter
                            .sampled(opts.buffer_bytes)
                            .map_err(|e| Error::Ioctl { call: "mmap (perf ring buffer)", source: e })?;
                        leader = Some(s);
                    }
                    Some(l) => {
                        // SAFETY: both are open perf event fds on the same CPU; SET_OUTPUT only
                        // redirects this event's records into the leader's ring buffer.
                        let rc = unsafe { perf_event_open_sys::ioctls::SET_OUTPUT(counter.as_raw_fd(), l.as_raw_fd()) };
                        if rc != 0 {
                            return Err(Error::last_os("PERF_EVENT_IOC_SET_OUTPUT"));
                        }
                        followers.push(counter);
                    }
                }
            }
            if let Some(sampler) = leader {
                buffers.push(CpuBuffer { sampler, followers });
            }
        }
        let start_ns = monotonic_ns();
        for b in &mut buffers {
            for f in &mut b.followers {
                f.enable().map_err(|e| Error::Ioctl { call: "PERF_EVENT_IOC_ENABLE", source: e })?;
            }
            b.sampler.enable().map_err(|e| Error::Ioctl { call: "PERF_EVENT_IOC_ENABLE", source: e })?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let dec = Decoding {
            decoders,
            common_type,
            exit_names,
            uexit_names,
            exit_index: HashMap::new(),
            comm_index: HashMap::new(),
            traced,
            opts,
            seen: HashMap::new(),
            out: Collected { cpus: cpus.to_vec(), start_ns, ..Default::default() },
        };
        let flag = stop.clone();
        // the reader runs on CPUs the trace does not watch, where there are such CPUs
        let elsewhere: Vec<usize> = super::os::allowed_cpus().into_iter().filter(|c| !cpus.contains(c)).collect();
        let reader = std::thread::Builder::new()
            .name("vcpulab-trace".into())
            .spawn(move || {
                let _ = super::os::pin_current_thread(&elsewhere);
                reader(buffers, dec, flag)
            })
            .map_err(|e| Error::Ioctl { call: "spawn trace reader thread", source: e })?;
        Ok(Tracer { stop, reader: Some(reader), cpus: cpus.to_vec() })
    }

    /// The traced CPUs.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Stops recording, drains every buffer and returns the events.
    pub fn stop(mut self) -> Result<Collected> {
        self.stop.store(true, Ordering::Release);
        let h = self.reader.take().expect("a tracer is stopped once");
        h.join().map_err(|_| Error::UnexpectedExit("the trace reader thread panicked (a bug in vcpulab)".into()))
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

fn drain(buf: &mut Sampler, dec: &mut Decoding) {
    use perf_event::data::Record as R;
    while let Some(rec) = buf.next_record() {
        match rec.parse_record() {
            Ok(R::Sample(s)) => {
                if let (Some(t), Some(cpu), Some(tid), Some(raw)) = (s.time(), s.cpu(), s.tid(), s.raw()) {
                    dec.sample(t, cpu, s.pid().unwrap_or(0), tid, raw);
                } else {
                    dec.out.malformed += 1;
                }
            }
            Ok(R::Lost(l)) => dec.out.lost += l.lost,
            Ok(_) => {}
            Err(_) => dec.out.malformed += 1,
        }
    }
}

fn reader(mut buffers: Vec<CpuBuffer>, mut dec: Decoding, stop: Arc<AtomicBool>) -> Collected {
    let mut fds: Vec<libc::pollfd> =
        buffers.iter().map(|b| libc::pollfd { fd: b.sampler.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    loop {
        if stop.load(Ordering::Acquire) {
            break;
        }
        for b in &mut buffers {
            drain(&mut b.sampler, &mut dec);
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds whose fds stay open (owned by `buffers`).
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
    }
    for b in &mut buffers {
        let _ = b.sampler.disable();
        for f in &mut b.followers {
            let _ = f.disable();
        }
    }
    // after every event is disabled: no record can carry a later time (the
    // window was stamped before the disables, and a switch between the stamp
    // and a disable fell outside it: 1 failure in a CI run)
    dec.out.end_ns = monotonic_ns();
    for b in &mut buffers {
        drain(&mut b.sampler, &mut dec);
    }
    dec.out.events.sort_by_key(|e| e.time_ns);
    for (id, n) in &dec.seen {
        if let Some((name, _)) = dec.decoders.get(id) {
            dec.out.counts.insert(name.clone(), *n);
        }
    }
    dec.out
    // `buffers` drops here: every ring buffer is unmapped and every perf fd closed
}

// ------------------------------------------------------------------ frames

/// A vCPU thread of the traced run: its tid, VM index and vCPU id.
#[derive(Debug, Clone, Copy)]
pub struct VcpuThread {
    pub tid: i32,
    pub vm: i64,
    pub vcpu: i64,
}

/// The columns of `Run.trace`, `Run.wakeups`, `Run.exits` and `Run.halts`;
/// times in ns relative to the window's start; `NONE` marks a null.
#[derive(Debug, Default)]
pub struct Frames {
    // trace: one row per interval a task ran on a traced CPU
    pub t_pcpu: Vec<i64>,
    pub t_start_ns: Vec<i64>,
    pub t_end_ns: Vec<i64>,
    pub t_vm: Vec<i64>,
    pub t_vcpu: Vec<i64>,
    pub t_tid: Vec<i64>,
    pub t_comm: Vec<String>,
    // wakeups of vCPU threads
    pub w_vm: Vec<i64>,
    pub w_vcpu: Vec<i64>,
    pub w_tid: Vec<i64>,
    pub w_wake_ns: Vec<i64>,
    pub w_run_ns: Vec<i64>,
    // exits
    pub e_vm: Vec<i64>,
    pub e_vcpu: Vec<i64>,
    pub e_reason: Vec<String>,
    pub e_exit_ns: Vec<i64>,
    pub e_entry_ns: Vec<i64>,
    // halts
    pub h_vm: Vec<i64>,
    pub h_vcpu: Vec<i64>,
    pub h_time_ns: Vec<i64>,
    pub h_polled: Vec<bool>,
    pub h_ns: Vec<i64>,
    pub h_valid: Vec<bool>,
    pub h_window_ns: Vec<i64>,
    /// Which events the exits come from: "kvm_exit" (kvm_exit → kvm_entry) or, where
    /// the kernel emits no kvm_exit, "kvm_userspace_exit" (→ the next KVM_RUN's kvm_fpu load).
    pub exits_source: &'static str,
    /// Where the frames end, ns from the window's start: the window's end, or
    /// earlier where the trace reached its cap ([`Collected::complete_until_ns`]).
    pub complete_until_ns: i64,
    /// Switches onto a traced CPU that the kernel did not trace, inferred from a later
    /// event of the task on that CPU (see [`Frames::build`]).
    pub inferred_switch_ins: u64,
}

/// Marks a null in an i64 column of [`Frames`].
pub const NONE: i64 = i64::MIN;

impl Frames {
    /// Builds the frames of the window `[start_ns, end_ns)` (CLOCK_MONOTONIC).
    ///
    /// Switches the kernel did not trace: on some kernels a CPU leaving idle runs
    /// the woken task without a `sched_switch` record (seen here on 6.18 with the
    /// haltpoll cpuidle driver, by perf and ftrace alike: a vCPU thread switched out
    /// 300 times and in 3 times). Every record carries the task that was running
    /// when it was written, so a record of task B on a CPU where the last switch
    /// left task A proves a switch A → B in between; it is inferred at that record's
    /// time (B's slice starts late by at most the gap to the CPU's previous record;
    /// for a vCPU leaving a halt, its first record is `kvm_vcpu_wakeup`, written
    /// just after it resumes) and counted in `inferred_switch_ins`. A pending
    /// wake-up of B is paired with the inferred switch.
    ///
    /// A trace that reached its cap is cut where events are missing: a CPU's
    /// slices end at the first event dropped from its own buffer (its switches
    /// are complete before that), and wake-ups, exits and halts, which pair
    /// records of several CPUs, at the first event dropped from any buffer
    /// ([`Collected::complete_until_ns`], reported as `complete_until_ns`). No
    /// slice is stretched over records that were not kept.
    pub fn build(c: &Collected, start_ns: u64, end_ns: u64, vcpus: &[VcpuThread]) -> Frames {
        let mut f = Frames::default();
        let by_tid: HashMap<i32, VcpuThread> = vcpus.iter().map(|v| (v.tid, *v)).collect();
        let rel = |t: u64| t as i64 - start_ns as i64;
        let (lo, hi) = (start_ns, end_ns.max(start_ns));
        // where the records stop being complete: per CPU (its own switches) and for all
        let cpu_cut = |cpu: u32| c.first_dropped_by_cpu.get(&cpu).map_or(hi, |&t| t.clamp(lo, hi));
        let all_cut = c.first_dropped_ns.map_or(hi, |t| t.clamp(lo, hi));
        f.complete_until_ns = rel(all_cut);
        // trace: per CPU, the task running between consecutive switches
        let mut current: HashMap<u32, (i32, u32, u64)> = HashMap::new();
        let push_slice = |f: &mut Frames, cpu: u32, pid: i32, comm: u32, a: u64, b: u64| {
            let (a, b) = (a.max(lo), b.min(cpu_cut(cpu)));
            if pid == 0 || b <= a {
                return;
            }
            let who = by_tid.get(&pid);
            f.t_pcpu.push(cpu as i64);
            f.t_start_ns.push(rel(a));
            f.t_end_ns.push(rel(b));
            f.t_vm.push(who.map_or(-1, |w| w.vm));
            f.t_vcpu.push(who.map_or(-1, |w| w.vcpu));
            f.t_tid.push(pid as i64);
            f.t_comm.push(c.comms.get(comm as usize).map(comm_str).unwrap_or_default());
        };
        let traced_cpu = |cpu: u32| c.cpus.contains(&(cpu as usize));
        // wake-ups: the first wake-up of a sleeping vCPU thread, until it is switched in
        let mut pending_wake: HashMap<i32, u64> = HashMap::new();
        let mut running: HashMap<i32, bool> = HashMap::new();
        let mut pending_exit: HashMap<u32, (u32, u64)> = HashMap::new();
        let mut window: HashMap<u32, i64> = HashMap::new();
        let push_exit = |f: &mut Frames, w: &VcpuThread, reason: u32, t: u64, entry: Option<u64>| {
            f.e_vm.push(w.vm);
            f.e_vcpu.push(w.vcpu);
            f.e_reason.push(c.exit_reasons.get(reason as usize).cloned().unwrap_or_default());
            f.e_exit_ns.push(rel(t));
            f.e_entry_ns.push(entry.map_or(NONE, rel));
        };
        // Where the kernel emits no kvm_exit for these threads (kvm_pvm's software path),
        // the exits are those that reached user space, until the next KVM_RUN loads the FPU.
        let from_kvm_exit =
            c.events.iter().any(|e| matches!(e.kind, Kind::KvmExit { .. }) && by_tid.contains_key(&(e.tid as i32)));
        f.exits_source = if from_kvm_exit { "kvm_exit" } else { "kvm_userspace_exit" };
        // a wake-up at `t` of a vCPU thread that ran from `run`, both in the window
        let push_wake = |f: &mut Frames, w: &VcpuThread, t: u64, run: u64| {
            if t >= lo && run >= lo && run < all_cut {
                f.w_vm.push(w.vm);
                f.w_vcpu.push(w.vcpu);
                f.w_tid.push(w.tid as i64);
                f.w_wake_ns.push(rel(t));
                f.w_run_ns.push(rel(run));
            }
        };
        // the last comm seen for each pid (for a slice whose switch-in was not traced)
        let mut comm_of: HashMap<i32, u32> = HashMap::new();
        for e in &c.events {
            if e.time_ns >= cpu_cut(e.cpu) {
                continue; // this CPU's buffer lost records from here on (the cap)
            }
            if traced_cpu(e.cpu) {
                // the task this record proves to be running on its CPU
                let on_cpu = match e.kind {
                    Kind::Switch { prev_pid, .. } => Some(prev_pid),
                    _ if e.tid == u32::MAX => None,
                    _ => Some(e.tid as i32),
                };
                if let (Some(b), Some(&(a, a_comm, since))) = (on_cpu, current.get(&e.cpu)) {
                    if a != b {
                        push_slice(&mut f, e.cpu, a, a_comm, since, e.time_ns);
                        let b_comm = match e.kind {
                            Kind::Switch { prev_comm, .. } => prev_comm,
                            _ => comm_of.get(&b).copied().unwrap_or(u32::MAX),
                        };
                        current.insert(e.cpu, (b, b_comm, e.time_ns));
                        running.insert(a, false);
                        running.insert(b, true);
                        f.inferred_switch_ins += 1;
                        if let (Some(w), Some(t)) = (by_tid.get(&b), pending_wake.remove(&b)) {
                            push_wake(&mut f, w, t, e.time_ns);
                        }
                    }
                }
            }
            if e.time_ns >= all_cut && !matches!(e.kind, Kind::Switch { .. }) {
                continue; // pairs records of several CPUs: complete only before the first drop anywhere
            }
            match e.kind {
                Kind::Switch { prev_pid, prev_comm, next_pid, next_comm } => {
                    comm_of.insert(prev_pid, prev_comm);
                    comm_of.insert(next_pid, next_comm);
                    if traced_cpu(e.cpu) {
                        let (pid, comm, since) = current.get(&e.cpu).copied().unwrap_or((prev_pid, prev_comm, lo));
                        push_slice(&mut f, e.cpu, pid, comm, since, e.time_ns);
                        current.insert(e.cpu, (next_pid, next_comm, e.time_ns));
                    }
                    running.insert(prev_pid, false);
                    running.insert(next_pid, true);
                    if let (Some(w), Some(t)) = (by_tid.get(&next_pid), pending_wake.remove(&next_pid)) {
                        push_wake(&mut f, w, t, e.time_ns);
                    }
                }
                Kind::Wakeup { pid, .. } => {
                    if by_tid.contains_key(&pid) && !running.get(&pid).copied().unwrap_or(false) {
                        pending_wake.entry(pid).or_insert(e.time_ns);
                    }
                }
                Kind::KvmExit { reason, .. } | Kind::UserspaceExit { reason, .. }
                    if from_kvm_exit == matches!(e.kind, Kind::KvmExit { .. }) =>
                {
                    if let Some(w) = by_tid.get(&(e.tid as i32)) {
                        if let Some((r0, t0)) = pending_exit.insert(e.tid, (reason, e.time_ns)) {
                            push_exit(&mut f, w, r0, t0, None);
                        }
                    }
                }
                Kind::KvmEntry { .. } | Kind::Fpu { load: true }
                    if from_kvm_exit == matches!(e.kind, Kind::KvmEntry { .. }) =>
                {
                    if let (Some(w), Some((r0, t0))) = (by_tid.get(&(e.tid as i32)), pending_exit.remove(&e.tid)) {
                        push_exit(&mut f, w, r0, t0, Some(e.time_ns));
                    }
                }
                Kind::HaltPollNs { new, .. } => {
                    if by_tid.contains_key(&(e.tid as i32)) {
                        window.insert(e.tid, new as i64);
                    }
                }
                Kind::VcpuWakeup { ns, waited, valid } => {
                    if let Some(w) = by_tid.get(&(e.tid as i32)) {
                        f.h_vm.push(w.vm);
                        f.h_vcpu.push(w.vcpu);
                        f.h_time_ns.push(rel(e.time_ns));
                        f.h_polled.push(!waited);
                        f.h_ns.push(ns as i64);
                        f.h_valid.push(valid);
                        f.h_window_ns.push(window.get(&e.tid).copied().unwrap_or(NONE));
                    }
                }
                Kind::KvmExit { .. }
                | Kind::KvmEntry { .. }
                | Kind::UserspaceExit { .. }
                | Kind::Fpu { .. }
                | Kind::MsiSetIrq
                | Kind::ApicIpi => {}
            }
        }
        let mut open: Vec<_> = current.into_iter().collect();
        open.sort_by_key(|(cpu, _)| *cpu);
        for (cpu, (pid, comm, since)) in open {
            push_slice(&mut f, cpu, pid, comm, since, hi);
        }
        let mut left: Vec<_> = pending_exit.into_iter().collect();
        left.sort_by_key(|(_, (_, t))| *t);
        for (tid, (r0, t0)) in left {
            if let Some(w) = by_tid.get(&(tid as i32)) {
                push_exit(&mut f, w, r0, t0, None);
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch\nID: 316\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
\nprint fmt: \"prev_comm=%s\", REC->prev_comm\n";

    #[test]
    fn parses_a_format_file() {
        let f = EventFormat::parse(SWITCH).unwrap();
        assert_eq!(f.name, "sched_switch");
        assert_eq!(f.id, 316);
        assert_eq!(
            f.field("prev_comm").unwrap(),
            Field { name: "prev_comm".into(), offset: 8, size: 16, signed: false }
        );
        assert_eq!(f.field("next_pid").unwrap(), Field { name: "next_pid".into(), offset: 56, size: 4, signed: true });
        assert!(f.field("nope").is_err());
    }

    #[test]
    fn reads_signed_and_unsigned_fields() {
        let mut raw = vec![0u8; 64];
        raw[24..28].copy_from_slice(&(-5i32).to_ne_bytes());
        raw[8..11].copy_from_slice(b"abc");
        let f = EventFormat::parse(SWITCH).unwrap();
        assert_eq!(read_int(&raw, &f.field("prev_pid").unwrap()), Some(-5));
        let unsigned = Field { name: "x".into(), offset: 24, size: 4, signed: false };
        assert_eq!(read_int(&raw, &unsigned), Some(u32::MAX as i64 - 4));
        assert_eq!(comm_str(&read_comm(&raw, &f.field("prev_comm").unwrap()).unwrap()), "abc");
        // a field past the end of the record is not read
        assert_eq!(read_int(&raw[..20], &f.field("prev_pid").unwrap()), None);
    }

    #[test]
    fn exit_names_follow_the_print_format() {
        let text = "name: kvm_exit\nID: 9\nformat:\n\
\tfield:unsigned int exit_reason;\toffset:8;\tsize:4;\tsigned:0;\n\
\nprint fmt: \"reason %s\", (REC->isa == 1) ? __print_symbolic(REC->exit_reason & 0xffff, { 0, \"EXCEPTION_NMI\" }, \
{ 30, \"IO_INSTRUCTION\" }) : __print_symbolic(REC->exit_reason, { 0x040 + 14, \"PF excp\" }, { 0x07b, \"io\" }, \
{ -1, \"invalid_guest_state\" }), REC->x\n";
        let f = EventFormat::parse(text).unwrap();
        let n = ExitNames::from_format(&f);
        assert_eq!(n.name(30, Some(1)), "IO_INSTRUCTION");
        assert_eq!(n.name(0x7b, Some(2)), "io");
        assert_eq!(n.name(0x4e, None), "PF excp");
        assert_eq!(n.name(u32::MAX, Some(2)), "invalid_guest_state");
        assert_eq!(n.name(0x999, Some(2)), "reason 0x999");
    }

    #[test]
    fn symbolic_names_concatenate_literals() {
        let f = EventFormat {
            name: "x".into(),
            id: 1,
            fields: vec![],
            print_fmt: "\"%s\", __print_symbolic(REC->reason, { 2, \"KVM_EXIT_\" \"IO\" })".into(),
        };
        assert_eq!(f.symbol_tables(), vec![("REC->reason".to_string(), vec![(2, "KVM_EXIT_IO".to_string())])]);
    }

    #[test]
    fn an_event_takes_40_bytes() {
        // the memory bound in the docs (max_events × 40 bytes) rests on this
        assert!(std::mem::size_of::<Event>() <= 40, "{}", std::mem::size_of::<Event>());
    }

    fn ev(t: u64, cpu: u32, tid: u32, kind: Kind) -> Event {
        Event { time_ns: t, cpu, tid, kind }
    }

    #[test]
    fn a_capped_trace_ends_each_cpus_frames_at_its_first_dropped_event() {
        // CPU 1 ran the vCPU thread 42, CPU 2 task 9; events of CPU 1's buffer
        // from 2000 on were dropped (the cap), CPU 2's buffer lost nothing, and
        // the window runs to 10000. CPU 1's slice ends at 2000 (not stretched
        // over what was not kept), CPU 2's runs to the end; records pairing
        // several CPUs (here a halt at 5000 in CPU 0's buffer) stop at 2000.
        let sw = |prev: i32, next: i32| Kind::Switch { prev_pid: prev, prev_comm: 0, next_pid: next, next_comm: 0 };
        let c = Collected {
            comms: vec![*b"x\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"],
            cpus: vec![1, 2],
            events: vec![
                ev(0, 1, 7, sw(7, 42)),
                ev(0, 2, 8, sw(8, 9)),
                ev(1000, 1, 42, Kind::VcpuWakeup { ns: 10, waited: true, valid: true }),
                ev(5000, 0, 42, Kind::VcpuWakeup { ns: 10, waited: true, valid: true }),
            ],
            dropped: 3,
            first_dropped_ns: Some(2000),
            first_dropped_by_cpu: [(1, 2000)].into_iter().collect(),
            end_ns: 10_000,
            ..Default::default()
        };
        assert!(c.truncated() && c.complete_until_ns() == 2000);
        let f = Frames::build(&c, 0, 10_000, &[VcpuThread { tid: 42, vm: 0, vcpu: 0 }]);
        assert_eq!(f.t_pcpu, vec![1, 2]);
        assert_eq!(
            (f.t_tid.clone(), f.t_start_ns.clone(), f.t_end_ns.clone()),
            (vec![42, 9], vec![0, 0], vec![2000, 10_000])
        );
        assert_eq!(f.h_time_ns, vec![1000]);
        assert_eq!(f.complete_until_ns, 2000);
        // not capped: the frames run to the window's end
        let whole = Collected { dropped: 0, first_dropped_ns: None, first_dropped_by_cpu: HashMap::new(), ..c };
        assert!(!whole.truncated());
        let f = Frames::build(&whole, 0, 10_000, &[]);
        assert_eq!((f.complete_until_ns, f.t_end_ns), (10_000, vec![10_000, 10_000]));
        // malformed records alone make a trace truncated (gaps with no time bound)
        assert!(Collected { malformed: 1, ..Default::default() }.truncated());
    }

    #[test]
    fn frames_from_events() {
        let c = Collected {
            comms: vec![*b"other\0\0\0\0\0\0\0\0\0\0\0", *b"CPU 0/KVM\0\0\0\0\0\0\0"],
            exit_reasons: vec!["io".into()],
            cpus: vec![1],
            events: vec![
                ev(1000, 1, 7, Kind::Switch { prev_pid: 7, prev_comm: 0, next_pid: 0, next_comm: 0 }),
                ev(1500, 0, 3, Kind::Wakeup { pid: 42, target_cpu: 1 }),
                ev(2000, 1, 0, Kind::Switch { prev_pid: 0, prev_comm: 0, next_pid: 42, next_comm: 1 }),
                // a wake-up of a thread that is running is no wake-up-to-run row
                ev(2050, 0, 3, Kind::Wakeup { pid: 42, target_cpu: 1 }),
                ev(2100, 1, 42, Kind::KvmExit { reason: 0, vcpu_id: 0 }),
                ev(2300, 1, 42, Kind::KvmEntry { vcpu_id: 0 }),
                ev(2400, 1, 42, Kind::HaltPollNs { vcpu_id: 0, new: 10000, old: 0, grow: true }),
                ev(2500, 1, 42, Kind::VcpuWakeup { ns: 300, waited: false, valid: true }),
                ev(2600, 1, 42, Kind::KvmExit { reason: 0, vcpu_id: 0 }),
            ],
            ..Default::default()
        };
        let f = Frames::build(&c, 500, 3000, &[VcpuThread { tid: 42, vm: 0, vcpu: 0 }]);
        // task 7 from the window's start to 1000; idle (pid 0) is no row; the vCPU thread to the end
        assert_eq!(f.t_tid, vec![7, 42]);
        assert_eq!(f.t_start_ns, vec![0, 1500]);
        assert_eq!(f.t_end_ns, vec![500, 2500]);
        assert_eq!(f.t_vm, vec![-1, 0]);
        assert_eq!(f.t_comm, vec!["other", "CPU 0/KVM"]);
        assert_eq!((f.w_wake_ns.clone(), f.w_run_ns.clone()), (vec![1000], vec![1500]));
        assert_eq!(f.e_exit_ns, vec![1600, 2100]);
        assert_eq!(f.e_entry_ns, vec![1800, NONE]);
        assert_eq!((f.h_polled.clone(), f.h_ns.clone(), f.h_window_ns.clone()), (vec![true], vec![300], vec![10000]));
        assert_eq!(f.inferred_switch_ins, 0);
    }

    /// A CPU leaving idle without a traced switch: the vCPU's own records prove it ran.
    #[test]
    fn infers_switch_ins_the_kernel_did_not_trace() {
        let c = Collected {
            comms: vec![*b"swapper/1\0\0\0\0\0\0\0", *b"CPU 0/KVM\0\0\0\0\0\0\0"],
            cpus: vec![1],
            events: vec![
                ev(1000, 1, 42, Kind::Switch { prev_pid: 42, prev_comm: 1, next_pid: 0, next_comm: 0 }),
                // woken from idle; the switch idle -> 42 is missing
                ev(1900, 1, 0, Kind::Wakeup { pid: 42, target_cpu: 1 }),
                ev(2000, 1, 42, Kind::VcpuWakeup { ns: 1000, waited: true, valid: true }),
                ev(2030, 1, 42, Kind::Switch { prev_pid: 42, prev_comm: 1, next_pid: 0, next_comm: 0 }),
                // no wake-up traced either: the slice is still inferred from the halt's record
                ev(3000, 1, 42, Kind::VcpuWakeup { ns: 970, waited: true, valid: true }),
                ev(3020, 1, 42, Kind::Switch { prev_pid: 42, prev_comm: 1, next_pid: 0, next_comm: 0 }),
                // a record of the idle task itself on a CPU the trace shows idle: nothing inferred
                ev(3500, 1, 0, Kind::Wakeup { pid: 42, target_cpu: 1 }),
            ],
            ..Default::default()
        };
        let f = Frames::build(&c, 0, 4000, &[VcpuThread { tid: 42, vm: 0, vcpu: 0 }]);
        assert_eq!(f.t_tid, vec![42, 42, 42]);
        assert_eq!(f.t_start_ns, vec![0, 2000, 3000]);
        assert_eq!(f.t_end_ns, vec![1000, 2030, 3020]);
        assert_eq!(f.t_comm, vec!["CPU 0/KVM"; 3]);
        assert_eq!((f.w_wake_ns.clone(), f.w_run_ns.clone()), (vec![1900], vec![2000]));
        assert_eq!(f.inferred_switch_ins, 2);
    }
}

#[cfg(test)]
mod live_tests {
    use super::*;
    use std::time::Duration;

    /// Records this thread's own switches on CPU 0 (skips where tracefs cannot be had).
    #[test]
    fn records_switches_and_closes_its_fds() {
        // perf fds only: other tests of this process open and close fds concurrently
        let fds = || {
            std::fs::read_dir("/proc/self/fd")
                .map(|d| {
                    d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                        .filter(|t| t.to_string_lossy().contains("perf_event"))
                        .count()
                })
                .unwrap_or(0)
        };
        let before = fds();
        let opts = TraceOptions { kvm_pid: Some(std::process::id() as i32), ..Default::default() };
        let t = match Tracer::start(&[0], opts) {
            Err(Error::TraceUnavailable(why)) => {
                eprintln!("skipped: {why}");
                return;
            }
            t => t.expect("tracer starts"),
        };
        assert!(fds() > before);
        crate::kvm::os::pin_current_thread(&[0]).unwrap();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let c = t.stop().unwrap();
        assert_eq!(fds(), before, "every perf fd is closed after stop");
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let mine = c
            .events
            .iter()
            .filter(|e| matches!(e.kind, Kind::Switch { prev_pid, .. } if prev_pid == me) && e.cpu == 0)
            .count();
        assert!(mine >= 20, "each sleep switches this thread out on CPU 0: {mine}");
        assert!(c.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        assert!(c.events.iter().all(|e| e.time_ns >= c.start_ns && e.time_ns <= c.end_ns));
        // the cap is kept and flagged
        let t = Tracer::start(&[0], TraceOptions { max_events: 1, ..Default::default() }).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let c = t.stop().unwrap();
        assert_eq!(c.events.len(), 1);
        assert!(c.truncated() && c.dropped > 0);
        assert!(matches!(Tracer::start(&[100_000], TraceOptions::default()), Err(Error::InvalidArgument(_))));
        // dropped without stop: fds closed too
        drop(Tracer::start(&[0], TraceOptions::default()).unwrap());
        assert_eq!(fds(), before);
    }
}
