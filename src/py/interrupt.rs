//! One interrupt path for every long call that releases the GIL: Ctrl-C
//! (Python's signal handlers, which run only on its main thread), a caller's
//! `should_stop()`, or a stop flag set by another thread, seen by
//! [`Interrupt::check`] and raised afterwards as the `KeyboardInterrupt`
//! (or the callable's exception) that [`Interrupt::take`] returns. The
//! simulator, the halt-polling model, sweeps, KVM runs, MSI trains and
//! experiments all use it; [`run_polled`] runs work on a scoped thread
//! while the calling thread polls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::sim;

/// How often a paced [`Interrupt`] looks at Python: a Ctrl-C is seen within it.
pub(crate) const PACE: Duration = Duration::from_millis(50);

/// Decides when a running simulation stops early: Ctrl-C seen by the thread
/// that owns the signal handlers (Python's main thread), a caller's
/// `should_stop()` callable (a checkpointed sweep cancelling its points), or
/// `stop` set by another thread (the polling loop of [`sim_sweep`]).
///
/// Python only runs signal handlers on its main thread: `check_signals()` from
/// any other thread (a rayon worker, a thread-pool worker) is a no-op, so a
/// sweep polls on the calling thread and tells the workers through `stop`.
/// `Python::try_attach` (not `attach`): a daemon thread still simulating while
/// the interpreter shuts down stops instead of panicking (an abort).
#[derive(Default)]
pub(crate) struct Interrupt {
    err: Mutex<Option<PyErr>>,
    stop: AtomicBool,
    should_stop: Option<Py<PyAny>>,
    /// Only the flag (a worker of `sim_sweep`: the calling thread polls the signals).
    flag_only: bool,
    /// Look at Python at most this often, and when next (a busy loop's
    /// checks: a KVM wait, an MSI train); None: at every check (the
    /// simulator paces its own checks, every 10 ms of wall time).
    pace: Option<(Duration, Mutex<Instant>)>,
}

/// Called last inside a `py.detach` closure: if the interpreter is shutting
/// down (a daemon thread still simulating when the main thread ended), never
/// return. Re-attaching then would make CPython end this thread with
/// `pthread_exit`, whose forced unwind through pyo3's `catch_unwind` aborts
/// the process; parked, the thread simply ends with the process.
pub(crate) fn park_if_finalizing() {
    if Python::try_attach(|_| ()).is_none() {
        loop {
            std::thread::park();
        }
    }
}

/// Runs `work` on a scoped thread while the calling thread (GIL released)
/// polls Python for Ctrl-C every 50 ms and tells the workers through
/// `interrupt.stop` (their own checks are flag-only). A panic of `work`
/// becomes Err(message).
pub(crate) fn run_polled<R: Send>(
    py: Python<'_>,
    interrupt: &Interrupt,
    work: impl FnOnce() -> R + Send,
) -> Result<R, String> {
    let finished = AtomicBool::new(false);
    py.detach(|| {
        let r = std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let r = work();
                finished.store(true, Ordering::SeqCst);
                r
            });
            while !finished.load(Ordering::SeqCst) && !worker.is_finished() {
                std::thread::sleep(PACE);
                if !interrupt.stop.load(Ordering::SeqCst) {
                    interrupt.poll_python();
                }
            }
            worker.join().map_err(|p| sim::panic_message(p.as_ref()))
        });
        park_if_finalizing();
        r
    })
}

impl Interrupt {
    pub(crate) fn flag_only() -> Self {
        Interrupt { flag_only: true, ..Default::default() }
    }

    pub(crate) fn with_callable(should_stop: Option<Py<PyAny>>) -> Self {
        Interrupt { should_stop, ..Default::default() }
    }

    /// Checks Python for Ctrl-C at most every [`PACE`] (taking the GIL
    /// briefly), from a thread that released it; a pending KeyboardInterrupt
    /// is kept for [`Interrupt::take`].
    pub(crate) fn paced() -> Self {
        Interrupt { pace: Some((PACE, Mutex::new(Instant::now() + PACE))), ..Default::default() }
    }

    pub(crate) fn set(&self, e: PyErr) {
        let mut slot = self.err.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Polls Python (signals, `should_stop`); true when the run must stop.
    fn poll_python(&self) -> bool {
        let r = Python::try_attach(|py| -> PyResult<bool> {
            py.check_signals()?;
            match &self.should_stop {
                Some(f) => f.call0(py)?.is_truthy(py),
                None => Ok(false),
            }
        });
        match r {
            None => {
                // the interpreter is finalizing: nobody will read the result
                self.stop.store(true, Ordering::SeqCst);
                true
            }
            Some(Ok(stop)) => {
                if stop {
                    self.set(pyo3::exceptions::PyKeyboardInterrupt::new_err("simulation cancelled"));
                }
                stop
            }
            Some(Err(e)) => {
                self.set(e);
                true
            }
        }
    }

    pub(crate) fn check(&self) -> bool {
        if self.stop.load(Ordering::SeqCst) {
            return true;
        }
        if self.flag_only {
            return false;
        }
        if let Some((every, next)) = &self.pace {
            let now = Instant::now();
            let mut next = next.lock().unwrap_or_else(|p| p.into_inner());
            if now < *next {
                return false;
            }
            *next = now + *every;
        }
        self.poll_python()
    }

    pub(crate) fn take(&self) -> Option<PyErr> {
        self.err.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}
