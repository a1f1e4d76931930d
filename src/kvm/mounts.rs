//! The kernel pseudo filesystems vcpulab mounts where they are missing: debugfs
//! at `/sys/kernel/debug` (KVM's per-VM folders for `attach`, the scheduler's
//! knobs for `twins.host_knobs`) and tracefs at `/sys/kernel/tracing` (the
//! tracepoint formats of traced runs). Only these two, only at those standard
//! paths, with the flags systemd's `sys-kernel-debug.mount` /
//! `sys-kernel-tracing.mount` use (nosuid, nodev, noexec, relatime).
//!
//! Mounts are made with `mount(2)`, never by running a `mount` program: a
//! program found through `PATH` could be anyone's. A mount made here stays
//! after the process ends, as one made by hand would (unmounting it could pull
//! it from under another user who started using it since); [`mounted_here`]
//! lists what this process mounted, so the Python layer can say it once
//! (`vcpulab._mounts`, docs/tracing.md "Host state").

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use super::error::{Error, Result};

/// A pseudo filesystem vcpulab may mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PseudoFs {
    Debugfs,
    Tracefs,
}

static MOUNTED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

impl PseudoFs {
    pub const ALL: [PseudoFs; 2] = [PseudoFs::Debugfs, PseudoFs::Tracefs];

    /// "debugfs" or "tracefs"; anything else is refused.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            Error::InvalidArgument(format!("pseudo filesystem must be 'debugfs' or 'tracefs', got {name:?}"))
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            PseudoFs::Debugfs => "debugfs",
            PseudoFs::Tracefs => "tracefs",
        }
    }

    /// Its standard mount point.
    pub fn path(self) -> &'static str {
        match self {
            PseudoFs::Debugfs => "/sys/kernel/debug",
            PseudoFs::Tracefs => "/sys/kernel/tracing",
        }
    }

    fn c_name(self) -> &'static CStr {
        match self {
            PseudoFs::Debugfs => c"debugfs",
            PseudoFs::Tracefs => c"tracefs",
        }
    }

    fn c_path(self) -> &'static CStr {
        match self {
            PseudoFs::Debugfs => c"/sys/kernel/debug",
            PseudoFs::Tracefs => c"/sys/kernel/tracing",
        }
    }

    /// `f_type` of the filesystem (include/uapi/linux/magic.h).
    fn magic(self) -> i64 {
        match self {
            PseudoFs::Debugfs => 0x6462_6720, // DEBUGFS_MAGIC
            PseudoFs::Tracefs => 0x7472_6163, // TRACEFS_MAGIC
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// True when `fs` is mounted at its standard path (`statfs(2)` of the path
/// names that filesystem).
pub fn is_mounted(fs: PseudoFs) -> Result<bool> {
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a NUL-terminated static C string; `st` is a writable statfs.
    if unsafe { libc::statfs(fs.c_path().as_ptr(), &mut st) } != 0 {
        return Err(Error::last_os_call("statfs"));
    }
    Ok(st.f_type as i64 == fs.magic())
}

/// Mounts `fs` at its standard path unless it is mounted there already.
/// Ok(true): this call mounted it (it stays mounted); Ok(false): it was there.
/// `Error::Os` when the mount point is missing or the mount is refused
/// (EPERM: not root, i.e. no CAP_SYS_ADMIN).
pub fn ensure_mounted(fs: PseudoFs) -> Result<bool> {
    if is_mounted(fs)? {
        return Ok(false);
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RELATIME;
    // SAFETY: source, target and type are NUL-terminated static C strings that
    // outlive the call; `data` may be null for these filesystems.
    let rc = unsafe {
        libc::mount(fs.c_name().as_ptr(), fs.c_path().as_ptr(), fs.c_name().as_ptr(), flags, std::ptr::null())
    };
    if rc != 0 {
        return Err(Error::last_os_call(match fs {
            PseudoFs::Debugfs => "mount(debugfs, /sys/kernel/debug)",
            PseudoFs::Tracefs => "mount(tracefs, /sys/kernel/tracing)",
        }));
    }
    MOUNTED[fs.index()].store(true, Ordering::SeqCst);
    Ok(true)
}

/// The filesystems this process has mounted (each stays mounted).
pub fn mounted_here() -> Vec<PseudoFs> {
    PseudoFs::ALL.into_iter().filter(|f| MOUNTED[f.index()].load(Ordering::SeqCst)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_names_are_accepted() {
        assert_eq!(PseudoFs::parse("debugfs").unwrap().path(), "/sys/kernel/debug");
        assert_eq!(PseudoFs::parse("tracefs").unwrap().path(), "/sys/kernel/tracing");
        for bad in ["proc", "/sys/kernel/debug", "", "debugfs "] {
            assert!(PseudoFs::parse(bad).is_err(), "{bad}");
        }
        for f in PseudoFs::ALL {
            assert_eq!(f.c_path().to_str().unwrap(), f.path());
            assert_eq!(f.c_name().to_str().unwrap(), f.name());
        }
    }
}
