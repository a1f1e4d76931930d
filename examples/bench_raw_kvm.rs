//! The baseline for `benches/bench_kvm.py`: the same work done with plain
//! kvm-ioctls calls and nothing of vcpulab's API (no guest environment, no
//! deadline timers, no bounds checks): VM create/close, and IO-exit round trips
//! of a real-mode guest looping on `out 0x80, al`; and the same plain
//! `VcpuFd::run` loop on vcpulab's own `io_loop` guest (long mode, paging, the
//! same 4 instructions as `benches/bench_kvm.py` runs), so that the cost of
//! vcpulab's loops is measured on the same work. Every guest instruction is
//! emulated on hosts without hardware virtualisation (kvm_pvm), so the guest's
//! mode alone changes the exit rate there.
//!
//! Prints one JSON object. Run: `cargo run --release --example bench_raw_kvm -- 200 10000`.

use std::time::Instant;

use iced_x86::code_asm::*;
use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{Kvm, VcpuExit};

use _core::kvm::guest::program::Spec;
use _core::kvm::{Host, VmOptions};

const MEM: usize = 2 << 20;
const CODE: u64 = 0x1000;

struct RawVm {
    _vm: kvm_ioctls::VmFd,
    vcpu: kvm_ioctls::VcpuFd,
    mem: *mut u8,
}

impl Drop for RawVm {
    fn drop(&mut self) {
        // SAFETY: `mem` is the MEM-byte mapping made in `raw_vm`, unmapped once.
        unsafe { libc::munmap(self.mem.cast(), MEM) };
    }
}

fn raw_vm(kvm: &Kvm) -> RawVm {
    let vm = kvm.create_vm().expect("KVM_CREATE_VM");
    // SAFETY: anonymous private mapping, checked for MAP_FAILED.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            MEM,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED);
    let region = kvm_userspace_memory_region {
        slot: 0,
        flags: 0,
        guest_phys_addr: 0,
        memory_size: MEM as u64,
        userspace_addr: mem as u64,
    };
    // SAFETY: the mapping is MEM bytes and outlives the VM (dropped after it in RawVm).
    unsafe { vm.set_user_memory_region(region) }.expect("KVM_SET_USER_MEMORY_REGION");
    let vcpu = vm.create_vcpu(0).expect("KVM_CREATE_VCPU");
    RawVm { _vm: vm, vcpu, mem: mem.cast() }
}

fn io_loop_code(count: u16) -> Vec<u8> {
    let mut a = CodeAssembler::new(16).unwrap();
    let mut top = a.create_label();
    a.mov(dx, 0x80u32).unwrap();
    a.mov(cx, count as u32).unwrap();
    a.set_label(&mut top).unwrap();
    a.out(dx, al).unwrap();
    a.dec(cx).unwrap();
    a.jnz(top).unwrap();
    a.hlt().unwrap();
    a.assemble(CODE).unwrap()
}

/// IO exits per second of a plain kvm-ioctls loop on vcpulab's `io_loop` guest.
fn raw_loop_on_vcpulab_guest(exits: u64) -> f64 {
    let host = Host::open().expect("/dev/kvm");
    let mut vm = host.create_vm(VmOptions { memory_mib: 2, irqchip: false }).expect("VM");
    let prog = vm.load(&Spec::IoLoop { port: 0x80, count: exits }).expect("io_loop");
    let mut vcpu = vm.create_vcpu(0).expect("vCPU");
    vcpu.start(prog.entry).expect("start");
    let fd = vcpu.kvm_ioctls_fd();
    let t = Instant::now();
    let mut n = 0u64;
    while n < exits {
        match fd.run().expect("KVM_RUN") {
            VcpuExit::IoOut(0x80, _) => n += 1,
            e => panic!("unexpected exit {e:?}"),
        }
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("numbers")).collect();
    let (cycles, exits) = (args.first().copied().unwrap_or(200), args.get(1).copied().unwrap_or(10_000));
    let kvm = Kvm::new().expect("/dev/kvm");

    let t = Instant::now();
    for _ in 0..cycles {
        drop(raw_vm(&kvm));
    }
    let create_close_s = t.elapsed().as_secs_f64();

    let mut vm = raw_vm(&kvm);
    let code = io_loop_code(exits as u16);
    // SAFETY: CODE + code.len() lies inside the MEM-byte mapping.
    unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), vm.mem.add(CODE as usize), code.len()) };
    let mut sregs = vm.vcpu.get_sregs().unwrap();
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    vm.vcpu.set_sregs(&sregs).unwrap();
    let regs = kvm_bindings::kvm_regs { rip: CODE, rflags: 2, ..Default::default() };
    vm.vcpu.set_regs(&regs).unwrap();
    let t = Instant::now();
    let mut n = 0u64;
    loop {
        match vm.vcpu.run().expect("KVM_RUN") {
            VcpuExit::IoOut(0x80, _) => n += 1,
            VcpuExit::Hlt => break,
            e => panic!("unexpected exit {e:?}"),
        }
    }
    let io_s = t.elapsed().as_secs_f64();
    assert_eq!(n, exits);
    let same_guest = raw_loop_on_vcpulab_guest(exits);
    println!(
        "{{\"create_close_per_s\": {:.1}, \"io_exits_per_s\": {:.1}, \"io_exits_vcpulab_guest_per_s\": {:.1}, \
         \"cycles\": {cycles}, \"exits\": {exits}}}",
        cycles as f64 / create_close_s,
        n as f64 / io_s,
        same_guest
    );
}
