//! Forcing a vCPU out of `KVM_RUN`: from another thread (a kick) or at a deadline.
//!
//! Race-free scheme (as in firecracker): the kicker sets `kvm_run.immediate_exit`
//! and then sends a real-time signal to the vCPU's thread. If the signal lands
//! while the thread is inside `KVM_RUN`, the ioctl returns `EINTR`; if it lands
//! just before the thread enters it, `immediate_exit` makes `KVM_RUN` return
//! `EINTR` at once. The signal handler itself also sets `immediate_exit`
//! (through a thread-local pointer) so that a deadline timer, which only sends
//! the signal, is race-free too.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use super::error::{Error, Result};

thread_local! {
    /// `&kvm_run.immediate_exit` of the vCPU this thread is running, or null.
    static IMMEDIATE_EXIT: Cell<*const AtomicU8> = const { Cell::new(std::ptr::null()) };
    /// Set by the signal handler when this thread's deadline timer fired
    /// (`si_code == SI_TIMER`), as opposed to a kick (`pthread_kill`).
    static TIMER_FIRED: Cell<bool> = const { Cell::new(false) };
}

/// The real-time signal vcpulab uses for kicks (SIGRTMIN + 3).
pub fn kick_signal() -> libc::c_int {
    SIGRTMIN() + 3
}

extern "C" fn on_kick(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only async-signal-safe work: const-initialised TLS reads/writes and an atomic store.
    // SAFETY: the kernel passes a valid siginfo (SA_SIGINFO); si_code is a plain field.
    if !info.is_null() && unsafe { (*info).si_code } == libc::SI_TIMER {
        let _ = TIMER_FIRED.try_with(|f| f.set(true));
    }
    let _ = IMMEDIATE_EXIT.try_with(|p| {
        let p = p.get();
        if !p.is_null() {
            // SAFETY: the pointer is set only while this thread is inside `RunGuard`,
            // whose owner keeps the vCPU (and so its kvm_run mapping) alive.
            unsafe { &*p }.store(1, Ordering::SeqCst);
        }
    });
}

/// Installs the kick signal's handler once per process, with `SA_RESTART`:
/// a thread's deadline timer stays armed after its last run (see
/// [`DeadlineTimer`]) and may fire once while the thread does something else;
/// restartable system calls then continue instead of failing with `EINTR`.
/// (`KVM_RUN` itself returns `EINTR` on a pending signal whatever the flags.)
pub fn ensure_handler() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), i32>> = OnceLock::new();
    (*INSTALLED.get_or_init(|| {
        register_signal_handler(kick_signal(), on_kick).map_err(|e| e.errno())?;
        // SAFETY: an all-zero sigaction is a valid value to read into.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the action just installed into a valid struct.
        if unsafe { libc::sigaction(kick_signal(), std::ptr::null(), &mut act) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        act.sa_flags |= libc::SA_RESTART;
        // SAFETY: the same handler and mask, with SA_RESTART added.
        if unsafe { libc::sigaction(kick_signal(), &act, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(())
    }))
    .map_err(|errno| Error::Ioctl { call: "sigaction(kick signal)", source: std::io::Error::from_raw_os_error(errno) })
}

/// Who is running a vCPU right now, so another thread can kick it.
#[derive(Debug)]
pub struct RunSlot {
    thread: Mutex<Option<libc::pthread_t>>,
    immediate_exit: *const AtomicU8,
    /// Set for good by [`RunSlot::stop`]: no run may start any more.
    stopped: AtomicBool,
    /// Set by a kick or stop, cleared by [`RunSlot::clear`]: tells a kick from
    /// the deadline timer and from foreign signals.
    kicked: AtomicBool,
}

// SAFETY: `immediate_exit` points into the vCPU's kvm_run mapping, which outlives
// every use (kicks only dereference it while a run is registered in `thread`, and
// a run holds the vCPU); the byte is accessed atomically.
unsafe impl Send for RunSlot {}
// SAFETY: as above; the mutable state is behind a Mutex or atomic.
unsafe impl Sync for RunSlot {}

impl RunSlot {
    /// `immediate_exit` must be the address of the vCPU's `kvm_run.immediate_exit`.
    pub fn new(immediate_exit: *mut u8) -> Self {
        Self {
            thread: Mutex::new(None),
            immediate_exit: immediate_exit as *const AtomicU8,
            stopped: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
        }
    }

    /// Registers the calling thread as the runner until the guard drops; fails
    /// once the slot was stopped (so a stop can never be missed by a run that
    /// was about to start).
    pub fn enter(&self) -> Result<RunGuard<'_>> {
        let mut t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if self.stopped.load(Ordering::SeqCst) {
            return Err(Error::Closed("Vcpu (its Vm)"));
        }
        // SAFETY: pthread_self has no preconditions.
        *t = Some(unsafe { libc::pthread_self() });
        IMMEDIATE_EXIT.with(|p| p.set(self.immediate_exit));
        Ok(RunGuard { slot: self })
    }

    /// Stops the vCPU for good: kicks a running thread, and makes every later
    /// [`RunSlot::enter`] fail. Used when the VM closes.
    pub fn stop(&self) {
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        self.stopped.store(true, Ordering::SeqCst);
        self.kicked.store(true, Ordering::SeqCst);
        Self::kick_locked(&t, self.immediate_exit);
    }

    /// Forces the running thread (if any) out of KVM_RUN. Returns whether a run was kicked.
    pub fn kick(&self) -> bool {
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_some() {
            self.kicked.store(true, Ordering::SeqCst);
        }
        Self::kick_locked(&t, self.immediate_exit)
    }

    /// Whether a kick (or stop) came since the last [`RunSlot::clear`].
    pub fn was_kicked(&self) -> bool {
        self.kicked.load(Ordering::SeqCst)
    }

    fn kick_locked(t: &Option<libc::pthread_t>, immediate_exit: *const AtomicU8) -> bool {
        match *t {
            Some(thread) => {
                // SAFETY: a registered runner keeps the vCPU alive (see `Send`).
                unsafe { &*immediate_exit }.store(1, Ordering::SeqCst);
                // SAFETY: `thread` is alive: it is unregistered under the slot's
                // lock before it can exit, and the caller holds that lock.
                unsafe { libc::pthread_kill(thread, kick_signal()) };
                true
            }
            None => false,
        }
    }

    /// Clears `immediate_exit` and the kick flag (before the next KVM_RUN).
    pub fn clear(&self) {
        self.kicked.store(false, Ordering::SeqCst);
        // SAFETY: see `Send`.
        unsafe { &*self.immediate_exit }.store(0, Ordering::SeqCst);
    }

    /// Clears only `immediate_exit` (after an early timer fire; a kick that
    /// races with this is seen through [`RunSlot::was_kicked`] or sets it again).
    pub fn clear_immediate_exit(&self) {
        // SAFETY: see `Send`.
        unsafe { &*self.immediate_exit }.store(0, Ordering::SeqCst);
    }

    /// Whether `immediate_exit` is set.
    pub fn is_set(&self) -> bool {
        // SAFETY: see `Send`.
        unsafe { &*self.immediate_exit }.load(Ordering::SeqCst) != 0
    }
}

/// Unregisters the runner on drop.
pub struct RunGuard<'a> {
    slot: &'a RunSlot,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        let mut t = self.slot.thread.lock().unwrap_or_else(|e| e.into_inner());
        *t = None;
        IMMEDIATE_EXIT.with(|p| p.set(std::ptr::null()));
    }
}

/// Incremented in the child of every `fork`: POSIX timers are not inherited,
/// so a thread's timer id copied into a child is stale.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The number of forks between the first call in this process's ancestry
/// and now: a value taken at creation that differs later means the caller is
/// a forked child holding its parent's objects (whose threads do not exist here).
pub fn fork_generation() -> u64 {
    ensure_atfork();
    FORK_GENERATION.load(Ordering::SeqCst)
}

fn ensure_atfork() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // SAFETY: registers a child handler that only touches an atomic; no
        // preconditions. A failure (ENOMEM) only loses the fork detection.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// The calling thread's POSIX timer (created on its first deadline, deleted
/// when the thread exits): it sends the kick signal to this thread.
struct ThreadTimer {
    id: libc::timer_t,
    generation: u64,
    /// When the timer is set to fire (None: disarmed or already fired).
    armed_until: Option<Instant>,
}

impl ThreadTimer {
    fn create() -> Result<Self> {
        // SAFETY: an all-zero sigevent is a valid value to fill in.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = kick_signal();
        // SAFETY: gettid has no preconditions.
        sev.sigev_notify_thread_id = unsafe { libc::gettid() };
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: sev and id are valid for the call; the kernel copies sev.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) } != 0 {
            return Err(Error::last_os("timer_create"));
        }
        Ok(Self { id, generation: FORK_GENERATION.load(Ordering::SeqCst), armed_until: None })
    }

    fn set(&self, left: Option<std::time::Duration>) -> Result<()> {
        let v = left.unwrap_or_default();
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: v.as_secs() as libc::time_t, tv_nsec: v.subsec_nanos() as libc::c_long },
        };
        // SAFETY: the timer id is valid (created by this thread in this process,
        // see `generation`), spec is a valid itimerspec.
        if unsafe { libc::timer_settime(self.id, 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(Error::last_os("timer_settime"));
        }
        Ok(())
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        if self.generation == FORK_GENERATION.load(Ordering::SeqCst) {
            // SAFETY: the id came from a successful timer_create in this process
            // and is deleted once (a timer copied into a forked child is not the
            // child's: it is left alone).
            unsafe { libc::timer_delete(self.id) };
        }
    }
}

thread_local! {
    /// This thread's deadline timer, reused by every run on the thread.
    static THREAD_TIMER: RefCell<Option<ThreadTimer>> = const { RefCell::new(None) };
}

/// A deadline for the calling thread, on its one POSIX timer (created on
/// the thread's first deadline, reused by every later run, deleted when the
/// thread exits).
///
/// The timer is left armed between runs: arming for a deadline at or after
/// the instant it is already set for costs no system call. It may then fire
/// before the current run's deadline; [`DeadlineTimer::early_fire`] tells the
/// run loop so, and the loop re-arms ([`DeadlineTimer::rearm`]) and re-enters
/// `KVM_RUN`. One `timer_settime` per ~timeout instead of a `timer_create`,
/// `timer_settime` and `timer_delete` per run (per-exit Python loops went from
/// 0.57x the raw kvm-ioctls loop to the figure in benches/bench_kvm.py).
pub struct DeadlineTimer {
    deadline: Instant,
    // not Send: the timer targets the thread that armed it
    _not_send: std::marker::PhantomData<*const ()>,
}

impl DeadlineTimer {
    /// Arms the calling thread's timer to fire no later than `deadline` (CLOCK_MONOTONIC).
    pub fn arm(deadline: Instant) -> Result<Self> {
        ensure_handler()?;
        ensure_atfork();
        let _ = TIMER_FIRED.try_with(|f| f.set(false));
        Self::set(deadline, false)?;
        Ok(Self { deadline, _not_send: std::marker::PhantomData })
    }

    fn set(deadline: Instant, force: bool) -> Result<()> {
        THREAD_TIMER.with(|t| -> Result<()> {
            let mut t = t.borrow_mut();
            let stale = t.as_ref().is_some_and(|x| x.generation != FORK_GENERATION.load(Ordering::SeqCst));
            if t.is_none() || stale {
                *t = Some(ThreadTimer::create()?);
            }
            let timer = t.as_mut().expect("created above");
            let now = Instant::now();
            if !force && timer.armed_until.is_some_and(|at| at > now && at <= deadline) {
                return Ok(()); // fires before the deadline: early_fire() handles it
            }
            // A zero it_value would disarm the timer: fire in 1 ns instead.
            let left = deadline.saturating_duration_since(now).max(std::time::Duration::from_nanos(1));
            timer.set(Some(left))?;
            timer.armed_until = Some(deadline);
            Ok(())
        })
    }

    /// True when the thread's timer fired (and so interrupted `KVM_RUN`)
    /// before this deadline: the loop should [`rearm`](Self::rearm) and run on.
    pub fn early_fire(&self) -> bool {
        TIMER_FIRED.try_with(|f| f.get()).unwrap_or(false) && Instant::now() < self.deadline
    }

    /// After an early fire: sets the timer for this deadline again.
    pub fn rearm(&self) -> Result<()> {
        let _ = TIMER_FIRED.try_with(|f| f.set(false));
        Self::set(self.deadline, true)
    }
}
