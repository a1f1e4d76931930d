//! Captures the header, id and descriptors of a real vCPU stats fd (everything
//! before the data block) into a file, as the fixture of the stats parser's
//! unit test (`src/kvm/testdata/`). Independent of vcpulab's parser: plain
//! kvm-ioctls + the KVM_GET_STATS_FD ioctl + pread.
//!
//! Run: `cargo run --example capture_stats_meta -- src/kvm/testdata/vcpu_stats_meta.bin`

use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileExt;

use kvm_ioctls::Kvm;
use vmm_sys_util::ioctl::ioctl;

vmm_sys_util::ioctl_io_nr!(KVM_GET_STATS_FD, kvm_bindings::KVMIO, 0xce);

fn main() {
    let path = std::env::args().nth(1).expect("usage: capture_stats_meta OUTPUT");
    let kvm = Kvm::new().expect("/dev/kvm");
    let vm = kvm.create_vm().expect("KVM_CREATE_VM");
    let vcpu = vm.create_vcpu(0).expect("KVM_CREATE_VCPU");
    // SAFETY: KVM_GET_STATS_FD takes no argument; `vcpu` is a live vCPU fd.
    let fd = unsafe { ioctl(&vcpu, KVM_GET_STATS_FD()) };
    assert!(fd >= 0, "KVM_GET_STATS_FD failed");
    // SAFETY: a fresh fd returned by the kernel, owned by nobody else.
    let f = unsafe { File::from_raw_fd(fd) };
    let mut head = [0u8; 24];
    f.read_exact_at(&mut head, 0).expect("pread header");
    let data_offset = u32::from_le_bytes(head[20..24].try_into().unwrap()) as usize;
    let mut meta = vec![0u8; data_offset];
    f.read_exact_at(&mut meta, 0).expect("pread descriptors");
    File::create(&path).and_then(|mut o| o.write_all(&meta)).expect("write");
    println!(
        "wrote {} bytes ({} descriptors) to {path}",
        meta.len(),
        u32::from_le_bytes(head[8..12].try_into().unwrap())
    );
}
