//! Owned, decoded vCPU exits (what one `KVM_RUN` returned).

use kvm_ioctls::VcpuExit;

/// Direction of a port IO exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoDir {
    In,
    Out,
}

/// One decoded exit. Unknown exit reasons become [`Exit::Other`], never a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// `in`/`out`: port, access size in bytes (1, 2 or 4), number of accesses
    /// (> 1 for string IO, `rep ins`/`rep outs`), direction, and the
    /// `size * count` bytes moved (for IN: what the host returns).
    Io { port: u16, size: u8, count: u32, dir: IoDir, data: Vec<u8> },
    /// MMIO access outside guest RAM.
    Mmio { addr: u64, len: u8, is_write: bool, data: Vec<u8> },
    /// HLT (only exits to user space without an in-kernel irqchip).
    Hlt,
    /// Triple fault.
    Shutdown,
    /// `KVM_EXIT_INTERNAL_ERROR` with its suberror (1 = emulation failure, …).
    InternalError { suberror: u32, data: Vec<u64> },
    /// `KVM_EXIT_FAIL_ENTRY`: the hardware refused VM entry.
    FailEntry { reason: u64, cpu: u32 },
    /// KVM_RUN was interrupted by a signal or `immediate_exit` (EINTR / KVM_EXIT_INTR).
    Interrupted,
    /// `KVM_EXIT_SYSTEM_EVENT` (reset, shutdown, crash …).
    SystemEvent { kind: u32, data: Vec<u64> },
    /// `KVM_EXIT_DEBUG`.
    Debug,
    /// Any other exit reason, by number.
    Other { reason: u32, name: &'static str },
}

/// Every kind name [`Exit::kind`] returns, in declaration order (Python's
/// `vcpulab.kvm.EXIT_KINDS` reads this list).
pub const EXIT_KINDS: &[&str] =
    &["io", "mmio", "hlt", "shutdown", "internal_error", "fail_entry", "interrupted", "system_event", "debug", "other"];

impl Exit {
    /// The short kind name used in Python (`exit.kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Exit::Io { .. } => "io",
            Exit::Mmio { .. } => "mmio",
            Exit::Hlt => "hlt",
            Exit::Shutdown => "shutdown",
            Exit::InternalError { .. } => "internal_error",
            Exit::FailEntry { .. } => "fail_entry",
            Exit::Interrupted => "interrupted",
            Exit::SystemEvent { .. } => "system_event",
            Exit::Debug => "debug",
            Exit::Other { .. } => "other",
        }
    }

    /// Every kind name, for validating user input.
    pub const KINDS: [&'static str; 10] = [
        "io",
        "mmio",
        "hlt",
        "shutdown",
        "internal_error",
        "fail_entry",
        "interrupted",
        "system_event",
        "debug",
        "other",
    ];

    /// Decodes a kvm-ioctls exit. `internal` supplies the internal-error payload,
    /// which kvm-ioctls does not decode (read from the kvm_run page by the caller).
    pub fn from_vcpu_exit(e: &VcpuExit<'_>, internal: impl FnOnce() -> (u32, Vec<u64>)) -> Exit {
        match e {
            // size and count are filled in from the kvm_run page by the caller
            // (kvm-ioctls only hands out the data slice of size * count bytes)
            VcpuExit::IoOut(port, data) => {
                Exit::Io { port: *port, size: 0, count: 0, dir: IoDir::Out, data: data.to_vec() }
            }
            VcpuExit::IoIn(port, data) => {
                Exit::Io { port: *port, size: 0, count: 0, dir: IoDir::In, data: data.to_vec() }
            }
            VcpuExit::MmioRead(addr, data) => {
                Exit::Mmio { addr: *addr, len: data.len() as u8, is_write: false, data: data.to_vec() }
            }
            VcpuExit::MmioWrite(addr, data) => {
                Exit::Mmio { addr: *addr, len: data.len() as u8, is_write: true, data: data.to_vec() }
            }
            VcpuExit::Hlt => Exit::Hlt,
            VcpuExit::Shutdown => Exit::Shutdown,
            VcpuExit::InternalError => {
                let (suberror, data) = internal();
                Exit::InternalError { suberror, data }
            }
            VcpuExit::FailEntry(reason, cpu) => Exit::FailEntry { reason: *reason, cpu: *cpu },
            VcpuExit::Intr => Exit::Interrupted,
            VcpuExit::SystemEvent(kind, data) => Exit::SystemEvent { kind: *kind, data: data.to_vec() },
            VcpuExit::Debug(_) => Exit::Debug,
            VcpuExit::Unsupported(r) => Exit::Other { reason: *r, name: "unsupported" },
            VcpuExit::Unknown => Exit::Other { reason: kvm_bindings::KVM_EXIT_UNKNOWN, name: "unknown" },
            VcpuExit::Exception => Exit::Other { reason: kvm_bindings::KVM_EXIT_EXCEPTION, name: "exception" },
            VcpuExit::IrqWindowOpen => {
                Exit::Other { reason: kvm_bindings::KVM_EXIT_IRQ_WINDOW_OPEN, name: "irq_window_open" }
            }
            VcpuExit::IoapicEoi(_) => Exit::Other { reason: kvm_bindings::KVM_EXIT_IOAPIC_EOI, name: "ioapic_eoi" },
            VcpuExit::Hypercall(_) => Exit::Other { reason: kvm_bindings::KVM_EXIT_HYPERCALL, name: "hypercall" },
            VcpuExit::MemoryFault { .. } => {
                Exit::Other { reason: kvm_bindings::KVM_EXIT_MEMORY_FAULT, name: "memory_fault" }
            }
            VcpuExit::X86Rdmsr(_) => Exit::Other { reason: kvm_bindings::KVM_EXIT_X86_RDMSR, name: "x86_rdmsr" },
            VcpuExit::X86Wrmsr(_) => Exit::Other { reason: kvm_bindings::KVM_EXIT_X86_WRMSR, name: "x86_wrmsr" },
            _ => Exit::Other { reason: u32::MAX, name: "other" },
        }
    }

    /// The IO/MMIO data as a little-endian integer (0 for other kinds).
    pub fn data_value(&self) -> u64 {
        let d: &[u8] = match self {
            Exit::Io { data, .. } | Exit::Mmio { data, .. } => data,
            _ => &[],
        };
        d.iter().take(8).enumerate().fold(0u64, |acc, (i, b)| acc | (*b as u64) << (8 * i))
    }

    /// A one-line description for error messages ("wanted X, got …").
    pub fn describe(&self) -> String {
        match self {
            Exit::Io { port, size, count, dir, .. } => {
                format!("io {dir:?} port {port:#x} size {size} count {count} data {:#x}", self.data_value())
            }
            Exit::Mmio { addr, len, is_write, .. } => {
                format!(
                    "mmio {} {addr:#x} len {len} data {:#x}",
                    if *is_write { "write" } else { "read" },
                    self.data_value()
                )
            }
            Exit::InternalError { suberror, .. } => format!("internal_error suberror {suberror}"),
            Exit::FailEntry { reason, cpu } => format!("fail_entry reason {reason:#x} on cpu {cpu}"),
            Exit::SystemEvent { kind, .. } => format!("system_event type {kind}"),
            Exit::Other { reason, name } => format!("other exit {name} ({reason})"),
            e => e.kind().to_string(),
        }
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn every_exit_kind_is_listed_once() {
        let all = [
            Exit::Io { port: 0, size: 1, count: 1, dir: IoDir::Out, data: vec![0] },
            Exit::Mmio { addr: 0, len: 1, is_write: false, data: vec![0] },
            Exit::Hlt,
            Exit::Shutdown,
            Exit::InternalError { suberror: 1, data: vec![] },
            Exit::FailEntry { reason: 0, cpu: 0 },
            Exit::Interrupted,
            Exit::SystemEvent { kind: 0, data: vec![] },
            Exit::Debug,
            Exit::Other { reason: 0, name: "x" },
        ];
        // a new variant fails to compile here until it is added to `all` (and to EXIT_KINDS)
        for e in &all {
            match e {
                Exit::Io { .. }
                | Exit::Mmio { .. }
                | Exit::Hlt
                | Exit::Shutdown
                | Exit::InternalError { .. }
                | Exit::FailEntry { .. }
                | Exit::Interrupted
                | Exit::SystemEvent { .. }
                | Exit::Debug
                | Exit::Other { .. } => {}
            }
        }
        let kinds: Vec<&str> = all.iter().map(Exit::kind).collect();
        assert_eq!(kinds, EXIT_KINDS);
    }
}
