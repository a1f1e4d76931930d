//! Guest RAM: one anonymous host mapping registered as KVM memory slot 0 at
//! guest-physical address 0.
//!
//! All access from the host goes through bounds-checked methods taking a
//! guest-physical address (`gpa`); the raw pointer is only handed out to build
//! the zero-copy numpy view, which keeps this mapping alive through an `Arc`.

use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

use super::error::{Error, Result};

/// A guest-physical address.
pub type Gpa = u64;

/// Page size of the guest mapping (bytes).
pub const PAGE_SIZE: u64 = 4096;

/// An anonymous, private host mapping that backs guest RAM.
#[derive(Debug)]
pub struct GuestMemory {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: the mapping is plain memory owned by this struct; it is shared with the
// guest (which writes it concurrently anyway), and all host access goes through
// bounds-checked volatile/byte copies, so moving or sharing the owner between
// threads introduces no data race beyond what guest RAM inherently has.
unsafe impl Send for GuestMemory {}
// SAFETY: see `Send` above: `&GuestMemory` only permits bounds-checked copies.
unsafe impl Sync for GuestMemory {}

impl GuestMemory {
    /// Maps `size` bytes of zeroed anonymous memory (`size` > 0, page-multiple).
    pub fn new(size: usize) -> Result<Self> {
        if size == 0 || size as u64 % PAGE_SIZE != 0 {
            return Err(Error::InvalidArgument(format!(
                "guest memory size must be a positive multiple of {PAGE_SIZE} bytes, got {size}"
            )));
        }
        // SAFETY: an anonymous private mapping with a null hint has no
        // preconditions; we check for MAP_FAILED before using the result.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::last_os("mmap(guest RAM)"));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| Error::last_os("mmap(guest RAM)"))?;
        Ok(Self { ptr, size })
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Host address of guest-physical 0 (for KVM_SET_USER_MEMORY_REGION and numpy).
    pub fn host_addr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Checks that `[gpa, gpa+len)` lies inside guest RAM.
    pub fn check_range(&self, gpa: Gpa, len: usize) -> Result<()> {
        let end = gpa.checked_add(len as u64);
        match end {
            Some(end) if end <= self.size as u64 => Ok(()),
            _ => Err(Error::OutOfRange(format!(
                "guest-physical range [{gpa:#x}, {gpa:#x}+{len:#x}) lies outside guest RAM [0, {:#x})",
                self.size
            ))),
        }
    }

    /// Copies `buf.len()` bytes from guest RAM at `gpa`.
    pub fn read(&self, gpa: Gpa, buf: &mut [u8]) -> Result<()> {
        self.check_range(gpa, buf.len())?;
        // SAFETY: the range was checked to lie inside the mapping, which lives as long
        // as `self`; `buf` is a distinct host buffer, so the regions do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(gpa as usize), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` into guest RAM at `gpa`.
    pub fn write(&self, gpa: Gpa, data: &[u8]) -> Result<()> {
        self.check_range(gpa, data.len())?;
        // SAFETY: as in `read`: checked range inside the live mapping, disjoint source.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(gpa as usize), data.len()) };
        fence(Ordering::Release);
        Ok(())
    }

    /// Reads a little-endian u64 at `gpa` (bounds-checked volatile load).
    pub fn read_u64(&self, gpa: Gpa) -> Result<u64> {
        self.check_range(gpa, 8)?;
        // SAFETY: in bounds (checked); `[u8; 8]` has alignment 1, so any gpa is fine.
        let bytes = unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(gpa as usize).cast::<[u8; 8]>()) };
        Ok(u64::from_le_bytes(bytes))
    }

    /// Writes a little-endian u64 at `gpa`.
    pub fn write_u64(&self, gpa: Gpa, value: u64) -> Result<()> {
        self.write(gpa, &value.to_le_bytes())
    }

    /// Reads a byte at `gpa`.
    pub fn read_u8(&self, gpa: Gpa) -> Result<u8> {
        self.check_range(gpa, 1)?;
        // SAFETY: in bounds (checked).
        Ok(unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(gpa as usize)) })
    }

    /// Writes a byte at `gpa` (volatile: the guest may be polling it).
    pub fn write_u8(&self, gpa: Gpa, value: u8) -> Result<()> {
        self.check_range(gpa, 1)?;
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(gpa as usize), value) };
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// A raw pointer to `gpa` after checking `[gpa, gpa+len)`; used by readers that
    /// need volatile, field-by-field access (steal time).
    pub fn checked_ptr(&self, gpa: Gpa, len: usize) -> Result<*const u8> {
        self.check_range(gpa, len)?;
        // SAFETY: in bounds (checked), so the offset stays inside the allocation.
        Ok(unsafe { self.ptr.as_ptr().add(gpa as usize) })
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`size` are exactly what mmap returned, and this is the last
        // owner (Arc): the VM fd whose slot points here holds an Arc too
        // (`VmHandle`), so the slot is gone before the mapping is.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.size) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let m = GuestMemory::new(2 * PAGE_SIZE as usize).unwrap();
        m.write(0x10, &[1, 2, 3]).unwrap();
        let mut b = [0u8; 3];
        m.read(0x10, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        assert!(matches!(m.read(0x1fff, &mut [0u8; 2]), Err(Error::OutOfRange(_))));
        assert!(matches!(m.write(u64::MAX, &[0]), Err(Error::OutOfRange(_))));
        m.write_u64(8, 0xdead_beef).unwrap();
        assert_eq!(m.read_u64(8).unwrap(), 0xdead_beef);
        assert!(GuestMemory::new(0).is_err());
        assert!(GuestMemory::new(100).is_err());
    }
}
