//! What a built-in guest program is, apart from how it is assembled
//! (`program.rs`): the [`Spec`] of each program, the registry of their names,
//! keyword parameters and descriptions ([`PROGRAMS`]), and [`Spec::from_params`],
//! which builds a spec from a name and its parameters with an error that names
//! the program and the parameter. The Python binding only converts its keyword
//! arguments to [`Param`]s; Python's `vcpulab.kvm.PROGRAMS` is read from
//! [`PROGRAMS`].

use std::collections::BTreeMap;

use crate::kvm::error::{Error, Result};

/// The built-in guest programs. Each documents its result layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// `out port, value` with `size` bytes (1, 2 or 4), then halt forever.
    IoOut { port: u16, value: u32, size: u8 },
    /// `in size, port`; stores the value read at `data.value`, then ucall DONE.
    IoIn { port: u16, size: u8 },
    /// Stores `value` (`size` = 1, 2, 4 or 8 bytes) at guest-physical `addr`
    /// (outside RAM: an MMIO write exit), then halts forever.
    MmioWrite { addr: u64, value: u64, size: u8 },
    /// Loads `size` bytes from `addr` into `data.value`, then ucall DONE.
    MmioRead { addr: u64, size: u8 },
    /// `hlt` in a loop (without an irqchip every HLT exits to user space).
    Halt,
    /// Loads an empty IDT and raises #UD: a triple fault, i.e. a shutdown exit.
    TripleFault,
    /// `jmp $` forever; only a deadline or a kick gets the vCPU out.
    EndlessLoop,
    /// `iterations` × (`pause`; `data.counter[vcpu]++`), then ucall DONE.
    /// `iterations` = 0 loops forever.
    PauseLoop { iterations: u64 },
    /// `count` × `out port, eax` (eax = iteration), then ucall DONE: the IO
    /// round-trip workload of the benchmark.
    IoLoop { port: u16, count: u64 },
    /// Enables the xAPIC and interrupts, then halts until `IRQ_COUNTS[vector]`
    /// reaches `count`; counts its HLTs in `data.halts[vcpu]`; then ucall DONE.
    /// Needs an irqchip. The vector is counted by the IDT's common handler.
    WaitInterrupts { vector: u8, count: u64 },
    /// Asserts that `actual == expected` in the guest (a self-test of the ucall
    /// assertion path), then ucall DONE.
    Assert { actual: u64, expected: u64 },
    /// `rep outsb` of the `count` bytes of `data.bytes` to `port` (string IO),
    /// then halts forever.
    IoOutString { port: u16, count: u64 },
    /// Sends `count` ucall SYNC messages with the values 0, 1, …, then DONE
    /// (the host sees each value; a test of the message protocol).
    Sync { count: u64 },
    /// Raises the exception `vector` (0 = #DE by dividing by zero, 3 = #BP by
    /// `int3`, 6 = #UD by `ud2`); the IDT reports it through the ucall port.
    Exception { vector: u8 },
    /// Lock contention (see [`SpinLockLayout`](super::program::SpinLockLayout)): each vCPU repeatedly acquires
    /// one lock, runs a critical section of `hold` loop iterations that
    /// increments a shared counter non-atomically (a lost update would show),
    /// releases, then runs `think` iterations. `iterations` acquisitions per
    /// vCPU (0: until the host sets the stop flag). Waiters PAUSE.
    ///
    /// With `kind` = `Pv`, a waiter checks every `check_every` PAUSEs whether
    /// the lock holder's steal-time `preempted` byte (in the holder's *default*
    /// steal-time slot, [`super::default_steal_gpa`]) is set and, if so, halts
    /// until the unlocker kicks it with an IPI of `kick_vector` (the guest side
    /// of `vcpu_is_preempted`, [S2]); `vcpus` bounds the unlocker's scan.
    SpinLock {
        kind: LockKind,
        hold: u64,
        think: u64,
        iterations: u64,
        check_every: u64,
        kick_vector: u8,
        vcpus: u64,
        /// pv spin exits ([`PV_SPIN_PORT`](super::program::PV_SPIN_PORT)) and halt brackets ([`PV_HALT_PORT`](super::program::PV_HALT_PORT)) for vcpulab's scheduler.
        pv_exits: bool,
    },
    /// Host → vCPU MSI ping-pong, guest side: halts until `count` interrupts of
    /// `vector` arrived; before each halt increments `halts` (the host's cue),
    /// and records each halt's length in TSC cycles in `halt_cycles[i]`.
    MsiPong { vector: u8, count: u64 },
    /// vCPU ↔ vCPU IPI ping-pong: vCPU 0 spins `gap_cycles` TSC cycles, sends
    /// an IPI (vector `vector_base`+1) to vCPU 1 and halts until the reply
    /// (vector `vector_base`); `rounds` times, recording each round trip in TSC
    /// cycles in `rtt_cycles[i]`. vCPU 1 halts and replies at once.
    IpiPingPong { rounds: u64, gap_cycles: u64, vector_base: u8 },
    /// The idle guest of [S5]: the LAPIC timer fires periodically at `hz`
    /// (vector `vector`) and the vCPU halts between ticks, for `ticks` ticks
    /// (0: forever). Counts halts in `halts[vcpu]`.
    IdleTicks { hz: u64, ticks: u64, vector: u8 },
    /// The guest's wake-up placement of [S3] (see
    /// [`WakeLayout`](super::program::WakeLayout)): vCPU 0 is a waker
    /// that hands one work item at a time to a worker (vCPUs 1..`vcpus`),
    /// choosing the worker by `rule` over the workers' idle flags and their
    /// steal-time bytes, wakes it with an IPI of `vector` and halts until the
    /// worker's completion IPI. A worker polls its mailbox `poll` PAUSEs, then
    /// halts; on an item it runs `work` loop iterations. `rounds` items (0:
    /// until the host sets the stop flag). `pv_exits` brackets every halt for
    /// vcpulab's scheduler.
    WakePlacement { rule: WakeRule, work: u64, poll: u64, rounds: u64, vector: u8, vcpus: u64, pv_exits: bool },
}

/// How [`Spec::WakePlacement`]'s waker chooses the worker to wake: the guest
/// scheduler's `select_idle_sibling` test, over the workers in order from the
/// one that ran the previous item (the wakee's `prev`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeRule {
    /// `available_idle_cpu()`: an idle worker whose steal-time `preempted`
    /// byte is clear (upstream).
    AvailableIdle,
    /// First an idle worker whose `is_idle` byte is set (the host CPU it last
    /// ran on is idle: `pcpu_is_idle()`, the 2021 proposal), then
    /// `available_idle_cpu()`: the simulator's `Pv.placement = "pcpu_is_idle"`.
    PcpuIsIdle,
}

impl WakeRule {
    pub fn name(self) -> &'static str {
        match self {
            WakeRule::AvailableIdle => "available_idle",
            WakeRule::PcpuIsIdle => "pcpu_is_idle",
        }
    }
}

/// Lock kinds of [`Spec::SpinLock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// test-and-test-and-set with PAUSE (like `virt_spin_lock`).
    Tas,
    /// FIFO ticket lock: exposes lock-waiter preemption.
    Ticket,
    /// test-and-set that halts while the holder's vCPU is preempted.
    Pv,
}

impl LockKind {
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Tas => "tas",
            LockKind::Ticket => "ticket",
            LockKind::Pv => "pv",
        }
    }
}

/// One built-in guest program of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramInfo {
    /// The name `Vm.load` takes.
    pub name: &'static str,
    /// Its keyword parameters; [`Spec::from_params`] refuses any other.
    pub params: &'static [&'static str],
    /// What it does, one line (the result layout is what its build returns).
    pub doc: &'static str,
}

const fn info(name: &'static str, params: &'static [&'static str], doc: &'static str) -> ProgramInfo {
    ProgramInfo { name, params, doc }
}

/// The built-in guest programs: the one registry. [`Spec::from_params`] accepts
/// exactly these names and parameters, and Python's `vcpulab.kvm.PROGRAMS` is
/// read from it (`GUEST_PROGRAMS`).
pub const PROGRAMS: &[ProgramInfo] = &[
    info("io_out", &["port", "value", "size"], "out `value` (`size` = 1, 2 or 4 bytes) to `port`, then halt forever"),
    info("io_in", &["port", "size"], "in `size` bytes from `port`; store it in result `value`; DONE"),
    info(
        "mmio_write",
        &["addr", "value", "size"],
        "store `value` (`size` 1/2/4/8) at guest-physical `addr`; then halt forever",
    ),
    info("mmio_read", &["addr", "size"], "load `size` bytes from `addr` into result `value`; DONE"),
    info("halt", &[], "hlt in a loop"),
    info("triple_fault", &[], "load an empty IDT and raise #UD: a shutdown exit"),
    info("endless_loop", &[], "jmp $ forever"),
    info("pause_loop", &["iterations"], "`iterations` × (pause; counter[vcpu]++), then DONE (0 = forever)"),
    info("io_loop", &["port", "count"], "`count` × out `port`, then DONE (the IO round-trip benchmark)"),
    info(
        "wait_interrupts",
        &["vector", "count"],
        "sti; hlt until `count` interrupts of `vector` arrived (needs irqchip); DONE",
    ),
    info(
        "assert",
        &["actual", "expected"],
        "assert `actual` == `expected` in the guest (tests the assertion path); DONE",
    ),
    info(
        "io_out_string",
        &["port", "count"],
        "rep outsb of `count` bytes (result `bytes`, written by the host first) to `port`",
    ),
    info("sync", &["count"], "send `count` SYNC messages with values 0, 1, …; DONE"),
    info("exception", &["vector"], "raise exception `vector` (0 #DE, 3 #BP, 6 #UD); the IDT reports it"),
    info(
        "spin_lock",
        &["kind", "hold", "think", "iterations", "vcpus", "pv_exits"],
        "lock contention (see vcpulab.experiment.SpinLock)",
    ),
    info(
        "pv_spin_lock",
        &["hold", "think", "iterations", "check_every", "kick_vector", "vcpus", "pv_exits"],
        "lock contention with vcpu_is_preempted (see vcpulab.experiment.PvSpinLock)",
    ),
    info(
        "msi_pong",
        &["vector", "count"],
        "halt until `count` MSIs of `vector` arrived, timing each halt (see MsiPingPong)",
    ),
    info(
        "ipi_ping_pong",
        &["rounds", "gap_cycles", "vector_base"],
        "vCPU 0 <-> vCPU 1 IPI round trips (see IpiPingPong)",
    ),
    info(
        "idle_ticks",
        &["hz", "ticks", "vector"],
        "halt between LAPIC timer ticks at `hz` (see vcpulab.experiment.IdleTicks)",
    ),
    info(
        "wake_placement",
        &["rule", "work", "poll", "rounds", "vector", "vcpus", "pv_exits"],
        "vCPU 0 wakes a worker chosen by available_idle or pcpu_is_idle (see vcpulab.experiment.WakePlacement)",
    ),
];

/// One keyword parameter of a program, as a caller passed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param {
    /// A non-negative integer (every numeric parameter).
    Int(u64),
    /// A string (`spin_lock`'s `kind`).
    Str(String),
    /// Anything else, as the caller would write it (`repr` in Python): refused
    /// by name where a parameter needs an integer.
    Other(String),
}

impl std::fmt::Display for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Param::Int(v) => write!(f, "{v}"),
            Param::Str(s) => write!(f, "{s:?}"),
            Param::Other(s) => f.write_str(s),
        }
    }
}

/// A program's keyword parameters by name.
pub type Params = BTreeMap<String, Param>;

/// Reads one program's parameters, each error naming the program and the parameter.
struct Reader<'a> {
    prog: &'a str,
    p: &'a Params,
}

impl Reader<'_> {
    fn get(&self, name: &str) -> Result<u64> {
        match self.p.get(name) {
            Some(Param::Int(v)) => Ok(*v),
            Some(v) => Err(Error::InvalidArgument(format!(
                "{}: parameter {name} must be a non-negative integer, got {v}",
                self.prog
            ))),
            None => Err(Error::InvalidArgument(format!("{}: missing parameter {name}", self.prog))),
        }
    }

    fn or(&self, name: &str, default: u64) -> Result<u64> {
        if self.p.contains_key(name) {
            self.get(name)
        } else {
            Ok(default)
        }
    }

    fn narrow<T: TryFrom<u64>>(&self, name: &str) -> Result<T> {
        let v = self.get(name)?;
        T::try_from(v)
            .map_err(|_| Error::InvalidArgument(format!("{}: parameter {name}={v} is out of range", self.prog)))
    }

    /// [`Reader::narrow`] with a default for a parameter not given.
    fn narrow_or<T: TryFrom<u64>>(&self, name: &str, default: T) -> Result<T> {
        if self.p.contains_key(name) {
            self.narrow(name)
        } else {
            Ok(default)
        }
    }
}

impl Spec {
    /// The spec of program `name` (one of [`PROGRAMS`]) with the keyword
    /// parameters `params`. An unknown program or parameter, a missing one, a
    /// value that is not a non-negative integer or does not fit its field:
    /// `Error::InvalidArgument` naming the program and the parameter.
    pub fn from_params(name: &str, params: &Params) -> Result<Spec> {
        let Some(info) = PROGRAMS.iter().find(|i| i.name == name) else {
            let names: Vec<&str> = PROGRAMS.iter().map(|i| i.name).collect();
            return Err(Error::InvalidArgument(format!(
                "unknown guest program {name:?}; choose one of {}",
                names.join(", ")
            )));
        };
        if let Some(k) = params.keys().find(|k| !info.params.contains(&k.as_str())) {
            return Err(Error::InvalidArgument(format!("{name}: unknown parameter {k:?}; it takes {:?}", info.params)));
        }
        let r = Reader { prog: name, p: params };
        Ok(match name {
            "io_out" => Spec::IoOut { port: r.narrow("port")?, value: r.narrow("value")?, size: r.narrow("size")? },
            "io_in" => Spec::IoIn { port: r.narrow("port")?, size: r.narrow("size")? },
            "mmio_write" => Spec::MmioWrite { addr: r.get("addr")?, value: r.get("value")?, size: r.narrow("size")? },
            "mmio_read" => Spec::MmioRead { addr: r.get("addr")?, size: r.narrow("size")? },
            "halt" => Spec::Halt,
            "triple_fault" => Spec::TripleFault,
            "endless_loop" => Spec::EndlessLoop,
            "pause_loop" => Spec::PauseLoop { iterations: r.get("iterations")? },
            "io_loop" => Spec::IoLoop { port: r.narrow("port")?, count: r.get("count")? },
            "wait_interrupts" => Spec::WaitInterrupts { vector: r.narrow("vector")?, count: r.get("count")? },
            "assert" => Spec::Assert { actual: r.get("actual")?, expected: r.get("expected")? },
            "sync" => Spec::Sync { count: r.get("count")? },
            "io_out_string" => Spec::IoOutString { port: r.narrow("port")?, count: r.get("count")? },
            "exception" => Spec::Exception { vector: r.narrow("vector")? },
            "spin_lock" | "pv_spin_lock" => {
                let kind = if name == "pv_spin_lock" {
                    LockKind::Pv
                } else {
                    match params.get("kind") {
                        None => LockKind::Tas,
                        Some(Param::Str(k)) if k == "tas" => LockKind::Tas,
                        Some(Param::Str(k)) if k == "ticket" => LockKind::Ticket,
                        Some(Param::Str(k)) => {
                            return Err(Error::InvalidArgument(format!(
                                "spin_lock: kind must be 'tas' or 'ticket', got {k:?}"
                            )))
                        }
                        Some(other) => {
                            return Err(Error::WrongType(format!(
                                "spin_lock: kind must be a str ('tas' or 'ticket'), got {other}"
                            )))
                        }
                    }
                };
                Spec::SpinLock {
                    kind,
                    hold: r.or("hold", 0)?,
                    think: r.or("think", 0)?,
                    iterations: r.or("iterations", 0)?,
                    check_every: r.or("check_every", 256)?,
                    kick_vector: r.narrow_or("kick_vector", 0xf0)?,
                    vcpus: r.get("vcpus")?,
                    pv_exits: match r.or("pv_exits", 0)? {
                        0 => false,
                        1 => true,
                        v => return Err(Error::InvalidArgument(format!("{name}: pv_exits must be 0 or 1, got {v}"))),
                    },
                }
            }
            "msi_pong" => Spec::MsiPong { vector: r.narrow("vector")?, count: r.get("count")? },
            "ipi_ping_pong" => Spec::IpiPingPong {
                rounds: r.get("rounds")?,
                gap_cycles: r.get("gap_cycles")?,
                vector_base: r.narrow("vector_base")?,
            },
            "idle_ticks" => Spec::IdleTicks { hz: r.get("hz")?, ticks: r.get("ticks")?, vector: r.narrow("vector")? },
            "wake_placement" => Spec::WakePlacement {
                rule: match params.get("rule") {
                    None => WakeRule::AvailableIdle,
                    Some(Param::Str(k)) if k == "available_idle" => WakeRule::AvailableIdle,
                    Some(Param::Str(k)) if k == "pcpu_is_idle" => WakeRule::PcpuIsIdle,
                    Some(Param::Str(k)) => {
                        return Err(Error::InvalidArgument(format!(
                            "wake_placement: rule must be 'available_idle' or 'pcpu_is_idle', got {k:?}"
                        )))
                    }
                    Some(other) => {
                        return Err(Error::WrongType(format!(
                            "wake_placement: rule must be a str ('available_idle' or 'pcpu_is_idle'), got {other}"
                        )))
                    }
                },
                work: r.or("work", 0)?,
                poll: r.or("poll", 0)?,
                rounds: r.or("rounds", 0)?,
                vector: r.narrow_or("vector", 0x70)?,
                vcpus: r.get("vcpus")?,
                pv_exits: match r.or("pv_exits", 0)? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(Error::InvalidArgument(format!("wake_placement: pv_exits must be 0 or 1, got {v}")))
                    }
                },
            },
            _ => {
                return Err(Error::InvalidArgument(format!(
                "guest program {name:?} is in PROGRAMS but Spec::from_params does not build it (src/kvm/guest/spec.rs)"
            )))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(kv: &[(&str, u64)]) -> Params {
        kv.iter().map(|&(k, v)| (k.to_string(), Param::Int(v))).collect()
    }

    #[test]
    fn every_registered_program_is_built_from_its_parameters() {
        for i in PROGRAMS {
            // every parameter at 1 (in range for all of them; kind and rule left to their defaults)
            let p =
                ints(&i.params.iter().filter(|&&n| n != "kind" && n != "rule").map(|&n| (n, 1)).collect::<Vec<_>>());
            let s = Spec::from_params(i.name, &p);
            assert!(s.is_ok(), "{}: {:?}", i.name, s);
        }
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let msg = |name: &str, p: Params| Spec::from_params(name, &p).unwrap_err().to_string();
        assert!(msg("nope", Params::new()).starts_with("unknown guest program \"nope\"; choose one of io_out,"));
        assert_eq!(msg("halt", ints(&[("x", 1)])), "halt: unknown parameter \"x\"; it takes []");
        assert_eq!(msg("io_in", ints(&[("port", 1)])), "io_in: missing parameter size");
        assert_eq!(msg("io_in", ints(&[("port", 70_000), ("size", 1)])), "io_in: parameter port=70000 is out of range");
        let mut p = ints(&[("size", 1)]);
        p.insert("port".into(), Param::Other("-1".into()));
        assert_eq!(msg("io_in", p), "io_in: parameter port must be a non-negative integer, got -1");
        let mut p = ints(&[("vcpus", 2)]);
        p.insert("kind".into(), Param::Str("mcs".into()));
        assert_eq!(msg("spin_lock", p), "spin_lock: kind must be 'tas' or 'ticket', got \"mcs\"");
        let mut p = ints(&[("vcpus", 2), ("kind", 5)]);
        p.insert("kind".into(), Param::Int(5));
        let e = Spec::from_params("spin_lock", &p).unwrap_err();
        assert!(matches!(e, Error::WrongType(_)), "{e:?}");
        assert_eq!(
            msg("spin_lock", ints(&[("vcpus", 2), ("pv_exits", 2)])),
            "spin_lock: pv_exits must be 0 or 1, got 2"
        );
        let mut p = ints(&[("vcpus", 3)]);
        p.insert("rule".into(), Param::Str("nearest".into()));
        assert_eq!(
            msg("wake_placement", p),
            "wake_placement: rule must be 'available_idle' or 'pcpu_is_idle', got \"nearest\""
        );
        assert_eq!(
            msg("wake_placement", ints(&[("vcpus", 3), ("vector", 300)])),
            "wake_placement: parameter vector=300 is out of range"
        );
        let w = Spec::from_params("wake_placement", &ints(&[("vcpus", 3)])).unwrap();
        assert_eq!(
            w,
            Spec::WakePlacement {
                rule: WakeRule::AvailableIdle,
                work: 0,
                poll: 0,
                rounds: 0,
                vector: 0x70,
                vcpus: 3,
                pv_exits: false
            }
        );
        let ok = Spec::from_params("pv_spin_lock", &ints(&[("vcpus", 2)])).unwrap();
        assert!(matches!(ok, Spec::SpinLock { kind: LockKind::Pv, check_every: 256, kick_vector: 0xf0, .. }));
    }
}
