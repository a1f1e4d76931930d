//! Guest programs, assembled with iced-x86's code assembler, and the guest → host
//! message protocol ("ucall", in the spirit of the KVM selftests).
//!
//! # ucall
//! The guest puts a command in `eax` and its arguments in `rdi`, `rsi`, `r8`, then
//! executes `out dx, eax` with `dx = UCALL_PORT`. The host sees an IO-out exit of
//! size 4 on that port and reads the registers:
//!
//! | command | rdi | rsi | r8 |
//! |---|---|---|---|
//! | [`UCALL_SYNC`] | value | | |
//! | [`UCALL_ASSERT`] | assertion site id | actual | expected |
//! | [`UCALL_DONE`] | | | |
//! | [`UCALL_EXCEPTION`] | vector | qword at the frame (RIP, or the error code) | next qword |
//!
//! A site id indexes [`Program::asserts`], which records where in *this* file the
//! assertion was written (`#[track_caller]`) and what it checks, so the host can
//! report `guest assertion failed at src/kvm/guest/program.rs:123 (pause_loop: …)`.

use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;

use super::*;
use crate::kvm::error::{Error, Result};

pub use super::spec::{LockKind, Spec, WakeRule};

/// IO port of the ucall protocol.
pub const UCALL_PORT: u16 = 0xe0;
/// The pv spin exit of vcpulab's vCPU scheduler (`vcpulab.sched`), the
/// software analogue of a pause-loop exit: a spin-lock waiter built with
/// `pv_exits` that failed its record's `spin_window` iterations in a row writes
/// the lock holder's vCPU id (`u32::MAX`: unknown) to this port.
pub const PV_SPIN_PORT: u16 = 0xe1;
/// The pv halt brackets of the same programs: 1 just before a halt, 0 just
/// after it (the scheduler gives the halted vCPU's CPU away and asks a token
/// for it again when it wakes).
pub const PV_HALT_PORT: u16 = 0xe2;
pub const UCALL_SYNC: u32 = 1;
pub const UCALL_ASSERT: u32 = 2;
pub const UCALL_DONE: u32 = 3;
pub const UCALL_EXCEPTION: u32 = 4;

/// Exception vectors that push an error code.
pub const VECTORS_WITH_ERROR_CODE: [u64; 10] = [8, 10, 11, 12, 13, 14, 17, 21, 29, 30];

/// Where a guest assertion was written and what it checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssertSite {
    pub location: String,
    pub message: String,
}

/// Type of one documented result field in a program's data area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    U64,
}

/// One documented field of a program's shared-memory result layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultField {
    pub name: &'static str,
    /// Guest-physical address of the first element.
    pub gpa: Gpa,
    pub ty: FieldType,
    /// Number of elements (e.g. one per vCPU).
    pub count: u64,
    /// Bytes from one element to the next (8 for a plain array).
    pub stride: u64,
    pub doc: &'static str,
}

/// An assembled program, ready to be copied into guest RAM at `entry`.
#[derive(Debug, Clone)]
pub struct Program {
    pub name: String,
    pub entry: Gpa,
    pub code: Vec<u8>,
    pub data: Gpa,
    pub data_size: u64,
    pub results: Vec<ResultField>,
    pub asserts: Vec<AssertSite>,
    /// The parameters it was built with, for provenance.
    pub params: Vec<(String, u64)>,
}

/// A code assembler plus the bookkeeping of assertion sites and results.
pub struct Asm {
    pub a: CodeAssembler,
    asserts: Vec<AssertSite>,
    program: &'static str,
}

impl Asm {
    pub fn new(program: &'static str) -> Result<Self> {
        Ok(Self { a: CodeAssembler::new(64)?, asserts: Vec::new(), program })
    }

    /// `ucall(cmd)` with the arguments already in rdi/rsi/r8. Clobbers eax, edx.
    pub fn ucall(&mut self, cmd: u32) -> Result<()> {
        self.a.mov(eax, cmd)?;
        self.a.mov(edx, UCALL_PORT as u32)?;
        self.a.out(dx, eax)?;
        Ok(())
    }

    /// `ucall(SYNC, reg)`.
    pub fn sync(&mut self, reg: AsmRegister64) -> Result<()> {
        self.a.mov(rdi, reg)?;
        self.ucall(UCALL_SYNC)
    }

    /// `ucall(DONE)` followed by a halt loop, so a host that resumes the guest
    /// anyway finds it parked.
    pub fn done(&mut self) -> Result<()> {
        self.ucall(UCALL_DONE)?;
        self.park()
    }

    /// `cli; hlt; jmp` back: parks the vCPU forever.
    pub fn park(&mut self) -> Result<()> {
        let mut l = self.a.create_label();
        self.a.set_label(&mut l)?;
        self.a.cli()?;
        self.a.hlt()?;
        self.a.jmp(l)?;
        Ok(())
    }

    /// Asserts in the guest that `reg == expected`; on failure the guest sends
    /// `ucall(ASSERT, site, reg, expected)` and parks. Always clobbers r8 (it
    /// holds `expected`); rdi, rsi, eax, edx only on the failure path.
    #[track_caller]
    pub fn assert_eq(&mut self, reg: AsmRegister64, expected: u64, message: &str) -> Result<()> {
        self.assert_cmp(reg, expected, message, |a, ok| a.je(ok))
    }

    /// Asserts in the guest that `reg < limit` (unsigned), like [`Asm::assert_eq`].
    #[track_caller]
    pub fn assert_below(&mut self, reg: AsmRegister64, limit: u64, message: &str) -> Result<()> {
        self.assert_cmp(reg, limit, message, |a, ok| a.jb(ok))
    }

    /// A u64 result slot per vCPU id at `data`: declares the field, checks
    /// that this vCPU's id (rdi) has a slot, and points rbx at it.
    pub fn per_vcpu_slot(
        &mut self,
        data: Gpa,
        name: &'static str,
        doc: &'static str,
        results: &mut Vec<ResultField>,
    ) -> Result<()> {
        results.push(ResultField { name, gpa: data, ty: FieldType::U64, count: MAX_PER_VCPU_RESULTS, stride: 8, doc });
        self.assert_below(rdi, MAX_PER_VCPU_RESULTS, "vCPU id below the per-vCPU result slots")?;
        self.a.mov(rbx, data)?;
        self.a.lea(rbx, qword_ptr(rbx + rdi * 8))?;
        Ok(())
    }

    /// `cmp reg, value` then `pass(ok)` jumps over the failure report.
    #[track_caller]
    fn assert_cmp(
        &mut self,
        reg: AsmRegister64,
        value: u64,
        message: &str,
        pass: impl FnOnce(&mut CodeAssembler, CodeLabel) -> std::result::Result<(), IcedError>,
    ) -> Result<()> {
        let loc = std::panic::Location::caller();
        let id = self.asserts.len() as u64;
        self.asserts.push(AssertSite {
            location: format!("{}:{}", loc.file(), loc.line()),
            message: format!("{}: {message}", self.program),
        });
        let mut ok = self.a.create_label();
        self.a.mov(r8, value)?;
        self.a.cmp(reg, r8)?;
        pass(&mut self.a, ok)?;
        self.a.mov(rsi, reg)?;
        self.a.mov(rdi, id)?;
        self.ucall(UCALL_ASSERT)?;
        self.park()?;
        self.a.set_label(&mut ok)?;
        Ok(())
    }

    /// Software-enables the xAPIC: SVR = 0x1ff (enable bit, spurious vector 0xff).
    pub fn enable_lapic(&mut self) -> Result<()> {
        self.a.mov(rcx, LAPIC_BASE + LAPIC_SVR)?;
        self.a.mov(dword_ptr(rcx), 0x1ffu32)?;
        Ok(())
    }

    /// Assembles at `entry`.
    pub fn finish(mut self, entry: Gpa) -> Result<(Vec<u8>, Vec<AssertSite>)> {
        let code = self.a.assemble(entry)?;
        Ok((code, self.asserts))
    }
}

/// Assembles the 256 IDT stubs and the common handler at [`STUBS_ADDR`].
///
/// Interrupts (vector ≥ 32) increment `IRQ_COUNTS[vector]` atomically, signal
/// EOI to the xAPIC and return. Exceptions (vector < 32) report
/// `ucall(EXCEPTION, vector, frame[0], frame[1])` and park the vCPU.
/// Returns the code and the address of each vector's stub.
pub fn idt_stubs() -> Result<(Vec<u8>, Vec<u64>)> {
    let mut a = CodeAssembler::new(64)?;
    let mut common = a.create_label();
    let mut labels = Vec::with_capacity(256);
    for v in 0..256i32 {
        let mut l = a.create_label();
        a.set_label(&mut l)?;
        a.push(v)?;
        a.jmp(common)?;
        labels.push(l);
    }
    let mut exception = a.create_label();
    a.set_label(&mut common)?;
    a.push(rax)?;
    a.push(rcx)?;
    a.push(rdx)?;
    a.mov(rax, qword_ptr(rsp + 24))?; // the vector pushed by the stub
    a.cmp(rax, 32)?;
    a.jb(exception)?;
    a.mov(rcx, IRQ_COUNTS_ADDR)?;
    a.lock().inc(qword_ptr(rcx + rax * 8))?;
    a.mov(rcx, LAPIC_BASE + LAPIC_EOI)?;
    a.mov(dword_ptr(rcx), 0u32)?;
    a.pop(rdx)?;
    a.pop(rcx)?;
    a.pop(rax)?;
    a.add(rsp, 8)?;
    a.iretq()?;
    a.set_label(&mut exception)?;
    a.mov(rdi, rax)?;
    a.mov(rsi, qword_ptr(rsp + 32))?;
    a.mov(r8, qword_ptr(rsp + 40))?;
    a.mov(eax, UCALL_EXCEPTION)?;
    a.mov(edx, UCALL_PORT as u32)?;
    a.out(dx, eax)?;
    let mut park = a.create_label();
    a.set_label(&mut park)?;
    a.cli()?;
    a.hlt()?;
    a.jmp(park)?;
    let res = a.assemble_options(STUBS_ADDR, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let addrs = labels.iter().map(|l| res.label_ip(l)).collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((res.inner.code_buffer, addrs))
}

/// What a program may assume about the VM it runs in.
#[derive(Debug, Clone, Copy)]
pub struct Env {
    /// An in-kernel irqchip exists (xAPIC usable; HLT blocks in the kernel).
    pub irqchip: bool,
}

/// Shared-memory layout of [`Spec::SpinLock`] (offsets from the program's data).
pub struct SpinLockLayout;

impl SpinLockLayout {
    /// The lock word: TAS 0/1; ticket: `next` u32 @0, `serving` u32 @4.
    pub const LOCK: u64 = 0;
    /// vCPU id of the current holder (written after acquiring).
    pub const HOLDER: u64 = 8;
    /// The shared counter, incremented non-atomically inside the critical section.
    pub const COUNTER: u64 = 16;
    /// The host writes 1 here to make every vCPU finish (then DONE).
    pub const STOP: u64 = 24;
    /// Per-vCPU records of 64 bytes start here.
    pub const RECORDS: u64 = 64;
    pub const RECORD_SIZE: u64 = 64;
    /// Record fields.
    pub const ACQUISITIONS: u64 = 0;
    pub const PAUSES: u64 = 8;
    pub const MAX_WAIT: u64 = 16;
    pub const TOTAL_WAIT: u64 = 24;
    pub const HALTS: u64 = 32;
    pub const KICKS: u64 = 40;
    pub const WAITING: u64 = 48;
    /// With `pv_exits`: the failed spin iterations after which a waiter makes
    /// a pv spin exit (0: never); the host's scheduler writes it (its PLE window).
    pub const SPIN_WINDOW: u64 = 56;
    /// Most vCPUs a spin-lock program has records for.
    pub const MAX_VCPUS: u64 = 64;
    /// Ticket lock with `pv_exits`: a ring of `MAX_VCPUS` u32, the owner of
    /// ticket t at `t % MAX_VCPUS`, stored as vCPU id + 1 (0: not yet known)
    /// right after the ticket is taken. A waiter's pv spin exit names the
    /// owner of the ticket being served: the holder, or, when the lock is free
    /// and its next owner has not run since, that next owner; the vCPU the
    /// waiter waits for either way. (At most `vcpus` tickets are outstanding,
    /// so a slot is not reused while its ticket waits; an owner preempted
    /// between taking its ticket and storing its id is named as unknown or,
    /// after 64 tickets, as a stale id.)
    pub const TICKET_OWNERS: u64 = Self::RECORDS + Self::MAX_VCPUS * Self::RECORD_SIZE;
}

/// Shared-memory layout of [`Spec::WakePlacement`] (offsets from the program's data).
pub struct WakeLayout;

impl WakeLayout {
    /// The host writes 1 here to end the run (the waker then stops every worker).
    pub const STOP: u64 = 0;
    /// Items completed (written by the waker after each completion).
    pub const ROUNDS_DONE: u64 = 8;
    /// The worker that ran the previous item (the waker's scan starts there).
    pub const PREV: u64 = 16;
    /// Completions signalled by the workers (locked increment).
    pub const COMPLETIONS: u64 = 24;
    /// Per-vCPU records of 64 bytes start here (vCPU 0's is unused).
    pub const RECORDS: u64 = 64;
    pub const RECORD_SIZE: u64 = 64;
    /// Record fields: 1 while the worker is idle with an empty mailbox (the
    /// guest's `idle_cpu()`); the waker clears it when it chooses the worker.
    pub const IDLE: u64 = 0;
    /// 1 while an item waits for the worker.
    pub const MAILBOX: u64 = 8;
    /// The waker's TSC when it woke the worker for the current item.
    pub const WAKE_TSC: u64 = 16;
    pub const ITEMS: u64 = 24;
    pub const HALTS: u64 = 32;
    /// Items found while polling, before a halt.
    pub const POLL_HITS: u64 = 40;
    /// Most vCPUs (the waker and its workers).
    pub const MAX_VCPUS: u64 = 64;
    /// PAUSE iterations (`pause; dec; jnz`: 3 emulated instructions, 2-5 µs
    /// on this host) the waker waits after every worker is idle and before its
    /// first scan, so that the workers' halt brackets have reached vcpulab's
    /// scheduler: ~0.3-0.6 ms, ten times and more a bracket's exit (8-17 µs
    /// here, `uexit_ns`), once per run.
    pub const START_SETTLE_PAUSES: u64 = 128;
    /// Items logged one by one (later items are only counted).
    pub const LOG_ITEMS: u64 = 4096;
    /// The per-item log: five arrays of `LOG_ITEMS` u64.
    pub const LOG: u64 = Self::RECORDS + Self::MAX_VCPUS * Self::RECORD_SIZE;
    pub const LOG_TARGET: u64 = Self::LOG;
    pub const LOG_PASS: u64 = Self::LOG + 8 * Self::LOG_ITEMS;
    pub const LOG_BYTES: u64 = Self::LOG + 16 * Self::LOG_ITEMS;
    pub const LOG_WAKE: u64 = Self::LOG + 24 * Self::LOG_ITEMS;
    pub const LOG_ROUND: u64 = Self::LOG + 32 * Self::LOG_ITEMS;
    pub const SIZE: u64 = Self::LOG + 40 * Self::LOG_ITEMS;
}

/// Most rounds a ping-pong program records.
pub const MAX_ROUNDS: u64 = 16_384;

/// Highest vCPU id a per-vCPU result array is sized for.
pub const MAX_PER_VCPU_RESULTS: u64 = 256;

impl Spec {
    pub fn name(&self) -> &'static str {
        match self {
            Spec::IoOut { .. } => "io_out",
            Spec::IoIn { .. } => "io_in",
            Spec::MmioWrite { .. } => "mmio_write",
            Spec::MmioRead { .. } => "mmio_read",
            Spec::Halt => "halt",
            Spec::TripleFault => "triple_fault",
            Spec::EndlessLoop => "endless_loop",
            Spec::PauseLoop { .. } => "pause_loop",
            Spec::IoLoop { .. } => "io_loop",
            Spec::WaitInterrupts { .. } => "wait_interrupts",
            Spec::Assert { .. } => "assert",
            Spec::Sync { .. } => "sync",
            Spec::IoOutString { .. } => "io_out_string",
            Spec::Exception { .. } => "exception",
            Spec::SpinLock { kind: LockKind::Pv, .. } => "pv_spin_lock",
            Spec::SpinLock { .. } => "spin_lock",
            Spec::MsiPong { .. } => "msi_pong",
            Spec::IpiPingPong { .. } => "ipi_ping_pong",
            Spec::IdleTicks { .. } => "idle_ticks",
            Spec::WakePlacement { .. } => "wake_placement",
        }
    }

    /// Bytes of data area the program needs.
    pub fn data_size(&self) -> u64 {
        match self {
            Spec::PauseLoop { .. } | Spec::WaitInterrupts { .. } => 8 * MAX_PER_VCPU_RESULTS,
            Spec::IoIn { .. } | Spec::MmioRead { .. } => 8,
            Spec::TripleFault => 16,
            Spec::IoOutString { count, .. } => *count,
            Spec::SpinLock { .. } => SpinLockLayout::TICKET_OWNERS + SpinLockLayout::MAX_VCPUS * 4,
            // saturating: a count past MAX_ROUNDS is refused by `build`, never wrapped into a small size
            Spec::MsiPong { count, .. } => count.saturating_mul(8).saturating_add(64),
            Spec::IpiPingPong { rounds, .. } => rounds.saturating_mul(8).saturating_add(64),
            Spec::IdleTicks { .. } => 8 * MAX_PER_VCPU_RESULTS,
            Spec::WakePlacement { .. } => WakeLayout::SIZE,
            _ => 0,
        }
    }

    /// Assembles the program at `entry` with its data at `data`.
    pub fn build(&self, env: Env, entry: Gpa, data: Gpa) -> Result<Program> {
        let name = self.name();
        let mut m = Asm::new(name)?;
        let mut results = Vec::new();
        let mut params: Vec<(String, u64)> = Vec::new();
        let check_size = |size: u8, allowed: &[u8]| -> Result<()> {
            if allowed.contains(&size) {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!("{name}: size must be one of {allowed:?} bytes, got {size}")))
            }
        };
        let a = &mut m.a;
        match *self {
            Spec::IoOut { port, value, size } => {
                check_size(size, &[1, 2, 4])?;
                params.extend([
                    ("port".into(), port as u64),
                    ("value".into(), value as u64),
                    ("size".into(), size as u64),
                ]);
                a.mov(edx, port as u32)?;
                a.mov(eax, value)?;
                match size {
                    1 => a.out(dx, al),
                    2 => a.out(dx, ax),
                    _ => a.out(dx, eax),
                }?;
                m.park()?;
            }
            Spec::IoIn { port, size } => {
                check_size(size, &[1, 2, 4])?;
                params.extend([("port".into(), port as u64), ("size".into(), size as u64)]);
                a.xor(eax, eax)?;
                a.mov(edx, port as u32)?;
                match size {
                    1 => a.in_(al, dx),
                    2 => a.in_(ax, dx),
                    _ => a.in_(eax, dx),
                }?;
                store_value(a, data, &mut results, "the value the IN instruction read")?;
                m.done()?;
            }
            Spec::MmioWrite { addr, value, size } => {
                check_size(size, &[1, 2, 4, 8])?;
                params.extend([("addr".into(), addr), ("value".into(), value), ("size".into(), size as u64)]);
                // The address goes in a register: a disp32 operand is sign-extended.
                a.mov(rcx, addr)?;
                a.mov(rax, value)?;
                match size {
                    1 => a.mov(byte_ptr(rcx), al),
                    2 => a.mov(word_ptr(rcx), ax),
                    4 => a.mov(dword_ptr(rcx), eax),
                    _ => a.mov(qword_ptr(rcx), rax),
                }?;
                m.park()?;
            }
            Spec::MmioRead { addr, size } => {
                check_size(size, &[1, 2, 4, 8])?;
                params.extend([("addr".into(), addr), ("size".into(), size as u64)]);
                a.xor(eax, eax)?;
                a.mov(rcx, addr)?;
                match size {
                    1 => a.mov(al, byte_ptr(rcx)),
                    2 => a.mov(ax, word_ptr(rcx)),
                    4 => a.mov(eax, dword_ptr(rcx)),
                    _ => a.mov(rax, qword_ptr(rcx)),
                }?;
                store_value(a, data, &mut results, "the value the load returned")?;
                m.done()?;
            }
            Spec::Halt => {
                let mut l = a.create_label();
                a.set_label(&mut l)?;
                a.hlt()?;
                a.jmp(l)?;
            }
            Spec::TripleFault => {
                // An IDT descriptor with limit 0 at `data`; any exception then
                // escalates to a double and a triple fault.
                a.mov(rcx, data)?;
                a.mov(qword_ptr(rcx), 0i32)?;
                a.mov(qword_ptr(rcx + 8), 0i32)?;
                a.lidt(ptr(rcx))?;
                a.ud2()?;
                m.park()?;
            }
            Spec::EndlessLoop => {
                let mut l = a.create_label();
                a.set_label(&mut l)?;
                a.jmp(l)?;
            }
            Spec::PauseLoop { iterations } => {
                params.push(("iterations".into(), iterations));
                m.per_vcpu_slot(data, "counter", "PAUSEs executed, per vCPU id", &mut results)?;
                let a = &mut m.a;
                a.mov(rcx, iterations)?;
                let mut top = a.create_label();
                a.set_label(&mut top)?;
                a.pause()?;
                a.inc(qword_ptr(rbx))?;
                if iterations == 0 {
                    a.jmp(top)?;
                } else {
                    a.dec(rcx)?;
                    a.jnz(top)?;
                    a.mov(rax, qword_ptr(rbx))?;
                    m.assert_eq(rax, iterations, "counter equals the iterations run")?;
                }
                m.done()?;
            }
            Spec::IoLoop { port, count } => {
                if count == 0 {
                    return Err(Error::InvalidArgument("io_loop: count must be >= 1".into()));
                }
                params.extend([("port".into(), port as u64), ("count".into(), count)]);
                a.mov(rcx, count)?;
                a.mov(edx, port as u32)?;
                let mut top = a.create_label();
                a.set_label(&mut top)?;
                a.mov(eax, ecx)?;
                a.out(dx, eax)?;
                a.dec(rcx)?;
                a.jnz(top)?;
                m.done()?;
            }
            Spec::WaitInterrupts { vector, count } => {
                if !env.irqchip {
                    return Err(Error::Unsupported(
                        "wait_interrupts needs a VM with an in-kernel irqchip (irqchip=True)".into(),
                    ));
                }
                if vector < 32 {
                    return Err(Error::InvalidArgument(format!(
                        "wait_interrupts: vector must be 32..=255, got {vector}"
                    )));
                }
                params.extend([("vector".into(), vector as u64), ("count".into(), count)]);
                m.per_vcpu_slot(data, "halts", "HLT instructions executed while waiting, per vCPU id", &mut results)?;
                m.enable_lapic()?;
                let a = &mut m.a;
                a.mov(rsi, IRQ_COUNTS_ADDR + vector as u64 * 8)?;
                halt_until_count(a, Some(count))?;
                m.done()?;
            }
            Spec::Assert { actual, expected } => {
                params.extend([("actual".into(), actual), ("expected".into(), expected)]);
                a.mov(rax, actual)?;
                m.assert_eq(rax, expected, "actual == expected")?;
                m.done()?;
            }
            Spec::IoOutString { port, count } => {
                if count == 0 || count > 4096 {
                    return Err(Error::InvalidArgument(format!("io_out_string: count must be 1..=4096, got {count}")));
                }
                params.extend([("port".into(), port as u64), ("count".into(), count)]);
                results.push(ResultField {
                    name: "bytes",
                    gpa: data,
                    ty: FieldType::U64,
                    count: count.div_ceil(8),
                    stride: 8,
                    doc: "the bytes sent (write them before running)",
                });
                a.mov(rsi, data)?;
                a.mov(rcx, count)?;
                a.mov(edx, port as u32)?;
                a.rep().outsb()?;
                m.park()?;
            }
            Spec::Sync { count } => {
                params.push(("count".into(), count));
                a.xor(ebx, ebx)?;
                let mut top = a.create_label();
                let mut out = a.create_label();
                a.set_label(&mut top)?;
                a.mov(rax, count)?;
                a.cmp(rbx, rax)?;
                a.jae(out)?;
                m.sync(rbx)?;
                let a = &mut m.a;
                a.inc(rbx)?;
                a.jmp(top)?;
                a.set_label(&mut out)?;
                m.done()?;
            }
            Spec::Exception { vector } => {
                params.push(("vector".into(), vector as u64));
                match vector {
                    0 => {
                        a.xor(eax, eax)?;
                        a.xor(edx, edx)?;
                        a.xor(ecx, ecx)?;
                        a.div(ecx)?;
                    }
                    3 => a.int3()?,
                    6 => a.ud2()?,
                    v => {
                        return Err(Error::InvalidArgument(format!(
                            "exception: vector must be 0 (#DE), 3 (#BP) or 6 (#UD), got {v}"
                        )))
                    }
                }
                m.park()?;
            }
            Spec::SpinLock { kind, hold, think, iterations, check_every, kick_vector, vcpus, pv_exits } => {
                if kind == LockKind::Pv {
                    if !env.irqchip {
                        return Err(Error::Unsupported(
                            "pv_spin_lock needs an in-kernel irqchip (its kick is an IPI)".into(),
                        ));
                    }
                    if kick_vector < 32 {
                        return Err(Error::InvalidArgument(format!(
                            "pv_spin_lock: kick_vector must be 32..=255, got {kick_vector}"
                        )));
                    }
                    if check_every == 0 {
                        return Err(Error::InvalidArgument("pv_spin_lock: check_every must be >= 1".into()));
                    }
                }
                if vcpus == 0 || vcpus > SpinLockLayout::MAX_VCPUS {
                    return Err(Error::InvalidArgument(format!(
                        "{name}: vcpus must be 1..={}, got {vcpus}",
                        SpinLockLayout::MAX_VCPUS
                    )));
                }
                params.extend([
                    ("hold".into(), hold),
                    ("think".into(), think),
                    ("iterations".into(), iterations),
                    ("vcpus".into(), vcpus),
                ]);
                if kind == LockKind::Pv {
                    params.extend([("check_every".into(), check_every), ("kick_vector".into(), kick_vector as u64)]);
                }
                params.push(("pv_exits".into(), pv_exits as u64));
                let lock = LockProgram { kind, hold, think, iterations, check_every, kick_vector, vcpus, pv_exits };
                spin_lock(&mut m, &lock, data, &mut results)?;
            }
            Spec::MsiPong { vector, count } => {
                if !env.irqchip {
                    return Err(Error::Unsupported("msi_pong needs an in-kernel irqchip (irqchip=True)".into()));
                }
                if vector < 32 || count == 0 || count > MAX_ROUNDS {
                    return Err(Error::InvalidArgument(format!(
                        "msi_pong: vector must be 32..=255 and count 1..={MAX_ROUNDS}, got {vector}, {count}"
                    )));
                }
                params.extend([("vector".into(), vector as u64), ("count".into(), count)]);
                msi_pong(&mut m, data, vector, count, &mut results)?;
            }
            Spec::IpiPingPong { rounds, gap_cycles, vector_base } => {
                if !env.irqchip {
                    return Err(Error::Unsupported("ipi_ping_pong needs an in-kernel irqchip (irqchip=True)".into()));
                }
                if !(32..=254).contains(&vector_base) || rounds == 0 || rounds > MAX_ROUNDS {
                    return Err(Error::InvalidArgument(format!(
                        "ipi_ping_pong: vector_base must be 32..=254 and rounds 1..={MAX_ROUNDS}, got {vector_base}, {rounds}"
                    )));
                }
                params.extend([
                    ("rounds".into(), rounds),
                    ("gap_cycles".into(), gap_cycles),
                    ("vector_base".into(), vector_base as u64),
                ]);
                ipi_ping_pong(&mut m, data, rounds, gap_cycles, vector_base, &mut results)?;
            }
            Spec::IdleTicks { hz, ticks, vector } => {
                if !env.irqchip {
                    return Err(Error::Unsupported("idle_ticks needs an in-kernel irqchip (its LAPIC timer)".into()));
                }
                if !(1..=100_000).contains(&hz) || vector < 32 {
                    return Err(Error::InvalidArgument(format!(
                        "idle_ticks: hz must be 1..=100000 and vector 32..=255, got {hz}, {vector}"
                    )));
                }
                params.extend([("hz".into(), hz), ("ticks".into(), ticks), ("vector".into(), vector as u64)]);
                idle_ticks(&mut m, data, hz, ticks, vector, &mut results)?;
            }
            Spec::WakePlacement { rule, work, poll, rounds, vector, vcpus, pv_exits } => {
                if !env.irqchip {
                    return Err(Error::Unsupported(
                        "wake_placement needs an in-kernel irqchip (its wake-ups are IPIs)".into(),
                    ));
                }
                if !(32..=255).contains(&vector) || !(2..=WakeLayout::MAX_VCPUS).contains(&vcpus) {
                    return Err(Error::InvalidArgument(format!(
                        "wake_placement: vector must be 32..=255 and vcpus 2..={} (a waker and a worker), got {vector}, \
                         {vcpus}",
                        WakeLayout::MAX_VCPUS
                    )));
                }
                // the rule is a name, not a number: as spin_lock's kind, it is not in the numeric
                // parameters (a Run records it with the workload's fields)
                params.extend([
                    ("work".into(), work),
                    ("poll".into(), poll),
                    ("rounds".into(), rounds),
                    ("vector".into(), vector as u64),
                    ("vcpus".into(), vcpus),
                    ("pv_exits".into(), pv_exits as u64),
                ]);
                let w = WakeProgram { rule, work, poll, rounds, vector, vcpus, pv_exits };
                wake_placement(&mut m, &w, data, &mut results)?;
            }
        }
        let (code, asserts) = m.finish(entry)?;
        Ok(Program { name: name.to_string(), entry, code, data, data_size: self.data_size(), results, asserts, params })
    }
}

/// `rax = rdtsc` (64-bit). Clobbers rdx.
fn rdtsc64(a: &mut CodeAssembler) -> Result<()> {
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    Ok(())
}

/// Halts until the u64 at `[rsi]` (an interrupt counter) reaches `target`
/// (forever if None), incrementing the u64 at `[rbx]` before each halt.
/// `cli; check; sti; hlt`: the interrupt shadow of STI makes the check and
/// the halt race-free. Clobbers rax.
fn halt_until_count(a: &mut CodeAssembler, target: Option<u64>) -> Result<()> {
    let mut top = a.create_label();
    let mut out = a.create_label();
    a.set_label(&mut top)?;
    a.cli()?;
    if let Some(t) = target {
        a.mov(rax, t)?;
        a.cmp(qword_ptr(rsi), rax)?;
        a.jae(out)?;
    }
    a.inc(qword_ptr(rbx))?;
    a.sti()?;
    a.hlt()?;
    a.jmp(top)?;
    a.set_label(&mut out)?;
    Ok(())
}

/// Halts until the interrupt counter at `[rsi]` exceeds `seen`, then records
/// the time since `r13` (TSC cycles) in round `r12`'s slot, `[rbx + 64 + 8*r12]`,
/// and increments `r12`. The layout of the ping-pong programs. Clobbers rax, rdx.
fn halt_until_above_then_record(a: &mut CodeAssembler, seen: AsmRegister64) -> Result<()> {
    let mut wait = a.create_label();
    let mut woke = a.create_label();
    a.set_label(&mut wait)?;
    a.cli()?;
    a.cmp(qword_ptr(rsi), seen)?;
    a.ja(woke)?;
    a.sti()?;
    a.hlt()?;
    a.jmp(wait)?;
    a.set_label(&mut woke)?;
    rdtsc64(a)?;
    a.sub(rax, r13)?;
    a.mov(qword_ptr(rbx + r12 * 8 + 64), rax)?;
    a.inc(r12)?;
    Ok(())
}

/// Stores rax at `data` and declares it as the result field `value`.
fn store_value(a: &mut CodeAssembler, data: Gpa, results: &mut Vec<ResultField>, doc: &'static str) -> Result<()> {
    a.mov(rcx, data)?;
    a.mov(qword_ptr(rcx), rax)?;
    results.push(ResultField { name: "value", gpa: data, ty: FieldType::U64, count: 1, stride: 8, doc });
    Ok(())
}

/// `dec reg; jnz` delay loop of `n` iterations on `reg` (nothing if `n` = 0).
fn delay(a: &mut CodeAssembler, reg: AsmRegister64, n: u64) -> Result<()> {
    delay_loop(a, reg, n, false)
}

/// `n` iterations of `pause; dec reg; jnz` (nothing when n = 0).
fn delay_pauses(a: &mut CodeAssembler, reg: AsmRegister64, n: u64) -> Result<()> {
    delay_loop(a, reg, n, true)
}

fn delay_loop(a: &mut CodeAssembler, reg: AsmRegister64, n: u64, pause: bool) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    a.mov(reg, n)?;
    let mut l = a.create_label();
    a.set_label(&mut l)?;
    if pause {
        a.pause()?;
    }
    a.dec(reg)?;
    a.jnz(l)?;
    Ok(())
}

/// Sends a fixed IPI: ICR_HI = dest << 24 (dest in `dest`), ICR_LO = vector.
/// Clobbers rax, rcx.
fn send_ipi(a: &mut CodeAssembler, dest: AsmRegister64, vector: u8) -> Result<()> {
    a.mov(rcx, LAPIC_BASE + LAPIC_ICR_HI)?;
    a.mov(rax, dest)?;
    a.shl(eax, 24)?;
    a.mov(dword_ptr(rcx), eax)?;
    a.mov(rcx, LAPIC_BASE + LAPIC_ICR_LO)?;
    a.mov(dword_ptr(rcx), (1u32 << 14) | vector as u32)?;
    Ok(())
}

/// The parameters of a spin-lock program (see [`Spec::SpinLock`]).
struct LockProgram {
    kind: LockKind,
    hold: u64,
    think: u64,
    iterations: u64,
    check_every: u64,
    kick_vector: u8,
    vcpus: u64,
    pv_exits: bool,
}

/// One failed spin iteration's pv-exit check (with `pv_exits`): `r9` counts
/// the failed iterations of this wait; once it reaches the record's
/// `spin_window` (not 0), the id of the vCPU the waiter waits for goes out on
/// [`PV_SPIN_PORT`] and the count restarts: a ticket lock's the owner of the
/// ticket being served ([`SpinLockLayout::TICKET_OWNERS`]; `u32::MAX` when not
/// yet known), a TAS lock's its last holder. Clobbers rdx, r10, r11; keeps rax.
fn spin_exit_check(a: &mut CodeAssembler, kind: LockKind) -> Result<()> {
    type L = SpinLockLayout;
    let mut cont = a.create_label();
    a.inc(r9)?;
    a.mov(r10, qword_ptr(r12 + L::SPIN_WINDOW as i32))?;
    a.test(r10, r10)?;
    a.jz(cont)?;
    a.cmp(r9, r10)?;
    a.jb(cont)?;
    a.mov(r11, rax)?;
    if kind == LockKind::Ticket {
        a.mov(r10d, dword_ptr(rbx + 4))?; // serving
        a.and(r10d, (L::MAX_VCPUS - 1) as u32)?;
        a.mov(eax, dword_ptr(rbx + r10 * 4 + L::TICKET_OWNERS as i32))?;
        a.dec(eax)?; // id + 1 → id; 0 (unknown) → u32::MAX
    } else {
        a.mov(eax, dword_ptr(rbx + SpinLockLayout::HOLDER as i32))?;
    }
    a.mov(edx, PV_SPIN_PORT as u32)?;
    a.out(dx, eax)?;
    a.mov(rax, r11)?;
    a.xor(r9d, r9d)?;
    a.set_label(&mut cont)?;
    Ok(())
}

/// `out PV_HALT_PORT, value` (a halt bracket). Clobbers rax, rdx.
fn halt_bracket(a: &mut CodeAssembler, value: u32) -> Result<()> {
    a.mov(eax, value)?;
    a.mov(edx, PV_HALT_PORT as u32)?;
    a.out(dx, eax)?;
    Ok(())
}

fn spin_lock(m: &mut Asm, p: &LockProgram, data: Gpa, results: &mut Vec<ResultField>) -> Result<()> {
    type L = SpinLockLayout;
    let LockProgram { kind, hold, think, iterations, check_every, kick_vector, vcpus, pv_exits } = *p;
    let per = |name, off, doc| ResultField {
        name,
        gpa: data + L::RECORDS + off,
        ty: FieldType::U64,
        count: L::MAX_VCPUS,
        stride: L::RECORD_SIZE,
        doc,
    };
    results.push(ResultField {
        name: "counter",
        gpa: data + L::COUNTER,
        ty: FieldType::U64,
        count: 1,
        stride: 8,
        doc: "shared counter incremented non-atomically in the critical section",
    });
    results.push(ResultField {
        name: "stop",
        gpa: data + L::STOP,
        ty: FieldType::U64,
        count: 1,
        stride: 8,
        doc: "the host sets 1 to end the run",
    });
    // Records are strided by RECORD_SIZE; each field is read with that stride.
    for (name, off, doc) in [
        ("acquisitions", L::ACQUISITIONS, "lock acquisitions"),
        ("pauses", L::PAUSES, "PAUSEs executed while waiting"),
        ("max_wait_cycles", L::MAX_WAIT, "longest wait for the lock (TSC cycles)"),
        ("total_wait_cycles", L::TOTAL_WAIT, "total wait for the lock (TSC cycles)"),
        ("halts", L::HALTS, "halts while the holder was preempted (pv)"),
        ("kicks", L::KICKS, "kick IPIs sent by the unlocker (pv)"),
        ("spin_window", L::SPIN_WINDOW, "failed spin iterations before a pv spin exit (0: never; pv_exits)"),
    ] {
        results.push(per(name, off, doc));
    }
    // Records exist for ids < MAX_VCPUS, and the pv unlocker kicks ids < vcpus.
    m.assert_below(rdi, vcpus, "vCPU id below the program's vcpus parameter")?;
    if kind == LockKind::Pv {
        m.enable_lapic()?;
    }
    let a = &mut m.a;
    // rbx = data; r12 = &record[id]; rdi = id (kept)
    a.mov(rbx, data)?;
    a.mov(r12, rdi)?;
    a.shl(r12, 6)?;
    a.lea(r12, qword_ptr(rbx + r12 + L::RECORDS as i32))?;
    if kind == LockKind::Ticket && pv_exits {
        a.lea(r15, qword_ptr(rdi + 1))?; // this vCPU's TICKET_OWNERS entry
    }
    let mut top = a.create_label();
    let mut finish = a.create_label();
    let mut got = a.create_label();
    a.set_label(&mut top)?;
    a.cmp(qword_ptr(rbx + L::STOP as i32), 0)?;
    a.jne(finish)?;
    if iterations > 0 {
        a.mov(rax, iterations)?;
        a.cmp(qword_ptr(r12 + L::ACQUISITIONS as i32), rax)?;
        a.jae(finish)?;
    }
    rdtsc64(a)?;
    a.mov(r13, rax)?; // wait start
    match kind {
        LockKind::Ticket => {
            a.mov(eax, 1u32)?;
            a.lock().xadd(dword_ptr(rbx), eax)?; // eax = my ticket
            if pv_exits {
                a.xor(r9d, r9d)?; // this wait's failed iterations
                                  // TICKET_OWNERS[ticket % MAX_VCPUS] = id + 1 (r15, set once)
                a.mov(ecx, eax)?;
                a.and(ecx, (L::MAX_VCPUS - 1) as u32)?;
                a.mov(dword_ptr(rbx + rcx * 4 + L::TICKET_OWNERS as i32), r15d)?;
            }
            let mut wait = a.create_label();
            a.set_label(&mut wait)?;
            a.cmp(dword_ptr(rbx + 4), eax)?;
            a.je(got)?;
            a.pause()?;
            a.inc(qword_ptr(r12 + L::PAUSES as i32))?;
            if pv_exits {
                spin_exit_check(a, kind)?;
            }
            a.jmp(wait)?;
        }
        LockKind::Tas | LockKind::Pv => {
            let mut attempt = a.create_label();
            let mut spin = a.create_label();
            let mut check_free = a.create_label();
            if kind == LockKind::Pv {
                a.mov(r14, check_every)?;
            }
            if pv_exits {
                a.xor(r9d, r9d)?; // this wait's failed iterations
            }
            a.set_label(&mut attempt)?;
            a.mov(eax, 1u32)?;
            a.xchg(qword_ptr(rbx), rax)?;
            a.test(rax, rax)?;
            a.jz(got)?;
            a.set_label(&mut spin)?;
            a.pause()?;
            a.inc(qword_ptr(r12 + L::PAUSES as i32))?;
            if pv_exits {
                spin_exit_check(a, kind)?;
                if kind != LockKind::Pv {
                    a.nop()?; // the check's label and check_free's need an instruction each
                }
            }
            if kind == LockKind::Pv {
                a.dec(r14)?;
                a.jnz(check_free)?;
                a.mov(r14, check_every)?;
                // holder's steal-time preempted byte
                a.mov(rax, qword_ptr(rbx + L::HOLDER as i32))?;
                a.shl(rax, 6)?;
                a.mov(rcx, STEAL_AREA_ADDR + 16)?;
                a.test(byte_ptr(rcx + rax), 1)?;
                a.jz(check_free)?;
                // holder preempted: announce, re-check the lock, halt until kicked
                let mut unwait = a.create_label();
                a.cli()?;
                a.mov(eax, 1u32)?;
                a.xchg(qword_ptr(r12 + L::WAITING as i32), rax)?; // full barrier
                a.cmp(qword_ptr(rbx), 0)?;
                a.je(unwait)?;
                a.inc(qword_ptr(r12 + L::HALTS as i32))?;
                if pv_exits {
                    halt_bracket(a, 1)?;
                }
                a.sti()?;
                a.hlt()?;
                a.cli()?;
                if pv_exits {
                    halt_bracket(a, 0)?;
                }
                a.set_label(&mut unwait)?;
                a.mov(qword_ptr(r12 + L::WAITING as i32), 0i32)?;
            }
            a.set_label(&mut check_free)?;
            a.cmp(qword_ptr(rbx), 0)?;
            a.jne(spin)?;
            a.jmp(attempt)?;
        }
    }
    a.set_label(&mut got)?;
    // wait accounting
    rdtsc64(a)?;
    a.sub(rax, r13)?;
    a.add(qword_ptr(r12 + L::TOTAL_WAIT as i32), rax)?;
    let mut no_max = a.create_label();
    a.cmp(rax, qword_ptr(r12 + L::MAX_WAIT as i32))?;
    a.jbe(no_max)?;
    a.mov(qword_ptr(r12 + L::MAX_WAIT as i32), rax)?;
    a.set_label(&mut no_max)?;
    a.mov(qword_ptr(rbx + L::HOLDER as i32), rdi)?;
    // critical section: non-atomic read-modify-write spanning the hold loop
    a.mov(rsi, qword_ptr(rbx + L::COUNTER as i32))?;
    delay(a, rcx, hold)?;
    a.inc(rsi)?;
    a.mov(qword_ptr(rbx + L::COUNTER as i32), rsi)?;
    a.inc(qword_ptr(r12 + L::ACQUISITIONS as i32))?;
    // release
    match kind {
        LockKind::Ticket => {
            a.lock().inc(dword_ptr(rbx + 4))?;
        }
        LockKind::Tas => {
            a.mov(qword_ptr(rbx), 0i32)?;
        }
        LockKind::Pv => {
            a.xor(eax, eax)?;
            a.xchg(qword_ptr(rbx), rax)?; // release + full barrier
                                          // kick every announced waiter
            let mut scan = a.create_label();
            let mut next = a.create_label();
            a.xor(r15d, r15d)?;
            a.set_label(&mut scan)?;
            a.mov(rax, r15)?;
            a.shl(rax, 6)?;
            a.cmp(qword_ptr(rbx + rax + (L::RECORDS + L::WAITING) as i32), 0)?;
            a.je(next)?;
            send_ipi(a, r15, kick_vector)?;
            a.inc(qword_ptr(r12 + L::KICKS as i32))?;
            a.set_label(&mut next)?;
            a.inc(r15)?;
            a.cmp(r15, vcpus as i32)?;
            a.jb(scan)?;
        }
    }
    delay(a, rcx, think)?;
    a.jmp(top)?;
    a.set_label(&mut finish)?;
    m.done()
}

fn msi_pong(m: &mut Asm, data: Gpa, vector: u8, count: u64, results: &mut Vec<ResultField>) -> Result<()> {
    results.push(ResultField {
        name: "halts",
        gpa: data,
        ty: FieldType::U64,
        count: 1,
        stride: 8,
        doc: "halts so far: the host's cue to send the next MSI",
    });
    results.push(ResultField {
        name: "halt_cycles",
        gpa: data + 64,
        ty: FieldType::U64,
        count,
        stride: 8,
        doc: "length of each halt (TSC cycles, guest rdtsc)",
    });
    m.enable_lapic()?;
    let a = &mut m.a;
    a.mov(rbx, data)?;
    a.mov(rsi, IRQ_COUNTS_ADDR + vector as u64 * 8)?;
    a.xor(r12d, r12d)?; // round
    let mut top = a.create_label();
    let mut out = a.create_label();
    a.set_label(&mut top)?;
    a.cli()?;
    a.cmp(r12, count as i32)?;
    a.jae(out)?;
    rdtsc64(a)?;
    a.mov(r13, rax)?;
    a.inc(qword_ptr(rbx))?; // cue: about to halt
    halt_until_above_then_record(a, r12)?;
    a.jmp(top)?;
    a.set_label(&mut out)?;
    m.done()
}

fn ipi_ping_pong(
    m: &mut Asm,
    data: Gpa,
    rounds: u64,
    gap_cycles: u64,
    vb: u8,
    results: &mut Vec<ResultField>,
) -> Result<()> {
    results.push(ResultField {
        name: "rounds_done",
        gpa: data,
        ty: FieldType::U64,
        count: 1,
        stride: 8,
        doc: "round trips completed by vCPU 0",
    });
    results.push(ResultField {
        name: "replies",
        gpa: data + 8,
        ty: FieldType::U64,
        count: 1,
        stride: 8,
        doc: "replies sent by vCPU 1",
    });
    results.push(ResultField {
        name: "rtt_cycles",
        gpa: data + 64,
        ty: FieldType::U64,
        count: rounds,
        stride: 8,
        doc: "round-trip time of each round (TSC cycles, vCPU 0's rdtsc)",
    });
    m.enable_lapic()?;
    let a = &mut m.a;
    let stop = data + 16;
    // KVM drops a fixed interrupt sent to a software-disabled local APIC, so
    // the responder says when its LAPIC is on, and the first request waits
    let ready = data + 24;
    a.mov(rbx, data)?;
    let mut responder = a.create_label();
    let mut finish = a.create_label();
    a.test(rdi, rdi)?;
    a.jnz(responder)?;
    // ---- vCPU 0: initiator
    a.mov(rcx, ready)?;
    let mut wait_ready = a.create_label();
    let mut is_ready = a.create_label();
    a.set_label(&mut wait_ready)?;
    a.cmp(qword_ptr(rcx), 0)?;
    a.jne(is_ready)?;
    a.pause()?;
    a.jmp(wait_ready)?;
    a.set_label(&mut is_ready)?;
    a.mov(rsi, IRQ_COUNTS_ADDR + vb as u64 * 8)?;
    a.xor(r12d, r12d)?;
    let mut round = a.create_label();
    let mut rounds_done = a.create_label();
    a.set_label(&mut round)?;
    a.cmp(r12, rounds as i32)?;
    a.jae(rounds_done)?;
    if gap_cycles > 0 {
        rdtsc64(a)?;
        a.mov(r13, rax)?;
        let mut gap = a.create_label();
        a.set_label(&mut gap)?;
        rdtsc64(a)?;
        a.sub(rax, r13)?;
        a.mov(rcx, gap_cycles)?;
        a.cmp(rax, rcx)?;
        a.jb(gap)?;
    }
    a.mov(r14, qword_ptr(rsi))?; // replies seen before this round
    rdtsc64(a)?;
    a.mov(r13, rax)?;
    a.mov(r15d, 1u32)?;
    send_ipi(a, r15, vb + 1)?;
    halt_until_above_then_record(a, r14)?;
    a.mov(qword_ptr(rbx), r12)?;
    a.jmp(round)?;
    a.set_label(&mut rounds_done)?;
    a.mov(rcx, stop)?;
    a.mov(qword_ptr(rcx), 1i32)?;
    a.mov(r15d, 1u32)?;
    send_ipi(a, r15, vb + 1)?; // wake the responder so it sees the stop flag
    a.jmp(finish)?;
    // ---- vCPU 1: responder
    a.set_label(&mut responder)?;
    a.mov(rcx, ready)?;
    a.mov(qword_ptr(rcx), 1i32)?;
    a.mov(rsi, IRQ_COUNTS_ADDR + (vb as u64 + 1) * 8)?;
    a.xor(r14d, r14d)?; // requests answered
    let mut loop_ = a.create_label();
    let mut reply = a.create_label();
    a.set_label(&mut loop_)?;
    a.cli()?;
    a.mov(rcx, stop)?;
    a.cmp(qword_ptr(rcx), 0)?;
    a.jne(finish)?;
    a.cmp(qword_ptr(rsi), r14)?;
    a.ja(reply)?;
    a.sti()?;
    a.hlt()?;
    a.jmp(loop_)?;
    a.set_label(&mut reply)?;
    a.inc(r14)?;
    a.xor(r15d, r15d)?;
    send_ipi(a, r15, vb)?;
    a.inc(qword_ptr(rbx + 8))?;
    a.jmp(loop_)?;
    a.set_label(&mut finish)?;
    m.done()
}

fn idle_ticks(m: &mut Asm, data: Gpa, hz: u64, ticks: u64, vector: u8, results: &mut Vec<ResultField>) -> Result<()> {
    m.per_vcpu_slot(data, "halts", "halts, per vCPU id", results)?;
    m.enable_lapic()?;
    let a = &mut m.a;
    // LAPIC timer: divide by 1, periodic, initial count = APIC bus (1 GHz in KVM) / hz
    a.mov(rcx, LAPIC_BASE + LAPIC_TIMER_DCR)?;
    a.mov(dword_ptr(rcx), 0b1011u32)?;
    a.mov(rcx, LAPIC_BASE + LAPIC_LVT_TIMER)?;
    a.mov(dword_ptr(rcx), (1u32 << 17) | vector as u32)?;
    a.mov(rcx, LAPIC_BASE + LAPIC_TIMER_ICR)?;
    a.mov(dword_ptr(rcx), (1_000_000_000 / hz) as u32)?;
    a.mov(rsi, IRQ_COUNTS_ADDR + vector as u64 * 8)?;
    halt_until_count(a, (ticks > 0).then_some(ticks))?;
    // stop the timer before reporting
    a.mov(rcx, LAPIC_BASE + LAPIC_TIMER_ICR)?;
    a.mov(dword_ptr(rcx), 0u32)?;
    m.done()
}

/// The parameters of [`Spec::WakePlacement`].
struct WakeProgram {
    rule: WakeRule,
    work: u64,
    poll: u64,
    rounds: u64,
    vector: u8,
    vcpus: u64,
    pv_exits: bool,
}

/// One pass of the waker's scan over the workers, from the previous item's
/// worker (`PREV`) onwards, wrapping from `vcpus - 1` to 1: the first worker
/// that is idle and passes `test` (`pass` 1: its `is_idle` byte is set; 2: its
/// `preempted` byte is clear; 3: none) jumps to `found` with the worker in r10
/// and `pass` in r15. Clobbers rcx, rsi, r10, r11.
fn wake_scan(a: &mut CodeAssembler, pass: u32, vcpus: u64, found: CodeLabel) -> Result<()> {
    type L = WakeLayout;
    let mut top = a.create_label();
    let mut next = a.create_label();
    let mut no_wrap = a.create_label();
    a.mov(r10, qword_ptr(rbx + L::PREV as i32))?;
    a.mov(r11, vcpus - 1)?;
    a.set_label(&mut top)?;
    a.mov(rcx, r10)?;
    a.shl(rcx, 6)?;
    a.cmp(qword_ptr(rbx + rcx + (L::RECORDS + L::IDLE) as i32), 0)?;
    a.je(next)?;
    a.mov(rsi, STEAL_AREA_ADDR)?;
    a.add(rsi, rcx)?;
    match pass {
        1 => {
            a.test(byte_ptr(rsi + 17), 1)?; // is_idle
            a.jz(next)?;
        }
        2 => {
            a.test(byte_ptr(rsi + 16), 1)?; // preempted
            a.jnz(next)?;
        }
        _ => {}
    }
    a.mov(r15d, pass)?;
    a.jmp(found)?;
    a.set_label(&mut next)?;
    a.inc(r10)?;
    a.cmp(r10, vcpus as i32)?;
    a.jb(no_wrap)?;
    a.mov(r10d, 1u32)?;
    a.set_label(&mut no_wrap)?;
    a.dec(r11)?;
    a.jnz(top)?;
    Ok(())
}

/// `cli; hlt` with the pv halt brackets when `pv_exits`, leaving interrupts
/// disabled after the halt. Clobbers rax, rdx.
fn bracketed_halt(a: &mut CodeAssembler, pv_exits: bool) -> Result<()> {
    if pv_exits {
        halt_bracket(a, 1)?;
    }
    a.sti()?;
    a.hlt()?;
    a.cli()?;
    if pv_exits {
        halt_bracket(a, 0)?;
    }
    Ok(())
}

fn wake_placement(m: &mut Asm, p: &WakeProgram, data: Gpa, results: &mut Vec<ResultField>) -> Result<()> {
    type L = WakeLayout;
    let WakeProgram { rule, work, poll, rounds, vector, vcpus, pv_exits } = *p;
    let one = |name, off, doc| ResultField { name, gpa: data + off, ty: FieldType::U64, count: 1, stride: 8, doc };
    let per = |name, off, doc| ResultField {
        name,
        gpa: data + L::RECORDS + off,
        ty: FieldType::U64,
        count: L::MAX_VCPUS,
        stride: L::RECORD_SIZE,
        doc,
    };
    let log =
        |name, off, doc| ResultField { name, gpa: data + off, ty: FieldType::U64, count: L::LOG_ITEMS, stride: 8, doc };
    results.extend([
        one("stop", L::STOP, "the host sets 1 to end the run"),
        one("rounds_done", L::ROUNDS_DONE, "items completed (the waker's count)"),
        per("items", L::ITEMS, "items a worker ran"),
        per("halts", L::HALTS, "halts of an idle worker"),
        per("poll_hits", L::POLL_HITS, "items a worker found while polling, before halting"),
        log("target", L::LOG_TARGET, "the worker chosen for item i"),
        log("pass", L::LOG_PASS, "how it was chosen: 1 is_idle set, 2 preempted clear, 3 any idle worker"),
        log(
            "target_bytes",
            L::LOG_BYTES,
            "the chosen worker's steal-time bytes at the choice: bit 0 preempted, bit 1 is_idle",
        ),
        log(
            "wake_cycles",
            L::LOG_WAKE,
            "from the waker's wake-up of the worker to the worker running the item (TSC cycles)",
        ),
        log("round_cycles", L::LOG_ROUND, "from the wake-up to the waker seeing the completion (TSC cycles)"),
    ]);
    m.assert_below(rdi, vcpus, "vCPU id below the program's vcpus parameter")?;
    m.enable_lapic()?;
    let a = &mut m.a;
    a.mov(rbx, data)?;
    let mut worker = a.create_label();
    let mut finish = a.create_label();
    a.test(rdi, rdi)?;
    a.jnz(worker)?;

    // ---- vCPU 0: the waker. It starts once every worker is idle (its LAPIC
    // on: KVM drops a fixed interrupt sent to a software-disabled one), so the
    // first choice is the rule's, not the start's order
    let mut stop_all = a.create_label();
    a.mov(r14d, 1u32)?;
    let mut started = a.create_label();
    let mut wait_start = a.create_label();
    a.set_label(&mut wait_start)?;
    a.cmp(qword_ptr(rbx + L::STOP as i32), 0)?;
    a.jne(stop_all)?; // the workers already halted must be woken to see it
    a.mov(rcx, r14)?;
    a.shl(rcx, 6)?;
    a.cmp(qword_ptr(rbx + rcx + (L::RECORDS + L::IDLE) as i32), 0)?;
    let mut not_yet = a.create_label();
    a.je(not_yet)?;
    a.inc(r14)?;
    a.cmp(r14, vcpus as i32)?;
    a.jae(started)?;
    a.jmp(wait_start)?;
    a.set_label(&mut not_yet)?;
    a.pause()?;
    a.jmp(wait_start)?;
    a.set_label(&mut started)?;
    // A worker sets its idle flag before its halt, and under vcpulab's
    // scheduler the halt bracket's exit (which frees the worker's CPU and so
    // publishes `is_idle`) comes some instructions and an exit later: the last
    // worker's flag can start the scan while its bracket is still on its way,
    // and the first choice then followed that race (measured 2026-12-07: the
    // first item of a `round_robin` `pcpu_is_idle` run went to worker 2 in 2
    // of 16 runs, read as set on worker 2 and clear on worker 1 a scan step
    // apart; every later item follows the first). The waker lets the brackets
    // land first.
    delay_pauses(a, rcx, L::START_SETTLE_PAUSES)?;
    a.mov(qword_ptr(rbx + L::PREV as i32), 1i32)?;
    a.xor(r12d, r12d)?; // completions seen
    let mut round = a.create_label();
    let mut select = a.create_label();
    let mut found = a.create_label();
    a.set_label(&mut round)?;
    a.cmp(qword_ptr(rbx + L::STOP as i32), 0)?;
    a.jne(stop_all)?;
    if rounds > 0 {
        a.mov(rax, rounds)?;
        a.cmp(qword_ptr(rbx + L::ROUNDS_DONE as i32), rax)?;
        a.jae(stop_all)?;
    }
    a.set_label(&mut select)?;
    if rule == WakeRule::PcpuIsIdle {
        wake_scan(a, 1, vcpus, found)?;
    }
    wake_scan(a, 2, vcpus, found)?;
    wake_scan(a, 3, vcpus, found)?;
    // no worker idle (none can be: one item at a time, and each worker is
    // idle again before it signals the completion): wait
    a.pause()?;
    a.cmp(qword_ptr(rbx + L::STOP as i32), 0)?;
    a.jne(stop_all)?;
    a.jmp(select)?;
    a.set_label(&mut found)?;
    a.mov(r14, r10)?; // the worker
    a.mov(rcx, r14)?;
    a.shl(rcx, 6)?;
    a.mov(qword_ptr(rbx + rcx + (L::RECORDS + L::IDLE) as i32), 0i32)?;
    // its bytes at the choice
    a.mov(rsi, STEAL_AREA_ADDR)?;
    a.add(rsi, rcx)?;
    a.movzx(r9d, byte_ptr(rsi + 16))?;
    a.and(r9d, 1)?;
    a.movzx(eax, byte_ptr(rsi + 17))?;
    a.and(eax, 1)?;
    a.shl(eax, 1)?;
    a.or(r9d, eax)?;
    let mut no_log = a.create_label();
    a.mov(rax, qword_ptr(rbx + L::ROUNDS_DONE as i32))?;
    a.cmp(rax, L::LOG_ITEMS as i32)?;
    a.jae(no_log)?;
    a.mov(qword_ptr(rbx + rax * 8 + L::LOG_TARGET as i32), r14)?;
    a.mov(qword_ptr(rbx + rax * 8 + L::LOG_PASS as i32), r15)?;
    a.mov(qword_ptr(rbx + rax * 8 + L::LOG_BYTES as i32), r9)?;
    a.set_label(&mut no_log)?;
    // wake it: the time, the item, then the IPI (stores are ordered on x86)
    rdtsc64(a)?;
    a.mov(r13, rax)?;
    a.mov(qword_ptr(rbx + rcx + (L::RECORDS + L::WAKE_TSC) as i32), r13)?;
    a.mov(qword_ptr(rbx + rcx + (L::RECORDS + L::MAILBOX) as i32), 1i32)?;
    send_ipi(a, r14, vector)?;
    // halt until the completion
    let mut wait = a.create_label();
    let mut completed = a.create_label();
    a.set_label(&mut wait)?;
    a.cli()?;
    a.cmp(qword_ptr(rbx + L::COMPLETIONS as i32), r12)?;
    a.ja(completed)?;
    bracketed_halt(a, pv_exits)?;
    a.jmp(wait)?;
    a.set_label(&mut completed)?;
    a.sti()?;
    a.inc(r12)?;
    rdtsc64(a)?;
    a.sub(rax, r13)?;
    let mut no_log2 = a.create_label();
    a.mov(rcx, qword_ptr(rbx + L::ROUNDS_DONE as i32))?;
    a.cmp(rcx, L::LOG_ITEMS as i32)?;
    a.jae(no_log2)?;
    a.mov(qword_ptr(rbx + rcx * 8 + L::LOG_ROUND as i32), rax)?;
    a.set_label(&mut no_log2)?;
    a.mov(qword_ptr(rbx + L::PREV as i32), r14)?;
    a.inc(qword_ptr(rbx + L::ROUNDS_DONE as i32))?;
    a.jmp(round)?;
    // the end: the stop flag, and every worker woken to see it
    a.set_label(&mut stop_all)?;
    a.mov(qword_ptr(rbx + L::STOP as i32), 1i32)?;
    a.mov(r14d, 1u32)?;
    let mut wake_next = a.create_label();
    a.set_label(&mut wake_next)?;
    send_ipi(a, r14, vector)?;
    a.inc(r14)?;
    a.cmp(r14, vcpus as i32)?;
    a.jb(wake_next)?;
    a.jmp(finish)?;

    // ---- vCPUs 1..: workers
    a.set_label(&mut worker)?;
    a.mov(r12, rdi)?;
    a.shl(r12, 6)?;
    a.lea(r12, qword_ptr(rbx + r12 + L::RECORDS as i32))?;
    let mut idle = a.create_label();
    let mut halt = a.create_label();
    let mut got = a.create_label();
    let mut got_polling = a.create_label();
    a.mov(qword_ptr(r12 + L::IDLE as i32), 1i32)?;
    a.set_label(&mut idle)?;
    if poll > 0 {
        let mut p = a.create_label();
        a.mov(r9, poll)?;
        a.set_label(&mut p)?;
        a.cmp(qword_ptr(r12 + L::MAILBOX as i32), 0)?;
        a.jne(got_polling)?;
        a.cmp(qword_ptr(rbx + L::STOP as i32), 0)?;
        a.jne(finish)?;
        a.pause()?;
        a.dec(r9)?;
        a.jnz(p)?;
    } else {
        a.nop()?; // `idle` and `halt` need an instruction each
    }
    a.set_label(&mut halt)?;
    a.cli()?;
    a.cmp(qword_ptr(r12 + L::MAILBOX as i32), 0)?;
    a.jne(got)?;
    a.cmp(qword_ptr(rbx + L::STOP as i32), 0)?;
    a.jne(finish)?;
    a.inc(qword_ptr(r12 + L::HALTS as i32))?;
    bracketed_halt(a, pv_exits)?;
    a.jmp(halt)?;
    a.set_label(&mut got_polling)?;
    a.inc(qword_ptr(r12 + L::POLL_HITS as i32))?;
    a.set_label(&mut got)?;
    a.sti()?;
    rdtsc64(a)?;
    a.sub(rax, qword_ptr(r12 + L::WAKE_TSC as i32))?;
    let mut no_log3 = a.create_label();
    a.mov(rcx, qword_ptr(rbx + L::ROUNDS_DONE as i32))?;
    a.cmp(rcx, L::LOG_ITEMS as i32)?;
    a.jae(no_log3)?;
    a.mov(qword_ptr(rbx + rcx * 8 + L::LOG_WAKE as i32), rax)?;
    a.set_label(&mut no_log3)?;
    a.mov(qword_ptr(r12 + L::MAILBOX as i32), 0i32)?;
    a.inc(qword_ptr(r12 + L::ITEMS as i32))?;
    delay(a, rcx, work)?;
    // idle again before the completion, so the waker's next choice sees it
    a.mov(qword_ptr(r12 + L::IDLE as i32), 1i32)?;
    a.lock().inc(qword_ptr(rbx + L::COMPLETIONS as i32))?;
    a.xor(r15d, r15d)?;
    send_ipi(a, r15, vector)?;
    a.jmp(idle)?;
    a.set_label(&mut finish)?;
    m.done()
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Formatter, NasmFormatter};

    fn disasm(code: &[u8], ip: u64) -> Vec<String> {
        let mut d = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
        let mut f = NasmFormatter::new();
        let mut out = Vec::new();
        for i in &mut d {
            let mut s = String::new();
            f.format(&i, &mut s);
            out.push(s);
        }
        out
    }

    #[test]
    fn io_out_assembles_to_out_then_park() {
        let p = Spec::IoOut { port: 0x3f8, value: 0x41, size: 1 }
            .build(Env { irqchip: false }, CODE_ADDR, DATA_ADDR)
            .unwrap();
        let text = disasm(&p.code, p.entry);
        assert!(text.iter().any(|s| s == "out dx,al"), "{text:?}");
        assert!(text.iter().any(|s| s == "hlt"));
    }

    #[test]
    fn assert_sites_name_this_file() {
        let p = Spec::Assert { actual: 1, expected: 2 }.build(Env { irqchip: false }, CODE_ADDR, DATA_ADDR).unwrap();
        assert_eq!(p.asserts.len(), 1);
        assert!(p.asserts[0].location.contains("program.rs:"), "{:?}", p.asserts[0]);
        assert!(p.asserts[0].message.starts_with("assert: "));
    }

    #[test]
    fn stubs_cover_all_vectors() {
        let (code, addrs) = idt_stubs().unwrap();
        assert_eq!(addrs.len(), 256);
        assert!(addrs.windows(2).all(|w| w[0] < w[1]));
        assert!(STUBS_ADDR + code.len() as u64 <= CODE_ADDR);
        let text = disasm(&code, STUBS_ADDR);
        assert!(text.iter().any(|s| s == "iretq"));
        assert!(text.iter().any(|s| s.starts_with("lock inc qword")));
    }

    #[test]
    fn every_program_assembles() {
        let specs = [
            Spec::IoOut { port: 1, value: 2, size: 4 },
            Spec::IoIn { port: 1, size: 1 },
            Spec::MmioWrite { addr: 0xd000_0000, value: 1, size: 8 },
            Spec::MmioRead { addr: 0xd000_0000, size: 2 },
            Spec::Halt,
            Spec::TripleFault,
            Spec::EndlessLoop,
            Spec::PauseLoop { iterations: 0 },
            Spec::PauseLoop { iterations: 10 },
            Spec::IoLoop { port: 0x80, count: 10 },
            Spec::WaitInterrupts { vector: 0x40, count: 10 },
            Spec::Assert { actual: 1, expected: 1 },
            Spec::SpinLock {
                kind: LockKind::Tas,
                hold: 10,
                think: 0,
                iterations: 5,
                check_every: 1,
                kick_vector: 0x50,
                vcpus: 4,
                pv_exits: false,
            },
            Spec::SpinLock {
                kind: LockKind::Ticket,
                hold: 0,
                think: 3,
                iterations: 0,
                check_every: 1,
                kick_vector: 0x50,
                vcpus: 4,
                pv_exits: false,
            },
            Spec::SpinLock {
                kind: LockKind::Pv,
                hold: 10,
                think: 3,
                iterations: 5,
                check_every: 64,
                kick_vector: 0x50,
                vcpus: 4,
                pv_exits: false,
            },
            Spec::MsiPong { vector: 0x40, count: 100 },
            Spec::IpiPingPong { rounds: 10, gap_cycles: 1000, vector_base: 0x60 },
            Spec::IdleTicks { hz: 250, ticks: 10, vector: 0xec },
            Spec::WakePlacement {
                rule: WakeRule::AvailableIdle,
                work: 10,
                poll: 0,
                rounds: 0,
                vector: 0x70,
                vcpus: 3,
                pv_exits: false,
            },
            Spec::WakePlacement {
                rule: WakeRule::PcpuIsIdle,
                work: 0,
                poll: 100,
                rounds: 5,
                vector: 0x70,
                vcpus: 64,
                pv_exits: true,
            },
            Spec::Sync { count: 3 },
            Spec::IoOutString { port: 0x80, count: 16 },
            Spec::Exception { vector: 0 },
            Spec::Exception { vector: 3 },
            Spec::Exception { vector: 6 },
        ];
        for s in specs {
            let p = s.build(Env { irqchip: true }, CODE_ADDR, DATA_ADDR).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert!(!p.code.is_empty());
            assert_eq!(p.name, s.name());
        }
    }

    /// The waker waits `START_SETTLE_PAUSES` PAUSEs once every worker is
    /// idle and before its first scan (the workers' halt brackets land
    /// first): a `pause; dec; jnz` loop of that count between the start's
    /// wait (the last `pause` before it) and the first read of the steal area.
    #[test]
    fn the_waker_lets_the_halt_brackets_land_before_its_first_scan() {
        for pv_exits in [false, true] {
            let p = Spec::WakePlacement {
                rule: WakeRule::PcpuIsIdle,
                work: 10,
                poll: 0,
                rounds: 0,
                vector: 0x70,
                vcpus: 3,
                pv_exits,
            }
            .build(Env { irqchip: true }, CODE_ADDR, DATA_ADDR)
            .unwrap();
            let text = disasm(&p.code, p.entry);
            let count = format!("mov rcx,{:x}h", WakeLayout::START_SETTLE_PAUSES);
            let at = text.iter().position(|s| *s == count).unwrap_or_else(|| panic!("no `{count}` in {text:?}"));
            assert_eq!(text[at + 1], "pause");
            assert!(text[at + 2].starts_with("dec rcx"), "{:?}", &text[at..at + 4]);
            assert!(text[at + 3].starts_with("jne"), "{:?}", &text[at..at + 4]);
            // the first scan's steal-area read comes after the settle
            let steal = format!("mov rsi,{STEAL_AREA_ADDR:x}h");
            let first = text.iter().position(|s| *s == steal).expect("the scan's steal-area address");
            assert!(first > at, "settle at {at}, first scan read at {first}");
        }
    }

    #[test]
    fn bad_parameters_are_errors_not_panics() {
        let env = Env { irqchip: false };
        assert!(Spec::IoOut { port: 1, value: 1, size: 3 }.build(env, CODE_ADDR, DATA_ADDR).is_err());
        assert!(Spec::WaitInterrupts { vector: 40, count: 1 }.build(env, CODE_ADDR, DATA_ADDR).is_err());
        assert!(Spec::WaitInterrupts { vector: 3, count: 1 }
            .build(Env { irqchip: true }, CODE_ADDR, DATA_ADDR)
            .is_err());
        assert!(Spec::IoLoop { port: 1, count: 0 }.build(env, CODE_ADDR, DATA_ADDR).is_err());
    }
}
