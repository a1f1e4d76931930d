//! A KVM virtual machine: its fd, guest RAM (slot 0 at gpa 0), optional
//! in-kernel irqchip, the long-mode environment, loaded guest programs, and the
//! VM-wide knobs (halt polling, disabled exits, MSIs, stats).

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kvm_bindings::*;
use kvm_ioctls::VmFd;
use vmm_sys_util::ioctl::ioctl;

use super::error::{invalid, Error, Result};
use super::guest::program::{idt_stubs, Env, Program, Spec};
use super::guest::{self, *};
use super::memory::{Gpa, GuestMemory};
use super::stats::StatsFd;
use super::steal::{read_consistent, RawSteal, StealTime, STEAL_TIME_SIZE};
use super::system::{host_ram_bytes, Host, DISABLE_EXITS_BITS};

vmm_sys_util::ioctl_io_nr!(KVM_GET_STATS_FD, KVMIO, 0xce);

/// Largest guest RAM (MiB): RAM is one slot below the 3 GiB MMIO hole, where
/// the xAPIC lives.
pub const MAX_MEMORY_MIB: u64 = 3072;

/// Where `KVM_SET_TSS_ADDR` puts the three pages VMX needs (above RAM, below the xAPIC).
const TSS_ADDR_FOR_VMX: usize = 0xfffb_d000;
/// How many times KVM_CREATE_VM is repeated after EINTR before the error is returned.
const CREATE_VM_EINTR_TRIES: u32 = 100;

/// How to create a VM.
#[derive(Debug, Clone, Copy)]
pub struct VmOptions {
    /// Guest RAM in MiB (2..=3072 and at most the host's RAM).
    pub memory_mib: u64,
    /// Create the in-kernel irqchip (PIC, IOAPIC, LAPICs).
    pub irqchip: bool,
}

/// The VM fd together with the guest RAM its memory slot points at: whoever
/// holds the fd (a vCPU creator, an MSI sender on another thread) keeps the
/// mapping alive too. Fields drop in order: the fd (and with it the slot)
/// before the mapping.
pub struct VmHandle {
    fd: VmFd,
    _mem: Arc<GuestMemory>,
}

impl std::ops::Deref for VmHandle {
    type Target = VmFd;
    fn deref(&self) -> &VmFd {
        &self.fd
    }
}

/// The programs loaded into a VM, shared with its vCPUs (to decode ucall assertions).
pub type ProgramTable = Arc<RwLock<Vec<Program>>>;

impl Host {
    /// Creates a VM (see [`VmOptions`]). Defined here rather than in system.rs so
    /// that the modules depend one way: system <- vm <- vcpu.
    pub fn create_vm(&self, opts: VmOptions) -> Result<Vm> {
        Vm::create(self, opts)
    }
}

/// A KVM VM.
pub struct Vm {
    pub(crate) fd: Arc<VmHandle>,
    pub(crate) mem: Arc<GuestMemory>,
    pub irqchip: bool,
    pub(crate) programs: ProgramTable,
    code_next: Gpa,
    data_next: Gpa,
    vcpu_ids: BTreeSet<u64>,
    max_vcpu_id: u64,
    halt_poll_override: Option<u32>,
    disabled_exits: u64,
    stats: Option<StatsFd>,
    pub(crate) supported_cpuid: Vec<kvm_cpuid_entry2>,
    park_entry: Gpa,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("memory", &self.mem.size())
            .field("irqchip", &self.irqchip)
            .field("vcpus", &self.vcpu_ids)
            .finish()
    }
}

impl Vm {
    pub(crate) fn create(host: &Host, opts: VmOptions) -> Result<Self> {
        let mib = opts.memory_mib;
        if mib < 2 {
            invalid!("memory_mib must be at least 2 (the guest environment needs {MIN_GUEST_RAM} bytes), got {mib}");
        }
        if mib > MAX_MEMORY_MIB {
            invalid!("memory_mib must be at most {MAX_MEMORY_MIB}: guest RAM is one slot below the 3 GiB MMIO hole, got {mib}");
        }
        let host_ram = host_ram_bytes();
        if mib << 20 > host_ram {
            invalid!("memory_mib={mib} exceeds this host's RAM ({} MiB)", host_ram >> 20);
        }
        // KVM_CREATE_VM fails with EINTR when a signal is pending while it
        // registers the VM's MMU notifier (mm_take_all_locks() gives up on a
        // pending signal; seen here in a CI run); the call is meant to be
        // repeated, as QEMU's kvm_init does. Bounded, so a storm of signals
        // still ends in an error.
        let mut tries = 0;
        let fd = loop {
            match host.kvm.create_vm() {
                Err(e) if e.errno() == libc::EINTR && tries < CREATE_VM_EINTR_TRIES => tries += 1,
                r => break r.map_err(|e| Error::ioctl("KVM_CREATE_VM", e))?,
            }
        };
        let mem = Arc::new(GuestMemory::new((mib << 20) as usize)?);
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: mem.size() as u64,
            userspace_addr: mem.host_addr() as u64,
        };
        // SAFETY: the region is a live anonymous mapping of exactly `memory_size`
        // bytes; the `VmHandle` built below owns the fd together with an Arc of
        // the mapping and drops the fd first, so the mapping outlives the slot.
        // It overlaps no other slot (there is none).
        unsafe { fd.set_user_memory_region(region) }.map_err(|e| Error::ioctl("KVM_SET_USER_MEMORY_REGION", e))?;
        if opts.irqchip {
            fd.set_tss_address(TSS_ADDR_FOR_VMX).map_err(|e| Error::ioctl("KVM_SET_TSS_ADDR", e))?;
            fd.create_irq_chip().map_err(|e| Error::ioctl("KVM_CREATE_IRQCHIP", e))?;
        }
        let mut vm = Self {
            fd: Arc::new(VmHandle { fd, _mem: mem.clone() }),
            mem,
            irqchip: opts.irqchip,
            programs: Arc::new(RwLock::new(Vec::new())),
            code_next: CODE_ADDR,
            data_next: DATA_ADDR,
            vcpu_ids: BTreeSet::new(),
            max_vcpu_id: host.max_vcpu_id() as u64,
            halt_poll_override: None,
            disabled_exits: 0,
            stats: None,
            supported_cpuid: host.supported_cpuid().to_vec(),
            park_entry: 0,
        };
        vm.write_environment()?;
        vm.park_entry = vm.load(&Spec::Halt)?.entry;
        Ok(vm)
    }

    /// Writes page tables, GDT, TSS, IDT and the IDT stubs into guest RAM.
    fn write_environment(&self) -> Result<()> {
        for (gpa, v) in guest::page_table_entries().into_iter().chain(guest::gdt_entries()) {
            self.mem.write_u64(gpa, v)?;
        }
        // The stubs are the same for every VM: assemble them once per process.
        type Stubs = std::result::Result<(Vec<u8>, Vec<u64>), String>;
        static STUBS: std::sync::OnceLock<Stubs> = std::sync::OnceLock::new();
        let (stubs, addrs) = STUBS
            .get_or_init(|| idt_stubs().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::InvalidArgument(e.clone()))?;
        self.mem.write(STUBS_ADDR, stubs)?;
        for (v, addr) in addrs.iter().enumerate() {
            let (lo, hi) = guest::idt_gate(*addr);
            self.mem.write_u64(IDT_ADDR + v as u64 * 16, lo)?;
            self.mem.write_u64(IDT_ADDR + v as u64 * 16 + 8, hi)?;
        }
        Ok(())
    }

    /// Guest RAM.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// Assembles `spec` into the next free code and data space and copies it in.
    pub fn load(&mut self, spec: &Spec) -> Result<Program> {
        let data_size = spec.data_size().next_multiple_of(64);
        if self.data_next + data_size > DATA_END {
            return Err(Error::OutOfRange(format!(
                "no room for {}'s {data_size} bytes of data: the program data area [{DATA_ADDR:#x}, {DATA_END:#x}) is full",
                spec.name()
            )));
        }
        let prog = spec.build(Env { irqchip: self.irqchip }, self.code_next, self.data_next)?;
        let end = self.code_next + prog.code.len() as u64;
        if end > CODE_END {
            return Err(Error::OutOfRange(format!(
                "no room for {}'s code: the code area ends at {CODE_END:#x}",
                spec.name()
            )));
        }
        self.mem.write(prog.entry, &prog.code)?;
        self.mem.write(prog.data, &vec![0; data_size as usize])?;
        self.code_next = end.next_multiple_of(16);
        self.data_next += data_size;
        self.programs.write().unwrap_or_else(|e| e.into_inner()).push(prog.clone());
        Ok(prog)
    }

    /// Entry of the built-in halt loop that a new vCPU starts at.
    pub fn park_entry(&self) -> Gpa {
        self.park_entry
    }

    /// Checks that vCPU `id` can be created in this VM (in range, new, its stack
    /// inside guest RAM); `Vm::create_vcpu` (vcpu.rs) calls it first.
    pub(crate) fn check_new_vcpu_id(&self, id: u64) -> Result<()> {
        if id >= self.max_vcpu_id {
            return Err(Error::OutOfRange(format!(
                "vCPU id {id} is out of range: this host allows ids 0..{}",
                self.max_vcpu_id
            )));
        }
        if self.vcpu_ids.contains(&id) {
            invalid!("vCPU id {id} already exists in this VM");
        }
        if stack_top(id) > self.mem.size() as u64 {
            invalid!(
                "guest RAM ({} MiB) is too small for vCPU id {id}: its stack ends at {:#x}",
                self.mem.size() >> 20,
                stack_top(id)
            );
        }
        Ok(())
    }

    /// Records that vCPU `id` was created.
    pub(crate) fn add_vcpu_id(&mut self, id: u64) {
        self.vcpu_ids.insert(id);
    }

    /// Ids of the vCPUs created so far.
    pub fn vcpu_ids(&self) -> Vec<u64> {
        self.vcpu_ids.iter().copied().collect()
    }

    /// Sets the per-VM maximum halt-poll time (`KVM_CAP_HALT_POLL`), in ns.
    pub fn set_halt_poll_ns(&mut self, ns: u64) -> Result<()> {
        let Ok(ns32) = u32::try_from(ns) else {
            invalid!("halt_poll_ns must fit in a u32 (KVM_CAP_HALT_POLL), got {ns}");
        };
        let cap = kvm_enable_cap { cap: KVM_CAP_HALT_POLL, args: [ns, 0, 0, 0], ..Default::default() };
        self.fd.enable_cap(&cap).map_err(|e| Error::ioctl("KVM_ENABLE_CAP(KVM_CAP_HALT_POLL)", e))?;
        self.halt_poll_override = Some(ns32);
        Ok(())
    }

    /// The per-VM halt-poll maximum set through this object, if any
    /// (KVM offers no ioctl to read it back; without an override the module
    /// parameter `halt_poll_ns` applies).
    pub fn halt_poll_override(&self) -> Option<u32> {
        self.halt_poll_override
    }

    /// The `KVM_X86_DISABLE_EXITS_*` bits this VM may set (per-VM `KVM_CHECK_EXTENSION`).
    pub fn allowed_disable_exits(&self) -> u64 {
        self.fd.check_extension_raw(KVM_CAP_X86_DISABLE_EXITS as libc::c_ulong).max(0) as u64
    }

    /// Enables `KVM_CAP_X86_DISABLE_EXITS` with `bits` (before any vCPU exists).
    pub fn disable_exits(&mut self, bits: u64) -> Result<()> {
        if !self.vcpu_ids.is_empty() {
            invalid!("disable_exits must be called before any vCPU is created (KVM rejects it afterwards)");
        }
        let allowed = self.allowed_disable_exits();
        if bits & !allowed != 0 {
            let names = |m: u64| {
                DISABLE_EXITS_BITS.iter().filter(|(_, b)| m & b != 0).map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            };
            invalid!(
                "this host cannot disable exits [{}]; it allows [{}] (KVM_CHECK_EXTENSION(KVM_CAP_X86_DISABLE_EXITS) = {allowed:#x})",
                names(bits & !allowed),
                names(allowed)
            );
        }
        let cap = kvm_enable_cap { cap: KVM_CAP_X86_DISABLE_EXITS, args: [bits, 0, 0, 0], ..Default::default() };
        self.fd.enable_cap(&cap).map_err(|e| Error::ioctl("KVM_ENABLE_CAP(KVM_CAP_X86_DISABLE_EXITS)", e))?;
        self.disabled_exits |= bits;
        Ok(())
    }

    /// The exits disabled so far.
    pub fn disabled_exits(&self) -> u64 {
        self.disabled_exits
    }

    /// Sends an MSI (fixed delivery, physical destination, edge) with `vector`
    /// to the LAPIC with id `dest`.
    pub fn send_msi(&self, dest: u32, vector: u32) -> Result<()> {
        send_msi(&self.fd, self.irqchip, dest, vector)
    }

    /// The VM's binary stats (opened and parsed on first use).
    pub fn stats_fd(&mut self) -> Result<&StatsFd> {
        if self.stats.is_none() {
            self.stats = Some(open_stats_fd(&**self.fd, "KVM_GET_STATS_FD(vm)")?);
        }
        Ok(self.stats.as_ref().expect("set above"))
    }

    /// Reads steal-time areas at `gpas` (each 64 bytes inside RAM) with the
    /// version protocol; no syscalls.
    pub fn steal_times(&self, gpas: &[Gpa]) -> Result<Vec<StealTime>> {
        gpas.iter().map(|&g| read_steal(&self.mem, g)).collect()
    }
}

/// Reads one steal-time area with the version protocol.
pub fn read_steal(mem: &GuestMemory, gpa: Gpa) -> Result<StealTime> {
    let p = mem.checked_ptr(gpa, STEAL_TIME_SIZE as usize)?;
    if gpa % STEAL_TIME_SIZE != 0 {
        invalid!("steal-time gpa {gpa:#x} is not 64-byte aligned");
    }
    read_consistent(&RawSteal(p)).map_err(|s| {
        Error::UnexpectedExit(format!(
            "steal-time area at {gpa:#x} stayed mid-update (odd version {}) for {} reads",
            s.version,
            super::steal::MAX_ATTEMPTS
        ))
    })
}

/// `KVM_SIGNAL_MSI` to `dest`'s LAPIC.
pub fn send_msi(fd: &VmFd, irqchip: bool, dest: u32, vector: u32) -> Result<()> {
    if !irqchip {
        return Err(Error::Unsupported("send_msi needs a VM with an in-kernel irqchip (irqchip=True)".into()));
    }
    if !(32..=255).contains(&vector) {
        invalid!("MSI vector must be 32..=255 (0-31 are exceptions), got {vector}");
    }
    if dest > 255 {
        invalid!("MSI destination must be an xAPIC id 0..=255, got {dest}");
    }
    let msi = kvm_msi { address_lo: 0xfee0_0000 | (dest << 12), address_hi: 0, data: vector, ..Default::default() };
    let r = fd.signal_msi(msi).map_err(|e| Error::ioctl("KVM_SIGNAL_MSI", e))?;
    if r == 0 {
        // KVM returns 0 when the interrupt reached no LAPIC ("blocked").
        return Err(Error::OutOfRange(format!(
            "MSI to APIC id {dest} was not delivered: no such vCPU (or its LAPIC is disabled)"
        )));
    }
    Ok(())
}

/// `KVM_GET_STATS_FD` on any KVM fd, parsed.
pub fn open_stats_fd(fd: &impl AsRawFd, call: &'static str) -> Result<StatsFd> {
    // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or -1; `fd`
    // is a live VM or vCPU fd.
    let r = unsafe { ioctl(fd, KVM_GET_STATS_FD()) };
    if r < 0 {
        return Err(Error::last_os(call));
    }
    // SAFETY: `r` is a fresh fd returned by the kernel, owned by nobody else.
    StatsFd::new(unsafe { File::from_raw_fd(r) })
}

/// Precise waiting: sleeps while far from `due`, spins for the last 200 µs.
/// [`wait_until`], but sleeping at most 20 ms at a time and asking `stop()`
/// after each sleep: returns false (early) when it says stop, so a long gap
/// never outlives a Ctrl-C, a `close()` or a deadline.
pub fn wait_until_or(due: Instant, stop: &dyn Fn() -> bool) -> bool {
    loop {
        let now = Instant::now();
        if now >= due {
            return true;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep((left - Duration::from_micros(100)).min(Duration::from_millis(20)));
            if stop() {
                return false;
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

pub fn wait_until(due: Instant) {
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Host side of an MSI ping-pong with a guest that counts its halts at
/// `counter_gpa` (a u64 it increments just before each `sti; hlt`, as the
/// `wait_interrupts` program does). `halts_before` is that counter's value when
/// the vCPU started the program (0 for a freshly loaded one): rounds count from
/// it, not from a read here, so the vCPU may already have announced its first
/// halt when this starts (a read here would then wait for a second one that
/// never comes).
///
/// For each of `count` rounds: wait until the guest has announced halt number
/// `i + 1`, wait `gap` more (the guest is halted: polling or blocked), send the
/// MSI, and time until the guest announces its next halt. Returns the per-round
/// MSI-to-next-halt times in ns (the host-observed round trip; `count - 1`
/// values, as the last MSI ends the guest's loop). Stops with
/// `Timeout` at `deadline`; `stop()` is polled so the caller can abandon it.
#[allow(clippy::too_many_arguments)]
pub fn msi_ping(
    fd: &VmFd,
    irqchip: bool,
    mem: &GuestMemory,
    dest: u32,
    vector: u32,
    count: u64,
    gap: Duration,
    counter_gpa: Gpa,
    halts_before: u64,
    deadline: Instant,
    stop: &dyn Fn() -> bool,
) -> Result<Vec<u64>> {
    mem.check_range(counter_gpa, 8)?;
    // grows with the rounds actually timed (a huge `count` is bounded by the deadline)
    let mut rtt = Vec::with_capacity(count.min(1 << 16) as usize);
    let base = halts_before;
    let wait_for = |target: u64| -> Result<()> {
        let mut spins = 0u32;
        while mem.read_u64(counter_gpa)? < target {
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                if Instant::now() >= deadline {
                    return Err(Error::Timeout(format!(
                        "msi_ping: the guest did not reach halt #{} (counter at {counter_gpa:#x} is {}, {base} before the run) before the deadline",
                        target - base,
                        mem.read_u64(counter_gpa)?
                    )));
                }
                if stop() {
                    return Err(Error::Closed("Vm"));
                }
            }
            std::hint::spin_loop();
        }
        Ok(())
    };
    for i in 0..count {
        wait_for(base + i + 1)?;
        let due = Instant::now() + gap;
        if due > deadline {
            return Err(Error::Timeout(format!(
                "msi_ping: round {} would send its MSI after the deadline (gap {gap:?})",
                i + 1
            )));
        }
        if !wait_until_or(due, &|| Instant::now() >= deadline || stop()) {
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!("msi_ping: the deadline passed in round {}", i + 1)));
            }
            return Err(Error::Closed("Vm"));
        }
        let sent = Instant::now();
        send_msi(fd, irqchip, dest, vector)?;
        if i + 1 < count {
            // (after the last MSI the guest stops halting: nothing to time)
            wait_for(base + i + 2)?;
            rtt.push(sent.elapsed().as_nanos() as u64);
        }
    }
    Ok(rtt)
}
