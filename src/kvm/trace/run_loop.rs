//! Exits timed by vcpulab's own run loop, for the vCPUs of this process.
//!
//! Where the kernel emits no `kvm_exit` (this project's host: KVM through the
//! software path `kvm_pvm`), a traced exit's row came from two kernel records
//! per `KVM_RUN`: `kvm_userspace_exit` (the way out) and the next `kvm_fpu`
//! load (the way back in). The vCPU thread writes both, and on this host they
//! cost its exit about 3 µs of a 15-µs round trip. The run loop that issued
//! the `KVM_RUN` knows both instants and the reason without the kernel's help:
//! it reads `CLOCK_MONOTONIC` (the vDSO; the traces' clock) before the ioctl
//! and after it returns, and appends one [`LoopRow`] to an [`ExitLog`] that
//! the [`Tracer`](super::Tracer) owns. A trace that has such a log does not
//! open `kvm_userspace_exit` or `kvm_fpu`; its exits' rows are the log's
//! (`exits_source == "run_loop"`), unless the kernel's `kvm_exit` fires for
//! the vCPU's thread (hardware virtualisation), which then stays the source:
//! it also sees the exits handled in the kernel.
//!
//! What differs from the kernel's records: the exit starts when `KVM_RUN`
//! has returned to user space (not at the tracepoint just before the return)
//! and ends when the next `KVM_RUN` is issued (not when it loads the guest
//! FPU): the row is the time user space held the vCPU, without the ioctl's
//! own way out and in (a few hundred ns here).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::super::error::Error;
use super::super::exit::Exit;

/// One `KVM_RUN` as the run loop saw it: the thread that issued it, when it
/// was issued and when it returned (CLOCK_MONOTONIC ns), and the kernel's
/// name of why it returned ([`reason_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopRow {
    pub tid: u32,
    pub entry_ns: u64,
    pub exit_ns: u64,
    pub reason: &'static str,
}

#[derive(Debug, Default)]
struct Rows {
    rows: Vec<LoopRow>,
    dropped: u64,
    first_dropped_ns: Option<u64>,
}

/// The rows of every vCPU that times its exits for one trace: shared by the
/// tracer and the vCPUs ([`crate::kvm::Vcpu::time_exits`]), bounded by `cap`
/// rows (further rows are counted as dropped, as the tracer's events are).
/// Closed by the tracer's stop: a vCPU that finds it closed lets it go and
/// times nothing more.
#[derive(Debug)]
pub struct ExitLog {
    rows: Mutex<Rows>,
    closed: AtomicBool,
    cap: usize,
}

/// What the log held when it was closed.
#[derive(Debug, Default)]
pub struct LoopRows {
    pub rows: Vec<LoopRow>,
    pub dropped: u64,
    pub first_dropped_ns: Option<u64>,
}

impl ExitLog {
    pub fn new(cap: usize) -> ExitLog {
        ExitLog { rows: Mutex::new(Rows::default()), closed: AtomicBool::new(false), cap }
    }

    /// True once the tracer stopped: nothing more is recorded.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Appends one row (an uncontended lock: each vCPU thread writes its own
    /// rows, the tracer reads them once, at its stop).
    pub fn record(&self, row: LoopRow) {
        if self.is_closed() {
            return;
        }
        let mut g = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if g.rows.len() < self.cap {
            g.rows.push(row);
        } else {
            g.dropped += 1;
            g.first_dropped_ns = Some(g.first_dropped_ns.map_or(row.entry_ns, |t| t.min(row.entry_ns)));
        }
    }

    /// Closes the log and takes its rows (once; later calls get none).
    pub fn close(&self) -> LoopRows {
        self.closed.store(true, Ordering::Release);
        let mut g = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        let r = std::mem::take(&mut *g);
        LoopRows { rows: r.rows, dropped: r.dropped, first_dropped_ns: r.first_dropped_ns }
    }
}

/// The kernel's name of a `KVM_RUN`'s return, as `kvm_userspace_exit` prints
/// it: the `KVM_EXIT_*` reason, `restart` for an interrupted call (-EINTR),
/// `error` for any other failed call.
pub fn reason_name(r: &Result<Exit, Error>) -> &'static str {
    match r {
        Ok(Exit::Io { .. }) => "KVM_EXIT_IO",
        Ok(Exit::Mmio { .. }) => "KVM_EXIT_MMIO",
        Ok(Exit::Hlt) => "KVM_EXIT_HLT",
        Ok(Exit::Shutdown) => "KVM_EXIT_SHUTDOWN",
        Ok(Exit::InternalError { .. }) => "KVM_EXIT_INTERNAL_ERROR",
        Ok(Exit::FailEntry { .. }) => "KVM_EXIT_FAIL_ENTRY",
        Ok(Exit::Interrupted) => "restart",
        Ok(Exit::SystemEvent { .. }) => "KVM_EXIT_SYSTEM_EVENT",
        Ok(Exit::Debug) => "KVM_EXIT_DEBUG",
        Ok(Exit::Other { reason, .. }) => other_name(*reason),
        Err(_) => "error",
    }
}

/// `KVM_EXIT_*` names of the reasons [`Exit::Other`] carries, as the kernel's
/// `kvm_trace_exit_reason` table spells them.
fn other_name(reason: u32) -> &'static str {
    use kvm_bindings as k;
    match reason {
        k::KVM_EXIT_UNKNOWN => "KVM_EXIT_UNKNOWN",
        k::KVM_EXIT_EXCEPTION => "KVM_EXIT_EXCEPTION",
        k::KVM_EXIT_HYPERCALL => "KVM_EXIT_HYPERCALL",
        k::KVM_EXIT_IRQ_WINDOW_OPEN => "KVM_EXIT_IRQ_WINDOW_OPEN",
        k::KVM_EXIT_IOAPIC_EOI => "KVM_EXIT_IOAPIC_EOI",
        k::KVM_EXIT_MEMORY_FAULT => "KVM_EXIT_MEMORY_FAULT",
        k::KVM_EXIT_X86_RDMSR => "KVM_EXIT_X86_RDMSR",
        k::KVM_EXIT_X86_WRMSR => "KVM_EXIT_X86_WRMSR",
        _ => "KVM_EXIT_OTHER",
    }
}

/// The current thread's id, read once per thread (the rows carry it so the
/// frames can name the vCPU thread, as the kernel's records do).
pub fn current_tid() -> u32 {
    fn gettid() -> u32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() as u32 }
    }
    thread_local! {
        static TID: u32 = gettid();
    }
    TID.with(|t| *t)
}
