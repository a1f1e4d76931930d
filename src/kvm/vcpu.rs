//! A KVM vCPU: registers, MSRs, CPUID, steal time, stats, and run loops that
//! always end (deadline timer + kick; see [`super::kick`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvm_bindings::*;
use kvm_ioctls::{VcpuExit, VcpuFd};

use super::error::{invalid, Error, Result};
use super::exit::{Exit, IoDir};
use super::guest::program::{
    Program, UCALL_ASSERT, UCALL_DONE, UCALL_EXCEPTION, UCALL_PORT, UCALL_SYNC, VECTORS_WITH_ERROR_CODE,
};
use super::guest::{self, long_mode_sregs, stack_top};
use super::kick::{DeadlineTimer, RunSlot};
use super::memory::{Gpa, GuestMemory};
use super::os::monotonic_ns;
use super::stats::StatsFd;
use super::steal::{StealTime, KVM_MSR_ENABLED, MSR_KVM_STEAL_TIME, STEAL_TIME_SIZE};
use super::system::KVM_CPUID_FEATURES;
use super::trace::{current_tid, reason_name, ExitLog, LoopRow};
use super::vm::{open_stats_fd, read_steal, ProgramTable, Vm};

/// `KVM_FEATURE_STEAL_TIME` bit of CPUID 0x40000001 EAX.
const KVM_FEATURE_STEAL_TIME: u32 = 1 << 5;

/// A guest → host message (see [`super::guest::program`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ucall {
    Sync(u64),
    Done,
}

/// What a `run_until` loop should stop on.
#[derive(Debug, Clone)]
pub struct RunUntil {
    /// Exit kinds (see [`Exit::kind`]) that count as a match; "ucall" matches
    /// SYNC and DONE messages.
    pub kinds: Vec<String>,
    /// For "io": only this port matches.
    pub port: Option<u16>,
    /// Stop at the `count`-th match (>= 1).
    pub count: u64,
    /// Give up (Timeout) at this instant.
    pub deadline: Instant,
}

/// How a `run_until` loop ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The last exit (the match, or `Interrupted`).
    pub exit: Exit,
    /// The ucall, when the match was one.
    pub ucall: Option<Ucall>,
    /// Matches seen (== count unless interrupted).
    pub matches: u64,
    /// Exits of any kind seen.
    pub exits: u64,
    /// True when another thread's kick or a foreign signal (e.g. SIGINT)
    /// stopped the loop before `count` matches.
    pub interrupted: bool,
    /// True when the interruption was a kick ([`RunSlot::kick`]), false for a
    /// foreign signal the caller should handle (then resume).
    pub kicked: bool,
    /// True when the deadline passed before `count` matches
    /// ([`Vcpu::run_until_outcome`] only; `run_until` turns it into `Timeout`).
    pub timed_out: bool,
}

/// General-purpose registers, by name.
pub const REG_NAMES: [&str; 18] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rsp", "rbp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "rip", "rflags",
];

pub fn regs_to_array(r: &kvm_regs) -> [u64; 18] {
    [
        r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rsp, r.rbp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15,
        r.rip, r.rflags,
    ]
}

pub fn regs_from_array(a: &[u64; 18]) -> kvm_regs {
    kvm_regs {
        rax: a[0],
        rbx: a[1],
        rcx: a[2],
        rdx: a[3],
        rsi: a[4],
        rdi: a[5],
        rsp: a[6],
        rbp: a[7],
        r8: a[8],
        r9: a[9],
        r10: a[10],
        r11: a[11],
        r12: a[12],
        r13: a[13],
        r14: a[14],
        r15: a[15],
        rip: a[16],
        rflags: a[17],
    }
}

/// Names of the exception vectors, for guest exception reports.
pub fn exception_name(v: u64) -> &'static str {
    const N: [&str; 22] = [
        "#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "CSO", "#TS", "#NP", "#SS", "#GP", "#PF",
        "(15)", "#MF", "#AC", "#MC", "#XM", "#VE", "#CP",
    ];
    N.get(v as usize).copied().unwrap_or("exception")
}

/// Read-only access to a running vCPU's steal time and stats from another thread.
#[derive(Debug, Clone)]
pub struct VcpuObserver {
    pub mem: Arc<GuestMemory>,
    pub steal_gpa: Option<Gpa>,
    pub stats: Arc<StatsFd>,
    pub id: u64,
}

impl VcpuObserver {
    pub fn steal_time(&self) -> Result<Option<StealTime>> {
        self.steal_gpa.map(|g| read_steal(&self.mem, g)).transpose()
    }
}

impl Vm {
    /// Creates vCPU `id`, in 64-bit long mode at the park loop, with the host's
    /// supported CPUID (including the KVM PV leaf) and its own stack. Defined here
    /// rather than in vm.rs so that the modules depend one way: system <- vm <- vcpu.
    pub fn create_vcpu(&mut self, id: u64) -> Result<Vcpu> {
        self.check_new_vcpu_id(id)?;
        let vcpu = Vcpu::create(self, id)?;
        self.add_vcpu_id(id);
        Ok(vcpu)
    }
}

/// A vCPU.
pub struct Vcpu {
    fd: VcpuFd,
    pub id: u64,
    mem: Arc<GuestMemory>,
    programs: ProgramTable,
    slot: Arc<RunSlot>,
    stats: Option<Arc<StatsFd>>,
    steal_gpa: Option<Gpa>,
    /// Value returned to the guest's `in` instructions (little-endian, truncated).
    pub io_in_value: u64,
    /// Value returned to the guest's MMIO reads outside RAM.
    pub mmio_read_value: u64,
    pv_features: u32,
    /// Where this vCPU's `KVM_RUN`s are timed for a trace ([`Vcpu::time_exits`]).
    exit_log: Option<Arc<ExitLog>>,
}

impl std::fmt::Debug for Vcpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vcpu").field("id", &self.id).field("steal_gpa", &self.steal_gpa).finish()
    }
}

impl Vcpu {
    pub(crate) fn create(vm: &Vm, id: u64) -> Result<Self> {
        // The kick signal's handler must exist before any thread can register
        // as a runner: its default action would end the process.
        super::kick::ensure_handler()?;
        let mut fd = vm.fd.create_vcpu(id).map_err(|e| Error::ioctl("KVM_CREATE_VCPU", e))?;
        // CPUID: everything the host supports, with this vCPU's APIC id.
        let mut entries = vm.supported_cpuid.clone();
        let mut pv_features = 0;
        for e in &mut entries {
            match e.function {
                1 => e.ebx = (e.ebx & 0x00ff_ffff) | ((id as u32 & 0xff) << 24),
                0xb | 0x1f => e.edx = id as u32,
                KVM_CPUID_FEATURES => pv_features = e.eax,
                _ => {}
            }
        }
        let cpuid = CpuId::from_entries(&entries)
            .map_err(|e| Error::InvalidArgument(format!("building CPUID for vCPU {id}: {e:?}")))?;
        fd.set_cpuid2(&cpuid).map_err(|e| Error::ioctl("KVM_SET_CPUID2", e))?;
        let mut sregs = fd.get_sregs().map_err(|e| Error::ioctl("KVM_GET_SREGS", e))?;
        long_mode_sregs(&mut sregs);
        fd.set_sregs(&sregs).map_err(|e| Error::ioctl("KVM_SET_SREGS", e))?;
        if vm.irqchip {
            // Application processors start waiting for INIT/SIPI; we start every
            // vCPU directly in long mode instead.
            fd.set_mp_state(kvm_mp_state { mp_state: KVM_MP_STATE_RUNNABLE })
                .map_err(|e| Error::ioctl("KVM_SET_MP_STATE", e))?;
        }
        let ie = std::ptr::addr_of_mut!(fd.get_kvm_run().immediate_exit);
        let slot = Arc::new(RunSlot::new(ie));
        let mut v = Self {
            fd,
            id,
            mem: vm.mem.clone(),
            programs: vm.programs.clone(),
            slot,
            stats: None,
            steal_gpa: None,
            io_in_value: 0,
            mmio_read_value: 0,
            pv_features,
            exit_log: None,
        };
        v.start(vm.park_entry())?;
        Ok(v)
    }

    /// Points the vCPU at `entry` with a fresh stack, `rdi` = vCPU id, interrupts off.
    pub fn start(&mut self, entry: Gpa) -> Result<()> {
        self.mem.check_range(entry, 1)?;
        let mut r = kvm_regs { rip: entry, rsp: stack_top(self.id), rflags: 0x2, ..Default::default() };
        r.rdi = self.id;
        self.set_regs(&r)
    }

    /// The kvm-ioctls handle of this vCPU: for a plain `VcpuFd::run` loop on the guest
    /// vcpulab set up, which `examples/bench_raw_kvm.rs` compares with vcpulab's loops
    /// on the same work. Nothing of vcpulab's (deadlines, kicks, ucalls) applies to it.
    pub fn kvm_ioctls_fd(&mut self) -> &mut VcpuFd {
        &mut self.fd
    }

    /// The handle other threads use to kick this vCPU out of KVM_RUN.
    pub fn run_slot(&self) -> Arc<RunSlot> {
        self.slot.clone()
    }

    pub fn regs(&self) -> Result<kvm_regs> {
        self.fd.get_regs().map_err(|e| Error::ioctl("KVM_GET_REGS", e))
    }

    pub fn set_regs(&self, r: &kvm_regs) -> Result<()> {
        self.fd.set_regs(r).map_err(|e| Error::ioctl("KVM_SET_REGS", e))
    }

    pub fn sregs(&self) -> Result<kvm_sregs> {
        self.fd.get_sregs().map_err(|e| Error::ioctl("KVM_GET_SREGS", e))
    }

    pub fn set_sregs(&self, s: &kvm_sregs) -> Result<()> {
        self.fd.set_sregs(s).map_err(|e| Error::ioctl("KVM_SET_SREGS", e))
    }

    /// Reads MSRs; an MSR KVM does not know is an error naming it.
    pub fn get_msrs(&self, indices: &[u32]) -> Result<Vec<(u32, u64)>> {
        let entries: Vec<kvm_msr_entry> =
            indices.iter().map(|&i| kvm_msr_entry { index: i, ..Default::default() }).collect();
        let mut msrs =
            Msrs::from_entries(&entries).map_err(|e| Error::InvalidArgument(format!("too many MSRs: {e:?}")))?;
        let n = self.fd.get_msrs(&mut msrs).map_err(|e| Error::ioctl("KVM_GET_MSRS", e))?;
        if n < indices.len() {
            invalid!("KVM does not know MSR {:#x} (KVM_GET_MSRS read {n} of {})", indices[n], indices.len());
        }
        Ok(msrs.as_slice().iter().map(|e| (e.index, e.data)).collect())
    }

    /// Writes MSRs; one KVM refuses is an error naming it.
    pub fn set_msrs(&self, values: &[(u32, u64)]) -> Result<()> {
        let entries: Vec<kvm_msr_entry> =
            values.iter().map(|&(i, d)| kvm_msr_entry { index: i, data: d, ..Default::default() }).collect();
        let msrs = Msrs::from_entries(&entries).map_err(|e| Error::InvalidArgument(format!("too many MSRs: {e:?}")))?;
        let n = self.fd.set_msrs(&msrs).map_err(|e| Error::ioctl("KVM_SET_MSRS", e))?;
        if n < values.len() {
            invalid!(
                "KVM refused MSR {:#x} = {:#x} (KVM_SET_MSRS wrote {n} of {})",
                values[n].0,
                values[n].1,
                values.len()
            );
        }
        Ok(())
    }

    /// The vCPU's CPUID table (`KVM_GET_CPUID2`).
    pub fn cpuid(&self) -> Result<Vec<kvm_cpuid_entry2>> {
        Ok(self
            .fd
            .get_cpuid2(KVM_MAX_CPUID_ENTRIES)
            .map_err(|e| Error::ioctl("KVM_GET_CPUID2", e))?
            .as_slice()
            .to_vec())
    }

    /// TSC frequency in kHz (`KVM_GET_TSC_KHZ`).
    pub fn tsc_khz(&self) -> Result<u32> {
        self.fd.get_tsc_khz().map_err(|e| Error::ioctl("KVM_GET_TSC_KHZ", e))
    }

    /// Multiprocessing state (`KVM_GET_MP_STATE`): 0 runnable, 3 halted, …
    pub fn mp_state(&self) -> Result<u32> {
        Ok(self.fd.get_mp_state().map_err(|e| Error::ioctl("KVM_GET_MP_STATE", e))?.mp_state)
    }

    /// Registers a steal-time area at `gpa` (default: this id's slot in the
    /// layout's steal area) by writing `MSR_KVM_STEAL_TIME = gpa | 1`.
    pub fn enable_steal_time(&mut self, gpa: Option<Gpa>) -> Result<Gpa> {
        if self.pv_features & KVM_FEATURE_STEAL_TIME == 0 {
            return Err(Error::Unsupported("this host does not offer KVM_FEATURE_STEAL_TIME".into()));
        }
        let gpa = match gpa {
            Some(g) => g,
            None if self.id <= guest::MAX_DEFAULT_STEAL_ID => guest::default_steal_gpa(self.id),
            None => invalid!("vCPU id {} has no default steal-time slot; pass gpa explicitly", self.id),
        };
        if gpa % STEAL_TIME_SIZE != 0 {
            invalid!("steal-time gpa {gpa:#x} must be 64-byte aligned (bits 5:1 of the MSR are reserved)");
        }
        self.mem.check_range(gpa, STEAL_TIME_SIZE as usize)?;
        self.mem.write(gpa, &[0u8; STEAL_TIME_SIZE as usize])?;
        self.set_msrs(&[(MSR_KVM_STEAL_TIME, gpa | KVM_MSR_ENABLED)])?;
        self.steal_gpa = Some(gpa);
        Ok(gpa)
    }

    pub fn steal_gpa(&self) -> Option<Gpa> {
        self.steal_gpa
    }

    /// A consistent snapshot of this vCPU's steal-time area.
    pub fn steal_time(&self) -> Result<StealTime> {
        let gpa = self.steal_gpa.ok_or_else(|| {
            Error::InvalidArgument("steal time is not enabled on this vCPU; call enable_steal_time() first".into())
        })?;
        read_steal(&self.mem, gpa)
    }

    /// The vCPU's binary stats (opened and parsed on first use).
    pub fn stats_fd(&mut self) -> Result<&Arc<StatsFd>> {
        if self.stats.is_none() {
            self.stats = Some(Arc::new(open_stats_fd(&self.fd, "KVM_GET_STATS_FD(vcpu)")?));
        }
        Ok(self.stats.as_ref().expect("set above"))
    }

    /// What a sampler on another thread needs to observe this vCPU while it
    /// runs: guest RAM (steal time) and the stats fd. No locks involved.
    pub fn observer(&mut self) -> Result<VcpuObserver> {
        Ok(VcpuObserver {
            mem: self.mem.clone(),
            steal_gpa: self.steal_gpa,
            stats: self.stats_fd()?.clone(),
            id: self.id,
        })
    }

    /// Times each of this vCPU's `KVM_RUN`s into `log` (a trace's, see
    /// [`ExitLog`]) until the trace closes it: two `CLOCK_MONOTONIC` reads
    /// and one row per call, on whichever thread runs the vCPU.
    pub fn time_exits(&mut self, log: Arc<ExitLog>) {
        self.exit_log = Some(log);
    }

    /// One `KVM_RUN`, timed into the exit log when a trace asked for it.
    fn kvm_run(&mut self) -> Result<Exit> {
        // taken out for the call (no reference count touched per KVM_RUN), put back unless closed
        let Some(log) = self.exit_log.take() else { return self.kvm_run_untimed() };
        let entry_ns = monotonic_ns();
        let r = self.kvm_run_untimed();
        let exit_ns = monotonic_ns();
        log.record(LoopRow { tid: current_tid(), entry_ns, exit_ns, reason: reason_name(&r) });
        if !log.is_closed() {
            self.exit_log = Some(log);
        }
        r
    }

    /// One `KVM_RUN` (no deadline handling; the caller has registered the run
    /// slot). IO-in and MMIO-read exits get `io_in_value` / `mmio_read_value`.
    fn kvm_run_untimed(&mut self) -> Result<Exit> {
        let (io_in, mmio) = (self.io_in_value.to_le_bytes(), self.mmio_read_value.to_le_bytes());
        let mut exit = match self.fd.run() {
            Ok(mut e) => {
                if let VcpuExit::MmioRead(_, d) = &mut e {
                    let n = d.len().min(8);
                    d[..n].copy_from_slice(&mmio[..n]);
                }
                Exit::from_vcpu_exit(&e, || (0, Vec::new()))
            }
            Err(e) if e.errno() == libc::EINTR => Exit::Interrupted,
            Err(e) => return Err(Error::ioctl("KVM_RUN", e)),
        };
        if let Exit::Io { size, count, dir, data, .. } = &mut exit {
            let run = self.fd.get_kvm_run();
            // SAFETY: exit_reason is KVM_EXIT_IO (kvm-ioctls decoded an IO exit),
            // so the kernel filled the `io` member of the union.
            let io = unsafe { run.__bindgen_anon_1.io };
            *size = io.size;
            *count = io.count;
            if *dir == IoDir::In && io.size > 0 {
                // Every element of a (string) IN reads `io_in_value`.
                let len = io.size as usize * io.count as usize;
                let base = (run as *mut kvm_run).cast::<u8>();
                // SAFETY: the kernel placed the size*count data bytes at
                // data_offset inside the kvm_run mapping (the same slice
                // kvm-ioctls hands out for this exit), which lives as long as
                // the vCPU fd; nothing else borrows it now.
                let buf = unsafe { std::slice::from_raw_parts_mut(base.add(io.data_offset as usize), len) };
                for chunk in buf.chunks_mut(io.size as usize) {
                    chunk.copy_from_slice(&io_in[..chunk.len()]);
                }
                *data = buf.to_vec();
            }
        }
        if let Exit::InternalError { .. } = exit {
            let run = self.fd.get_kvm_run();
            // SAFETY: exit_reason is KVM_EXIT_INTERNAL_ERROR, so the kernel filled
            // the `internal` member of the union.
            let internal = unsafe { run.__bindgen_anon_1.internal };
            let n = (internal.ndata as usize).min(internal.data.len());
            return Ok(Exit::InternalError { suberror: internal.suberror, data: internal.data[..n].to_vec() });
        }
        Ok(exit)
    }

    /// One `KVM_RUN`. With a deadline, a timer forces the vCPU out at that
    /// instant and the exit is `Interrupted`; a kick from another thread does the same.
    pub fn run_once(&mut self, deadline: Option<Instant>) -> Result<Exit> {
        let slot = self.slot.clone();
        slot.clear();
        let _guard = slot.enter()?;
        let timer = deadline.map(DeadlineTimer::arm).transpose()?;
        loop {
            let exit = self.kvm_run()?;
            if exit == Exit::Interrupted && timer.as_ref().is_some_and(|t| t.early_fire()) && !slot.was_kicked() {
                // the thread's timer was still set for an earlier deadline
                slot.clear_immediate_exit();
                if !slot.was_kicked() {
                    timer.as_ref().expect("checked above").rearm()?;
                    continue;
                }
            }
            return Ok(exit);
        }
    }

    /// Decodes a ucall exit; `Ok(None)` if `exit` is not one.
    fn decode_ucall(&self, exit: &Exit) -> Result<Option<Ucall>> {
        let Exit::Io { port: UCALL_PORT, dir: IoDir::Out, size: 4, .. } = exit else {
            return Ok(None);
        };
        let cmd = exit.data_value() as u32;
        let r = self.regs()?;
        match cmd {
            UCALL_SYNC => Ok(Some(Ucall::Sync(r.rdi))),
            UCALL_DONE => Ok(Some(Ucall::Done)),
            UCALL_ASSERT => {
                let programs = self.programs.read().unwrap_or_else(|e| e.into_inner());
                let prog: Option<&Program> =
                    programs.iter().find(|p| (p.entry..p.entry + p.code.len() as u64).contains(&r.rip));
                let site = prog.and_then(|p| p.asserts.get(r.rdi as usize));
                let (location, what) = match site {
                    Some(s) => (s.location.clone(), s.message.clone()),
                    None => (format!("rip {:#x}", r.rip), format!("assertion #{}", r.rdi)),
                };
                Err(Error::GuestAssertion {
                    location,
                    message: format!(
                        "{what}: got {:#x} ({}), expected {:#x} ({}) on vCPU {}",
                        r.rsi, r.rsi, r.r8, r.r8, self.id
                    ),
                })
            }
            UCALL_EXCEPTION => {
                let (rip, err) =
                    if VECTORS_WITH_ERROR_CODE.contains(&r.rdi) { (r.r8, Some(r.rsi)) } else { (r.rsi, None) };
                Err(Error::UnexpectedExit(format!(
                    "guest exception {} (vector {}) at rip {rip:#x}{} on vCPU {}",
                    exception_name(r.rdi),
                    r.rdi,
                    err.map(|e| format!(", error code {e:#x}")).unwrap_or_default(),
                    self.id
                )))
            }
            other => Err(Error::UnexpectedExit(format!("unknown ucall command {other} from vCPU {}", self.id))),
        }
    }

    /// Runs until `want.count` exits match `want` (see [`RunUntil`]), handling
    /// everything else: ucall SYNCs are counted and resumed, guest assertions and
    /// exceptions become errors, and fatal exits (shutdown, internal error, failed
    /// entry, a finished program) that were not wanted end the loop with an error
    /// naming what was wanted and what came. Never runs past `want.deadline`.
    pub fn run_until(&mut self, want: &RunUntil) -> Result<RunOutcome> {
        let start = Instant::now();
        let out = self.run_until_outcome(want)?;
        if out.timed_out {
            return Err(Error::Timeout(format!(
                "vCPU {}: no {} exit{} within {:.3} s ({} of {} matches, {} exits seen)",
                self.id,
                want.kinds.join("|"),
                want.port.map(|p| format!(" on port {p:#x}")).unwrap_or_default(),
                want.deadline.saturating_duration_since(start).as_secs_f64(),
                out.matches,
                want.count,
                out.exits
            )));
        }
        Ok(out)
    }

    /// [`Vcpu::run_until`], but reaching the deadline is an outcome
    /// (`timed_out`, with the exits and matches counted so far), not an error.
    pub fn run_until_outcome(&mut self, want: &RunUntil) -> Result<RunOutcome> {
        if want.count == 0 {
            invalid!("count must be >= 1");
        }
        for k in &want.kinds {
            if k != "ucall" && !Exit::KINDS.contains(&k.as_str()) {
                invalid!("unknown exit kind {k:?}; valid kinds: ucall, {}", Exit::KINDS.join(", "));
            }
        }
        let wants = |k: &str| want.kinds.iter().any(|w| w == k);
        let slot = self.slot.clone();
        slot.clear();
        let _guard = slot.enter()?;
        let timer = DeadlineTimer::arm(want.deadline)?;
        let mut out = RunOutcome {
            exit: Exit::Interrupted,
            ucall: None,
            matches: 0,
            exits: 0,
            interrupted: false,
            kicked: false,
            timed_out: false,
        };
        loop {
            let exit = self.kvm_run()?;
            if exit == Exit::Interrupted {
                if Instant::now() >= want.deadline {
                    out.timed_out = true;
                    return Ok(out);
                }
                if timer.early_fire() && !slot.was_kicked() {
                    // the thread's timer was still set for an earlier deadline
                    slot.clear_immediate_exit();
                    if !slot.was_kicked() {
                        timer.rearm()?;
                        continue;
                    }
                }
                if wants("interrupted") {
                    out.matches += 1;
                }
                out.exit = exit;
                out.interrupted = true;
                out.kicked = slot.was_kicked();
                return Ok(out);
            }
            out.exits += 1;
            let ucall = self.decode_ucall(&exit)?;
            let matched = match &ucall {
                Some(_) => wants("ucall") || (wants("io") && want.port.is_none_or(|p| p == UCALL_PORT)),
                None => {
                    wants(exit.kind())
                        && match (&exit, want.port) {
                            (Exit::Io { port, .. }, Some(p)) => *port == p,
                            _ => true,
                        }
                }
            };
            if matched {
                out.matches += 1;
                if out.matches >= want.count {
                    out.exit = exit;
                    out.ucall = ucall;
                    return Ok(out);
                }
                continue;
            }
            let fatal = match (&exit, &ucall) {
                (_, Some(Ucall::Done)) => Some("the guest program finished (ucall DONE)".to_string()),
                (
                    Exit::Shutdown | Exit::InternalError { .. } | Exit::FailEntry { .. } | Exit::SystemEvent { .. },
                    _,
                ) => Some(exit.describe()),
                _ => None,
            };
            if let Some(what) = fatal {
                return Err(Error::UnexpectedExit(format!(
                    "vCPU {}: wanted {} exit, got {what} ({} exits seen)",
                    self.id,
                    want.kinds.join("|"),
                    out.exits
                )));
            }
        }
    }

    /// Runs the loaded program until its next ucall (SYNC or DONE), within `timeout`.
    pub fn run_to_ucall(&mut self, timeout: Duration) -> Result<RunOutcome> {
        self.run_until(&RunUntil {
            kinds: vec!["ucall".into()],
            port: None,
            count: 1,
            deadline: Instant::now() + timeout,
        })
    }
}
