//! Another process's KVM objects, for `vcpulab.kvm.attach(pid)`.
//!
//! [`Process`] holds a pidfd (`pidfd_open(2)`, Linux 5.6): it names that one
//! process even after its pid number is freed and reused, tells when it has
//! exited (the pidfd polls readable), and is what its fds are duplicated
//! through (`pidfd_getfd(2)`, which needs ptrace access to it, e.g. root).
//!
//! A stats fd of the process is duplicated **once** ([`Process::take_stats_fd`])
//! and the duplicate is checked to be a KVM binary-stats file ([`check_stats_fd`])
//! before anything is read from it; samples then `pread` the kept duplicate.
//! Its number in the process is remembered only to ask, with `kcmp(2)`, whether
//! the process still holds that same open file ([`ForeignStats::held_by`]);
//! nothing is ever read from "fd N of pid P" again, so an fd number the process
//! reuses for an ordinary file is never read as statistics.
//!
//! The duplicate holds a reference on the process's VM (KVM takes one for every
//! stats file, `kvm_get_kvm` in `kvm_vcpu_ioctl_get_stats_fd`): while it is open
//! the VM's kernel state outlives the process's own fds and reads its final
//! counts. Callers close it once the process has let go ([`ForeignStats::held_by`]
//! false) or exited, so a watcher does not keep a dead VM alive.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::error::{Error, Result};
use super::stats::StatsFd;

/// `ANON_INODE_FS_MAGIC` (include/uapi/linux/magic.h): the filesystem of every
/// `anon_inode_getfile` file, KVM's VM, vCPU and stats fds among them.
pub const ANON_INODE_FS_MAGIC: i64 = 0x0904_1934;
/// `KCMP_FILE` (include/uapi/linux/kcmp.h).
const KCMP_FILE: libc::c_int = 0;

/// Whose statistics a KVM stats fd holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsOwner {
    /// `KVM_GET_STATS_FD` on a VM fd (`anon_inode:kvm-vm-stats`).
    Vm,
    /// `KVM_GET_STATS_FD` on vCPU fd N (`anon_inode:kvm-vcpu-stats:N`).
    Vcpu(u32),
}

/// What `fd` of this process is, as `/proc/self/fd/<fd>` names it
/// (`anon_inode:kvm-vm`, `pipe:[123]`, `/dev/null`, a path…).
fn fd_link(fd: BorrowedFd<'_>) -> Result<String> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|source| Error::Os { call: "readlink(/proc/self/fd)", source })
}

/// The `f_type` of the filesystem `fd` lies on (`fstatfs(2)`).
fn fs_magic(fd: BorrowedFd<'_>) -> Result<i64> {
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is an open fd borrowed for the call, `st` a writable statfs.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::last_os_call("fstatfs"));
    }
    Ok(st.f_type as i64)
}

/// Checks that `fd` (an fd of this process) is a KVM binary-stats file, and
/// says whose; anything else is refused with `Error::InvalidArgument` naming
/// what it is.
///
/// Why these checks are enough: an anonymous inode (`anon_inodefs`) is made
/// only by kernel code, which also chooses its name (`anon_inode_getfile(name,
/// …)`); KVM names its stats files `kvm-vcpu-stats:<vcpu id>` and
/// `kvm-vm-stats` (virt/kvm/kvm_main.c), and no user-space call can create an
/// anonymous inode with a name of its choosing. A file of any real filesystem
/// (a regular file, even one *named* `anon_inode:kvm-…`, a pipe, a device, a
/// memfd) has another `f_type` and reads as a path or `pipe:[…]`, never as
/// `anon_inode:…`. The link is read from the duplicate this process holds, not
/// from the other process's fd table, so the file checked is the file read.
/// The header's id (KVM writes `kvm-<pid>` / `kvm-<pid>/vcpu-<n>`) is checked
/// too, by [`Process::take_stats_fd`], as a second, independent sign.
pub fn check_stats_fd(fd: BorrowedFd<'_>) -> Result<StatsOwner> {
    let link = fd_link(fd)?;
    let owner = match link.strip_prefix("anon_inode:") {
        Some("kvm-vm-stats") => Some(StatsOwner::Vm),
        Some(rest) => rest
            .strip_prefix("kvm-vcpu-stats:")
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .map(StatsOwner::Vcpu),
        None => None,
    };
    let owner = owner.ok_or_else(|| {
        Error::InvalidArgument(format!(
            "not a KVM stats fd: it is {link} (expected anon_inode:kvm-vcpu-stats:N or anon_inode:kvm-vm-stats)"
        ))
    })?;
    let magic = fs_magic(fd)?;
    if magic != ANON_INODE_FS_MAGIC {
        return Err(Error::InvalidArgument(format!(
            "not a KVM stats fd: {link} lies on filesystem {magic:#x}, not anon_inodefs"
        )));
    }
    Ok(owner)
}

/// Another process, by pidfd.
#[derive(Debug)]
pub struct Process {
    pid: i32,
    pidfd: OwnedFd,
}

/// A KVM stats fd of another process, duplicated once, checked, and kept open.
#[derive(Debug)]
pub struct ForeignStats {
    pub stats: StatsFd,
    pub owner: StatsOwner,
    /// The number the process held it under when it was duplicated (for
    /// [`ForeignStats::held_by`] only; never read through).
    pub target_fd: i32,
}

impl Process {
    /// A pidfd for process `pid`: `Error::Os` with ESRCH when there is none.
    pub fn open(pid: i32) -> Result<Self> {
        if pid <= 0 {
            return Err(Error::InvalidArgument(format!("pid must be > 0, got {pid}")));
        }
        // SAFETY: pidfd_open(pid, flags) reads only its two integer arguments and
        // returns a new fd (O_CLOEXEC) or -1 with errno.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(Error::last_os_call("pidfd_open"));
        }
        // SAFETY: `fd` is an open fd just returned to this call, owned by nothing
        // else, and needs no cleanup but close.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Self { pid, pidfd })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// True once the process has exited (a zombie counts as exited); waits up
    /// to `timeout` for it. A signal that interrupts the wait returns false
    /// early (the caller checks for Ctrl-C and asks again).
    pub fn wait_exited(&self, timeout: Duration) -> Result<bool> {
        let mut p = libc::pollfd { fd: self.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `p` is one valid, writable pollfd and the count passed is 1;
        // the pidfd stays open for the call (borrowed from self).
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(Error::Os { call: "poll(pidfd)", source: e });
        }
        Ok(rc > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0)
    }

    /// Duplicates the process's fd number `fd` into this process (once),
    /// checks that the duplicate is a KVM stats file ([`check_stats_fd`]) whose
    /// header carries KVM's id, and keeps it. Anything else is closed again
    /// unread and refused (`Error::InvalidArgument` naming what it is).
    pub fn take_stats_fd(&self, fd: i32) -> Result<ForeignStats> {
        if fd < 0 {
            return Err(Error::InvalidArgument(format!("fd must be >= 0, got {fd}")));
        }
        // SAFETY: pidfd_getfd(pidfd, targetfd, flags) reads only its integer
        // arguments; `self.pidfd` is an open pidfd; it returns a new fd of this
        // process (O_CLOEXEC) or -1 with errno.
        let newfd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.pidfd.as_raw_fd(), fd, 0) };
        if newfd < 0 {
            return Err(Error::last_os_call("pidfd_getfd"));
        }
        // SAFETY: `newfd` is an open fd just returned to this call, owned by
        // nothing else, and needs no cleanup but close.
        let dup = unsafe { OwnedFd::from_raw_fd(newfd as i32) };
        let what = |e: Error| match e {
            Error::InvalidArgument(m) => {
                Error::InvalidArgument(format!("fd {fd} of process {} is refused: {m}", self.pid))
            }
            e => e,
        };
        let owner = check_stats_fd(dup.as_fd()).map_err(what)?;
        let stats = StatsFd::new(File::from(dup)).map_err(what)?;
        let id_ok = match owner {
            StatsOwner::Vm => stats.schema.id.starts_with("kvm-") && !stats.schema.id.contains('/'),
            StatsOwner::Vcpu(n) => {
                stats.schema.id.starts_with("kvm-") && stats.schema.id.ends_with(&format!("/vcpu-{n}"))
            }
        };
        if !id_ok {
            return Err(what(Error::InvalidArgument(format!(
                "not a KVM stats fd: its header's id is {:?}, not KVM's kvm-<pid>[/vcpu-<n>]",
                stats.schema.id
            ))));
        }
        Ok(ForeignStats { stats, owner, target_fd: fd })
    }
}

impl ForeignStats {
    /// Whether `process` still holds this same open file under the number it
    /// was duplicated from (`kcmp(2)` `KCMP_FILE`: compares the two files, reads
    /// nothing). `Some(false)`: the process closed it (or reused the number for
    /// another file, or exited); `None`: cannot be told here (no kcmp in this
    /// kernel, or no permission).
    pub fn held_by(&self, process: &Process) -> Option<bool> {
        // SAFETY: this process's pid; getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        let (idx1, idx2) = (self.stats.as_fd().as_raw_fd() as libc::c_ulong, self.target_fd as libc::c_ulong);
        // SAFETY: kcmp(pid1, pid2, type, idx1, idx2) reads only its integer
        // arguments (the fd indexes passed as the unsigned longs it takes) and
        // returns 0 (same), 1-3 (differ) or -1 with errno.
        let rc = unsafe { libc::syscall(libc::SYS_kcmp, me, process.pid, KCMP_FILE, idx1, idx2) };
        match rc {
            0 => Some(true),
            1..=3 => Some(false),
            _ => match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EBADF) | Some(libc::ESRCH) => Some(false),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn refuses_files_that_are_not_kvm_stats() {
        let mut tmp = tempfile_in_tmp();
        tmp.write_all(b"not stats").unwrap();
        let e = check_stats_fd(tmp.as_fd()).unwrap_err().to_string();
        assert!(e.contains("not a KVM stats fd") && e.contains("/tmp/"), "{e}");
        let null = File::open("/dev/null").unwrap();
        let e = check_stats_fd(null.as_fd()).unwrap_err().to_string();
        assert!(e.contains("/dev/null"), "{e}");
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = check_stats_fd(a.as_fd()).unwrap_err().to_string();
        assert!(e.contains("socket:["), "{e}");
    }

    #[test]
    fn take_stats_fd_refuses_an_ordinary_fd_of_a_process() {
        let f = File::open("/dev/null").unwrap();
        let me = Process::open(std::process::id() as i32).unwrap();
        match me.take_stats_fd(f.as_raw_fd()) {
            // pidfd_getfd on oneself needs no privilege beyond ptrace access to oneself
            Err(Error::InvalidArgument(m)) => assert!(m.contains("/dev/null") && m.contains("refused"), "{m}"),
            Err(Error::Os { .. }) => {} // a kernel without pidfd_getfd, or a sandbox refusing it
            other => panic!("{other:?}"),
        }
        assert!(!me.wait_exited(Duration::ZERO).unwrap());
    }

    fn tempfile_in_tmp() -> File {
        let p = std::env::temp_dir().join(format!("vcpulab-foreign-{}", std::process::id()));
        let f = File::options().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }
}
