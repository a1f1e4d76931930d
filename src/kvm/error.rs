//! The KVM layer's error type. Every variant says what went wrong in words a
//! researcher can act on; `src/py/errors.rs` maps each variant to one Python
//! exception class.

use thiserror::Error;

/// Result alias for the KVM layer.
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Error)]
pub enum Error {
    /// `/dev/kvm` cannot be used at all. `reason` explains why and how to fix it.
    #[error("KVM is unavailable: {reason}")]
    Unavailable { reason: String },

    /// An ioctl (or other syscall) failed. Names the call, so a failure can be
    /// traced to the exact operation.
    #[error("{call} failed: {source}")]
    Ioctl {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A system call outside KVM failed (on another process, a filesystem…);
    /// maps to Python's OSError with the errno, so ESRCH is ProcessLookupError
    /// and EPERM PermissionError.
    #[error("{call} failed: {source}")]
    Os {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A caller passed a value that is out of its domain (maps to ValueError).
    #[error("{0}")]
    InvalidArgument(String),

    /// iced-x86 could not assemble a guest program (an instruction form or a
    /// label it cannot encode). `?` converts it where a program is built
    /// (`guest/program.rs`); maps to ValueError, as an argument out of range does.
    #[error("assembling guest code failed: {0}")]
    Assembler(#[from] iced_x86::IcedError),

    /// A caller passed a value of the wrong type (maps to TypeError).
    #[error("{0}")]
    WrongType(String),

    /// An index or guest-physical range lies outside what exists (maps to IndexError).
    #[error("{0}")]
    OutOfRange(String),

    /// The object was closed; using it again is a programming error.
    #[error("{0} is closed")]
    Closed(&'static str),

    /// A run did not reach the wanted exit before its deadline.
    #[error("{0}")]
    Timeout(String),

    /// The guest program reported a failed assertion through the ucall port.
    #[error("guest assertion failed at {location}: {message}")]
    GuestAssertion { location: String, message: String },

    /// The guest stopped in a way the caller did not expect (e.g. a triple fault
    /// while waiting for a ucall). `exit` describes the exit that was seen.
    #[error("{0}")]
    UnexpectedExit(String),

    /// The host lacks a feature the operation needs (e.g. an in-kernel irqchip).
    #[error("{0}")]
    Unsupported(String),

    /// Kernel tracing cannot be used (tracefs absent and not mountable, or a
    /// tracepoint missing); the message says which and how to fix it.
    #[error("tracing is unavailable: {0}")]
    TraceUnavailable(String),

    /// A scheduling policy of `vcpulab.sched` failed (a directed-yield policy
    /// raised, returned no candidate, or overran its deadline); the message
    /// names the policy and the call. Maps to ValueError (a Python policy's own
    /// exception is raised instead, chained).
    #[error("{0}")]
    Policy(String),
}

impl Error {
    /// Wraps a `vmm_sys_util::errno::Error` (what kvm-ioctls returns) with the call's name.
    pub fn ioctl(call: &'static str, e: vmm_sys_util::errno::Error) -> Self {
        Error::Ioctl { call, source: std::io::Error::from_raw_os_error(e.errno()) }
    }

    /// Wraps the current `errno` with the call's name.
    pub fn last_os(call: &'static str) -> Self {
        Error::Ioctl { call, source: std::io::Error::last_os_error() }
    }

    /// Wraps the current `errno` of a system call outside KVM ([`Error::Os`]).
    pub fn last_os_call(call: &'static str) -> Self {
        Error::Os { call, source: std::io::Error::last_os_error() }
    }

    /// The errno of an ioctl failure, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Ioctl { source, .. } | Error::Os { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// `ensure!`-style helper for argument checks.
macro_rules! invalid {
    ($($arg:tt)*) => { return Err($crate::kvm::Error::InvalidArgument(format!($($arg)*))) };
}
pub(crate) use invalid;
