//! `struct kvm_steal_time` ([K4]) and the guest's version
//! protocol for reading it while the host may be writing.
//!
//! Layout (64 bytes, 64-byte aligned): `steal` u64 @0 (ns), `version` u32 @8,
//! `flags` u32 @12, `preempted` u8 @16, `u8_pad[0]` @17 (the proposed, unmerged
//! `is_idle` of [S3]), padding to 64.

use std::sync::atomic::{fence, Ordering};

/// `MSR_KVM_STEAL_TIME`.
pub const MSR_KVM_STEAL_TIME: u32 = 0x4b56_4d03;
/// Bit 0 of the MSR value: `KVM_MSR_ENABLED`.
pub const KVM_MSR_ENABLED: u64 = 1;
/// Size and alignment of the area.
pub const STEAL_TIME_SIZE: u64 = 64;
/// `KVM_VCPU_PREEMPTED`.
pub const KVM_VCPU_PREEMPTED: u8 = 1 << 0;
/// `KVM_VCPU_FLUSH_TLB`.
pub const KVM_VCPU_FLUSH_TLB: u8 = 1 << 1;

pub const OFF_STEAL: u64 = 0;
pub const OFF_VERSION: u64 = 8;
pub const OFF_FLAGS: u64 = 12;
pub const OFF_PREEMPTED: u64 = 16;
pub const OFF_IS_IDLE: u64 = 17;

/// A consistent copy of one vCPU's steal-time area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct StealTime {
    /// Total run-queue wait of the vCPU thread published so far (ns).
    pub steal_ns: u64,
    /// Even when stable; the host adds 2 per update.
    pub version: u32,
    pub flags: u32,
    /// `KVM_VCPU_PREEMPTED` / `KVM_VCPU_FLUSH_TLB` bits.
    pub preempted: u8,
    /// The `is_idle` byte of the 2021 `pcpu_is_idle` proposal (0 on upstream hosts).
    pub is_idle: u8,
    _pad: [u8; 6],
}

impl StealTime {
    pub fn new(steal_ns: u64, version: u32, flags: u32, preempted: u8, is_idle: u8) -> Self {
        Self { steal_ns, version, flags, preempted, is_idle, _pad: [0; 6] }
    }
}

/// Something the steal-time fields can be loaded from, one field at a time,
/// with the loads ordered as written (guest RAM, or a fake in tests).
pub trait StealSource {
    fn load_u64(&self, off: u64) -> u64;
    fn load_u32(&self, off: u64) -> u32;
    fn load_u8(&self, off: u64) -> u8;
}

/// Why a snapshot could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionStuck {
    pub version: u32,
}

/// Maximum number of attempts before giving up: the host finishes an update in
/// well under a microsecond, so thousands of odd reads mean the area is not being
/// written by KVM (e.g. the guest scribbled an odd version and the vCPU is stopped).
pub const MAX_ATTEMPTS: u32 = 10_000;

/// Reads a consistent snapshot the way the guest's `kvm_steal_clock` does:
/// version, fields, version again; retry while the version is odd or changed.
pub fn read_consistent<S: StealSource + ?Sized>(src: &S) -> Result<StealTime, VersionStuck> {
    let mut last = 0;
    for _ in 0..MAX_ATTEMPTS {
        let v1 = src.load_u32(OFF_VERSION);
        fence(Ordering::Acquire);
        if v1 & 1 == 1 {
            last = v1;
            std::hint::spin_loop();
            continue;
        }
        let steal = src.load_u64(OFF_STEAL);
        let flags = src.load_u32(OFF_FLAGS);
        let preempted = src.load_u8(OFF_PREEMPTED);
        let is_idle = src.load_u8(OFF_IS_IDLE);
        fence(Ordering::Acquire);
        let v2 = src.load_u32(OFF_VERSION);
        if v1 == v2 {
            return Ok(StealTime::new(steal, v1, flags, preempted, is_idle));
        }
        last = v2;
    }
    Err(VersionStuck { version: last })
}

/// A steal-time area at a raw host address (inside a live guest RAM mapping).
pub struct RawSteal(pub *const u8);

impl StealSource for RawSteal {
    fn load_u64(&self, off: u64) -> u64 {
        // SAFETY: `RawSteal` is only built from `GuestMemory::checked_ptr(gpa, 64)`, so
        // every offset below 64 is inside the mapping; the area is 64-byte aligned, so
        // the u64/u32 fields are naturally aligned for a volatile load.
        unsafe { std::ptr::read_volatile(self.0.add(off as usize).cast::<u64>()) }
    }
    fn load_u32(&self, off: u64) -> u32 {
        // SAFETY: as in `load_u64`.
        unsafe { std::ptr::read_volatile(self.0.add(off as usize).cast::<u32>()) }
    }
    fn load_u8(&self, off: u64) -> u8 {
        // SAFETY: as in `load_u64`.
        unsafe { std::ptr::read_volatile(self.0.add(off as usize)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A fake area whose writer "is in the middle of an update" for the first
    /// `odd_reads` version loads, then publishes new values.
    struct Racing {
        odd_reads: Cell<u32>,
        changed_once: Cell<bool>,
    }
    impl StealSource for Racing {
        fn load_u64(&self, _: u64) -> u64 {
            if self.changed_once.get() {
                2_000
            } else {
                1_000
            }
        }
        fn load_u32(&self, off: u64) -> u32 {
            match off {
                OFF_VERSION => {
                    if self.odd_reads.get() > 0 {
                        self.odd_reads.set(self.odd_reads.get() - 1);
                        return 5; // odd: update in progress
                    }
                    if !self.changed_once.get() {
                        // first even read sees 6, the re-read sees 8: changed under us
                        self.changed_once.set(true);
                        return 6;
                    }
                    8
                }
                _ => 0,
            }
        }
        fn load_u8(&self, off: u64) -> u8 {
            u8::from(off == OFF_PREEMPTED)
        }
    }

    #[test]
    fn retries_while_odd_or_changed() {
        let r = Racing { odd_reads: Cell::new(3), changed_once: Cell::new(false) };
        let s = read_consistent(&r).unwrap();
        assert_eq!(s.version, 8);
        assert_eq!(s.steal_ns, 2_000);
        assert_eq!(s.preempted, 1);
    }

    struct AlwaysOdd;
    impl StealSource for AlwaysOdd {
        fn load_u64(&self, _: u64) -> u64 {
            0
        }
        fn load_u32(&self, _: u64) -> u32 {
            3
        }
        fn load_u8(&self, _: u64) -> u8 {
            0
        }
    }

    #[test]
    fn gives_up_on_a_stuck_odd_version() {
        assert_eq!(read_consistent(&AlwaysOdd), Err(VersionStuck { version: 3 }));
    }

    #[test]
    fn layout_is_the_abi() {
        assert_eq!(std::mem::size_of::<StealTime>(), 24);
    }
}
