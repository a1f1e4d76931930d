//! The guest environment: a flat 64-bit long-mode machine built in Rust, and
//! small guest programs assembled with iced-x86 (see [`program`]).
//!
//! # Guest-physical layout
//!
//! | gpa | what |
//! |---|---|
//! | `0x1000` | GDT: null, 64-bit code (`0x08`), data (`0x10`), 64-bit TSS (`0x18`) |
//! | `0x1800` | TSS (0x68 bytes) |
//! | `0x2000` | IDT: 256 interrupt gates, all pointing at [`STUBS_ADDR`] stubs |
//! | `0x3000` | PML4; `0x4000` PDPT; `0x5000`-`0x8fff` four page directories |
//! | `0x9000` | [`IRQ_COUNTS_ADDR`]: 256 × u64, interrupts taken per vector (all vCPUs) |
//! | `0x10000` | [`STUBS_ADDR`]: the IDT stubs and the common handler |
//! | `0x20000` | [`CODE_ADDR`]: program code (bump-allocated per program) |
//! | `0x40000` | [`STEAL_AREA_ADDR`]: default steal-time areas, 64 bytes per vCPU id (ids < 4096) |
//! | `0x80000` | [`DATA_ADDR`]: program data and results (bump-allocated per program, 512 KiB) |
//! | `0x100000` | [`STACKS_ADDR`]: one [`STACK_SIZE`] stack per vCPU id, growing down |
//!
//! The page tables identity-map the whole first 4 GiB with 2 MiB pages, so an
//! access beyond guest RAM is an MMIO exit and the xAPIC page at `0xfee00000`
//! (above 3 GiB) is mapped uncached.

pub mod program;
pub mod spec;

use kvm_bindings::{kvm_segment, kvm_sregs};

use super::memory::Gpa;

pub const GDT_ADDR: Gpa = 0x1000;
pub const TSS_ADDR: Gpa = 0x1800;
pub const TSS_LIMIT: u32 = 0x67;
pub const IDT_ADDR: Gpa = 0x2000;
pub const IDT_ENTRIES: u64 = 256;
pub const PML4_ADDR: Gpa = 0x3000;
pub const PDPT_ADDR: Gpa = 0x4000;
pub const PD_ADDR: Gpa = 0x5000;
pub const IRQ_COUNTS_ADDR: Gpa = 0x9000;
pub const DATA_ADDR: Gpa = 0x80000;
pub const DATA_END: Gpa = 0x100000;
pub const STUBS_ADDR: Gpa = 0x10000;
pub const CODE_ADDR: Gpa = 0x20000;
pub const CODE_END: Gpa = 0x40000;
pub const STEAL_AREA_ADDR: Gpa = 0x40000;
pub const STACKS_ADDR: Gpa = 0x100000;
/// Stack per vCPU (bytes).
pub const STACK_SIZE: u64 = 0x2000;
/// Smallest guest RAM that holds the environment and one stack (bytes).
pub const MIN_GUEST_RAM: u64 = STACKS_ADDR + STACK_SIZE;

/// xAPIC MMIO base (default `IA32_APIC_BASE`).
pub const LAPIC_BASE: u64 = 0xfee0_0000;
/// xAPIC register offsets used by guest programs.
pub const LAPIC_ID: u64 = 0x20;
pub const LAPIC_EOI: u64 = 0xb0;
pub const LAPIC_SVR: u64 = 0xf0;
pub const LAPIC_ICR_LO: u64 = 0x300;
pub const LAPIC_ICR_HI: u64 = 0x310;
pub const LAPIC_LVT_TIMER: u64 = 0x320;
pub const LAPIC_TIMER_ICR: u64 = 0x380;
pub const LAPIC_TIMER_DCR: u64 = 0x3e0;

pub const CODE_SEL: u16 = 0x08;
pub const DATA_SEL: u16 = 0x10;
pub const TSS_SEL: u16 = 0x18;

/// Top of vCPU `id`'s stack.
pub fn stack_top(id: u64) -> Gpa {
    STACKS_ADDR + (id + 1) * STACK_SIZE
}

/// Default steal-time area of vCPU `id` (64-byte aligned).
pub fn default_steal_gpa(id: u64) -> Gpa {
    STEAL_AREA_ADDR + id * 64
}

/// Largest vCPU id whose default steal-time area fits below [`STACKS_ADDR`].
pub const MAX_DEFAULT_STEAL_ID: u64 = (DATA_ADDR - STEAL_AREA_ADDR) / 64 - 1;

const PTE_PRESENT: u64 = 1 << 0;
const PTE_RW: u64 = 1 << 1;
const PTE_PWT: u64 = 1 << 3;
const PTE_PCD: u64 = 1 << 4;
const PTE_PS: u64 = 1 << 7;

/// The page-table entries (gpa, value) that identity-map `[0, 4 GiB)` with
/// 2 MiB pages; the page holding the xAPIC is uncached (PCD|PWT).
pub fn page_table_entries() -> Vec<(Gpa, u64)> {
    let mut e = Vec::with_capacity(2 + 4 + 4 * 512);
    e.push((PML4_ADDR, PDPT_ADDR | PTE_PRESENT | PTE_RW));
    for gib in 0..4u64 {
        let pd = PD_ADDR + gib * 0x1000;
        e.push((PDPT_ADDR + gib * 8, pd | PTE_PRESENT | PTE_RW));
        for i in 0..512u64 {
            let addr = (gib << 30) | (i << 21);
            let mut v = addr | PTE_PRESENT | PTE_RW | PTE_PS;
            if addr == LAPIC_BASE & !((1 << 21) - 1) {
                v |= PTE_PCD | PTE_PWT;
            }
            e.push((pd + i * 8, v));
        }
    }
    e
}

/// Walks the tables built by [`page_table_entries`] (given as a lookup) the way
/// the MMU does for a 2 MiB mapping; returns the physical address or `None`.
pub fn translate(lookup: impl Fn(Gpa) -> u64, va: u64) -> Option<u64> {
    let pml4e = lookup(PML4_ADDR + ((va >> 39) & 0x1ff) * 8);
    if pml4e & PTE_PRESENT == 0 {
        return None;
    }
    let pdpte = lookup((pml4e & 0x000f_ffff_ffff_f000) + ((va >> 30) & 0x1ff) * 8);
    if pdpte & PTE_PRESENT == 0 {
        return None;
    }
    let pde = lookup((pdpte & 0x000f_ffff_ffff_f000) + ((va >> 21) & 0x1ff) * 8);
    if pde & PTE_PRESENT == 0 || pde & PTE_PS == 0 {
        return None;
    }
    Some((pde & 0x000f_ffff_ffe0_0000) | (va & 0x1f_ffff))
}

/// The GDT as (gpa, value) qwords: null, code64, data, and the 16-byte TSS descriptor.
pub fn gdt_entries() -> Vec<(Gpa, u64)> {
    let code64: u64 = 0x00af_9b00_0000_ffff; // P, DPL0, S, type 0xb, L, G
    let data: u64 = 0x00cf_9300_0000_ffff; // P, DPL0, S, type 0x3, D/B, G
    let base = TSS_ADDR;
    let limit = TSS_LIMIT as u64;
    let tss_lo = (limit & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (0x89u64 << 40) // P, type 9: available 64-bit TSS
        | (((limit >> 16) & 0xf) << 48)
        | (((base >> 24) & 0xff) << 56);
    let tss_hi = base >> 32;
    vec![(GDT_ADDR, 0), (GDT_ADDR + 8, code64), (GDT_ADDR + 16, data), (GDT_ADDR + 24, tss_lo), (GDT_ADDR + 32, tss_hi)]
}

/// Size of the GDT in bytes.
pub const GDT_SIZE: u64 = 40;

/// One 16-byte 64-bit interrupt gate (present, DPL 0, type 0xe) to `handler`.
pub fn idt_gate(handler: u64) -> (u64, u64) {
    let lo = (handler & 0xffff) | ((CODE_SEL as u64) << 16) | (0x8eu64 << 40) | (((handler >> 16) & 0xffff) << 48);
    (lo, handler >> 32)
}

fn segment(selector: u16, type_: u8, code: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: u8::from(!code),
        s: 1,
        l: u8::from(code),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Control registers of the flat long-mode environment.
pub const CR0_PE: u64 = 1 << 0;
pub const CR0_MP: u64 = 1 << 1;
pub const CR0_ET: u64 = 1 << 4;
pub const CR0_NE: u64 = 1 << 5;
pub const CR0_WP: u64 = 1 << 16;
pub const CR0_PG: u64 = 1 << 31;
pub const CR4_PAE: u64 = 1 << 5;
pub const CR4_OSFXSR: u64 = 1 << 9;
pub const CR4_OSXMMEXCPT: u64 = 1 << 10;
pub const EFER_LME: u64 = 1 << 8;
pub const EFER_LMA: u64 = 1 << 10;

/// Fills `sregs` (as read from a fresh vCPU, so `apic_base` and the interrupt
/// bitmap keep KVM's values) for 64-bit long mode with this module's tables.
pub fn long_mode_sregs(sregs: &mut kvm_sregs) {
    sregs.cs = segment(CODE_SEL, 0xb, true);
    let data = segment(DATA_SEL, 0x3, false);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = kvm_segment {
        base: TSS_ADDR,
        limit: TSS_LIMIT,
        selector: TSS_SEL,
        type_: 0xb, // busy 64-bit TSS
        present: 1,
        dpl: 0,
        db: 0,
        s: 0,
        l: 0,
        g: 0,
        avl: 0,
        unusable: 0,
        padding: 0,
    };
    sregs.ldt = kvm_segment { type_: 0x2, unusable: 1, ..kvm_segment::default() };
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = (GDT_SIZE - 1) as u16;
    sregs.idt.base = IDT_ADDR;
    sregs.idt.limit = (IDT_ENTRIES * 16 - 1) as u16;
    sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
    sregs.cr3 = PML4_ADDR;
    sregs.cr4 = CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT;
    sregs.efer = EFER_LME | EFER_LMA;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn page_tables_identity_map_ram_and_the_lapic() {
        let map: HashMap<u64, u64> = page_table_entries().into_iter().collect();
        let lookup = |gpa| *map.get(&gpa).unwrap_or(&0);
        for va in [0u64, 0x1234, 0x20_0000, 0x1_0000_0000 - 1, 0xdead_beef, LAPIC_BASE + LAPIC_EOI] {
            assert_eq!(translate(lookup, va), Some(va), "va {va:#x}");
        }
        // nothing above 4 GiB
        assert_eq!(translate(lookup, 0x1_0000_0000), None);
        // the xAPIC's 2 MiB page is uncached; RAM is not
        let lapic_pde = map[&(PD_ADDR + 3 * 0x1000 + ((LAPIC_BASE >> 21) & 0x1ff) * 8)];
        assert_eq!(lapic_pde & (PTE_PCD | PTE_PWT), PTE_PCD | PTE_PWT);
        assert_eq!(map[&PD_ADDR] & PTE_PCD, 0);
        // the tables themselves sit below the data area, inside the minimum RAM
        assert!(map.keys().all(|&g| g < IRQ_COUNTS_ADDR));
    }

    #[test]
    fn layout_regions_do_not_overlap() {
        let regions = [
            (GDT_ADDR, GDT_ADDR + GDT_SIZE),
            (TSS_ADDR, TSS_ADDR + TSS_LIMIT as u64 + 1),
            (IDT_ADDR, IDT_ADDR + IDT_ENTRIES * 16),
            (PML4_ADDR, PD_ADDR + 4 * 0x1000),
            (IRQ_COUNTS_ADDR, IRQ_COUNTS_ADDR + 256 * 8),
            (DATA_ADDR, DATA_END),
            (STUBS_ADDR, CODE_ADDR),
            (CODE_ADDR, CODE_END),
            (STEAL_AREA_ADDR, DATA_ADDR),
        ];
        for (i, a) in regions.iter().enumerate() {
            assert!(a.0 < a.1);
            for b in &regions[i + 1..] {
                assert!(a.1 <= b.0 || b.1 <= a.0, "{a:x?} overlaps {b:x?}");
            }
        }
    }

    #[test]
    fn gdt_and_gates_encode_as_the_sdm_says() {
        let g = gdt_entries();
        assert_eq!(g[1].1 >> 53 & 1, 1, "code segment has L=1");
        let tss = g[3].1;
        assert_eq!(tss & 0xffff, TSS_LIMIT as u64);
        assert_eq!((tss >> 16) & 0xff_ffff, TSS_ADDR);
        assert_eq!((tss >> 40) & 0xff, 0x89);
        let (lo, hi) = idt_gate(0x1_2345_6789);
        assert_eq!(lo & 0xffff, 0x6789);
        assert_eq!((lo >> 48) & 0xffff, 0x2345);
        assert_eq!(hi, 1);
        assert_eq!((lo >> 16) & 0xffff, CODE_SEL as u64);
    }
}
