//! Thin operating-system helpers the other rooms share: the host CPUs this
//! process may use, pinning a thread to some of them (sched_setaffinity(2)),
//! and the `CLOCK_MONOTONIC` clock every trace sample and experiment uses.

use super::error::{Error, Result};

/// Pins the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> Result<()> {
    pin_thread(0, cpus)
}

/// Pins thread `tid` of this process (0: the calling thread) to `cpus`.
pub fn pin_thread(tid: i32, cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(Error::InvalidArgument(format!("host CPU {c} is out of range")));
        }
        // SAFETY: c < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `tid` is 0 (the calling thread) or a thread id (a wrong one fails with ESRCH);
    // `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(Error::last_os("sched_setaffinity"));
    }
    Ok(())
}

/// Host CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is valid; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer and size; pid 0 = this thread.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: `set` was filled by the kernel; CPU_ISSET reads a bit below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// The current `CLOCK_MONOTONIC` time, ns (the clock of every trace sample).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
