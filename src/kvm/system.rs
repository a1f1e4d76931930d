//! The host's `/dev/kvm`: opening it, its API version, limits, capabilities and
//! the KVM paravirtual features it offers to guests.

use std::sync::Arc;

use kvm_bindings::*;
use kvm_ioctls::Kvm;

use super::error::{Error, Result};

/// Capacity used for `KVM_GET_SUPPORTED_CPUID`.
pub const MAX_CPUID_ENTRIES: usize = KVM_MAX_CPUID_ENTRIES;

/// The KVM capabilities vcpulab reports by name (`KVM_CHECK_EXTENSION` on /dev/kvm).
pub const CAPABILITIES: &[(&str, u32)] = &[
    ("KVM_CAP_IRQCHIP", KVM_CAP_IRQCHIP),
    ("KVM_CAP_HLT", KVM_CAP_HLT),
    ("KVM_CAP_USER_MEMORY", KVM_CAP_USER_MEMORY),
    ("KVM_CAP_SET_TSS_ADDR", KVM_CAP_SET_TSS_ADDR),
    ("KVM_CAP_NR_VCPUS", KVM_CAP_NR_VCPUS),
    ("KVM_CAP_NR_MEMSLOTS", KVM_CAP_NR_MEMSLOTS),
    ("KVM_CAP_MAX_VCPUS", KVM_CAP_MAX_VCPUS),
    ("KVM_CAP_MAX_VCPU_ID", KVM_CAP_MAX_VCPU_ID),
    ("KVM_CAP_SIGNAL_MSI", KVM_CAP_SIGNAL_MSI),
    ("KVM_CAP_IRQFD", KVM_CAP_IRQFD),
    ("KVM_CAP_GET_TSC_KHZ", KVM_CAP_GET_TSC_KHZ),
    ("KVM_CAP_TSC_CONTROL", KVM_CAP_TSC_CONTROL),
    ("KVM_CAP_KVMCLOCK_CTRL", KVM_CAP_KVMCLOCK_CTRL),
    ("KVM_CAP_IMMEDIATE_EXIT", KVM_CAP_IMMEDIATE_EXIT),
    ("KVM_CAP_X2APIC_API", KVM_CAP_X2APIC_API),
    ("KVM_CAP_X86_DISABLE_EXITS", KVM_CAP_X86_DISABLE_EXITS),
    ("KVM_CAP_HALT_POLL", KVM_CAP_HALT_POLL),
    ("KVM_CAP_STEAL_TIME", KVM_CAP_STEAL_TIME),
    ("KVM_CAP_X86_USER_SPACE_MSR", KVM_CAP_X86_USER_SPACE_MSR),
    ("KVM_CAP_BINARY_STATS_FD", KVM_CAP_BINARY_STATS_FD),
    ("KVM_CAP_DIRTY_LOG_RING", KVM_CAP_DIRTY_LOG_RING),
];

/// `KVM_X86_DISABLE_EXITS_*` bits of `KVM_CAP_X86_DISABLE_EXITS`.
pub const DISABLE_EXITS_BITS: &[(&str, u64)] = &[
    ("mwait", KVM_X86_DISABLE_EXITS_MWAIT as u64),
    ("hlt", KVM_X86_DISABLE_EXITS_HLT as u64),
    ("pause", KVM_X86_DISABLE_EXITS_PAUSE as u64),
    ("cstate", KVM_X86_DISABLE_EXITS_CSTATE as u64),
];

/// `KVM_FEATURE_*` bits of CPUID leaf 0x40000001 EAX ([K5]).
pub const PV_FEATURES: &[(&str, u32)] = &[
    ("CLOCKSOURCE", 0),
    ("NOP_IO_DELAY", 1),
    ("MMU_OP", 2),
    ("CLOCKSOURCE2", 3),
    ("ASYNC_PF", 4),
    ("STEAL_TIME", 5),
    ("PV_EOI", 6),
    ("PV_UNHALT", 7),
    ("PV_TLB_FLUSH", 9),
    ("ASYNC_PF_VMEXIT", 10),
    ("PV_SEND_IPI", 11),
    ("POLL_CONTROL", 12),
    ("PV_SCHED_YIELD", 13),
    ("ASYNC_PF_INT", 14),
    ("MSI_EXT_DEST_ID", 15),
    ("HC_MAP_GPA_RANGE", 16),
    ("MIGRATION_CONTROL", 17),
    ("CLOCKSOURCE_STABLE_BIT", 24),
];

/// CPUID leaf of the KVM features.
pub const KVM_CPUID_FEATURES: u32 = 0x4000_0001;

/// An open `/dev/kvm`.
#[derive(Debug)]
pub struct Host {
    pub(crate) kvm: Arc<Kvm>,
    supported_cpuid: Vec<kvm_cpuid_entry2>,
}

fn unavailable(path: &str, e: std::io::Error) -> Error {
    let reason = match e.raw_os_error() {
        Some(libc::ENOENT) => format!(
            "{path} does not exist. Load the KVM module for your CPU (`modprobe kvm_intel` or `modprobe kvm_amd`), \
             enable virtualization (VT-x/AMD-V) in the firmware, or, inside a VM, enable nested virtualization."
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "permission denied opening {path}. Add your user to the group that owns it \
             (usually `sudo usermod -aG kvm $USER`, then log in again) or run as root."
        ),
        Some(libc::ENXIO) | Some(libc::ENODEV) => {
            format!("{path} exists but no KVM module is loaded behind it ({e}). Load kvm_intel or kvm_amd.")
        }
        _ => format!("opening {path} failed: {e}"),
    };
    Error::Unavailable { reason }
}

impl Host {
    /// Opens `/dev/kvm`.
    pub fn open() -> Result<Self> {
        Self::open_path("/dev/kvm")
    }

    /// Opens a KVM device node at `path` (for tests and unusual setups).
    pub fn open_path(path: &str) -> Result<Self> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(|e| unavailable(path, e))?;
        use std::os::fd::{FromRawFd, IntoRawFd};
        let fd = file.into_raw_fd();
        // SAFETY: `fd` was just opened, is owned by nobody else, and is a KVM fd
        // (the API version check below rejects anything else).
        let kvm = unsafe { Kvm::from_raw_fd(fd) };
        let version = kvm.get_api_version();
        if version != KVM_API_VERSION as i32 {
            return Err(Error::Unavailable {
                reason: format!("{path} speaks KVM API version {version}, vcpulab needs {KVM_API_VERSION}"),
            });
        }
        let supported_cpuid = kvm
            .get_supported_cpuid(MAX_CPUID_ENTRIES)
            .map_err(|e| Error::ioctl("KVM_GET_SUPPORTED_CPUID", e))?
            .as_slice()
            .to_vec();
        Ok(Self { kvm: Arc::new(kvm), supported_cpuid })
    }

    pub fn api_version(&self) -> i32 {
        self.kvm.get_api_version()
    }

    /// `KVM_CAP_MAX_VCPUS` (the most vCPUs one VM may have).
    pub fn max_vcpus(&self) -> usize {
        self.kvm.get_max_vcpus()
    }

    /// `KVM_CAP_MAX_VCPU_ID` (vCPU ids must be below this).
    pub fn max_vcpu_id(&self) -> usize {
        self.kvm.get_max_vcpu_id()
    }

    /// `KVM_CHECK_EXTENSION` for a raw capability number.
    pub fn check_extension(&self, cap: u32) -> i32 {
        self.kvm.check_extension_raw(cap as libc::c_ulong)
    }

    /// Every capability of [`CAPABILITIES`] with its value.
    pub fn capabilities(&self) -> Vec<(&'static str, u32, i32)> {
        CAPABILITIES.iter().map(|&(n, c)| (n, c, self.check_extension(c))).collect()
    }

    /// `KVM_GET_SUPPORTED_CPUID`.
    pub fn supported_cpuid(&self) -> &[kvm_cpuid_entry2] {
        &self.supported_cpuid
    }

    /// EAX of leaf 0x40000001: the KVM PV features this host offers.
    pub fn pv_feature_bits(&self) -> u32 {
        self.supported_cpuid.iter().find(|e| e.function == KVM_CPUID_FEATURES).map_or(0, |e| e.eax)
    }

    /// The named PV features offered (see [`PV_FEATURES`]).
    pub fn pv_features(&self) -> Vec<(&'static str, bool)> {
        let bits = self.pv_feature_bits();
        PV_FEATURES.iter().map(|&(n, b)| (n, bits & (1 << b) != 0)).collect()
    }
}

/// Total host RAM in bytes (`sysconf`).
pub fn host_ram_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    (pages.max(0) as u64) * (page.max(0) as u64)
}
