//! Forcing a vCPU out of `KVM_RUN`: from another thread (a kick) or at a deadline.
//!
//! Race-free scheme (as in firecracker): the kicker sets `kvm_run.immediate_exit`
//! and then sends a real-time signal to the vCPU's thread. If the signal lands
//! while the thread is inside `KVM_RUN`, the ioctl returns `EINTR`; if it lands
//! just before the thread enters it, `immediate_exit` makes `KVM_RUN` return
//! `EINTR` at once. The signal handler itself also sets `immediate_exit`
//! (through a thread-local pointer) so that a deadline timer, which only sends
//! the signal, is race-free too.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use super::error::{Error, Result};

thread_local! {
    /// `&kvm_run.immediate_exit` of the vCPU this thread is running, or null.
    static IMMEDIATE_EXIT: Cell<*const AtomicU8> = const { Cell::new(std::ptr::null()) };
}

/// The real-time signal vcpulab uses for kicks (SIGRTMIN + 3).
pub fn kick_signal() -> libc::c_int {
    SIGRTMIN() + 3
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only async-signal-safe work: a const-initialised TLS read and an atomic store.
    let _ = IMMEDIATE_EXIT.try_with(|p| {
        let p = p.get();
        if !p.is_null() {
            // SAFETY: the pointer is set only while this thread is inside `RunGuard`,
            // whose owner keeps the vCPU (and so its kvm_run mapping) alive.
            unsafe { &*p }.store(1, Ordering::SeqCst);
        }
    });
}

/// Installs the kick signal's handler once per process.
pub fn ensure_handler() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), i32>> = OnceLock::new();
    (*INSTALLED.get_or_init(|| register_signal_handler(kick_signal(), on_kick).map_err(|e| e.errno()))).map_err(
        |errno| Error::Ioctl { call: "sigaction(kick signal)", source: std::io::Error::from_raw_os_error(errno) },
    )
}

/// Who is running a vCPU right now, so another thread can kick it.
#[derive(Debug)]
pub struct RunSlot {
    thread: Mutex<Option<libc::pthread_t>>,
    immediate_exit: *const AtomicU8,
    /// Set for good by [`RunSlot::stop`]: no run may start any more.
    stopped: AtomicBool,
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
        Self::kick_locked(&t, self.immediate_exit);
    }

    /// Forces the running thread (if any) out of KVM_RUN. Returns whether a run was kicked.
    pub fn kick(&self) -> bool {
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        Self::kick_locked(&t, self.immediate_exit)
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

    /// Clears `immediate_exit` (before the next KVM_RUN).
    pub fn clear(&self) {
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

/// A one-shot POSIX timer that sends the kick signal to the calling thread at a deadline.
pub struct DeadlineTimer {
    id: libc::timer_t,
}

impl DeadlineTimer {
    /// Arms a timer for `deadline` (CLOCK_MONOTONIC) targeting the calling thread.
    pub fn arm(deadline: Instant) -> Result<Self> {
        ensure_handler()?;
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
        let timer = Self { id };
        let left = deadline.saturating_duration_since(Instant::now());
        // A zero it_value would disarm the timer: fire in 1 ns instead.
        let left = left.max(std::time::Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: the timer id is valid (created above), spec is a valid itimerspec.
        if unsafe { libc::timer_settime(timer.id, 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(Error::last_os("timer_settime"));
        }
        Ok(timer)
    }
}

impl Drop for DeadlineTimer {
    fn drop(&mut self) {
        // SAFETY: the id came from a successful timer_create and is deleted once.
        unsafe { libc::timer_delete(self.id) };
    }
}
