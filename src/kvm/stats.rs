//! KVM binary statistics (`KVM_GET_STATS_FD`, [K6]).
//!
//! The stats file is `header | id | descriptors | data`. The header and
//! descriptors never change for the life of the fd, so [`StatsSchema`] parses them
//! once; sampling then costs exactly one positional read (`pread`) of the data
//! block per fd. The fd does not support `lseek`, so every read is positional.
//! Another process's stats fds are duplicated once and checked in [`super::foreign`].

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::error::{Error, Result};

/// Size of `struct kvm_stats_header` (six u32).
pub const HEADER_SIZE: usize = 24;
/// Size of the fixed part of `struct kvm_stats_desc` (before the name).
pub const DESC_FIXED_SIZE: usize = 16;

/// `KVM_STATS_TYPE_*` (flags bits 3:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatKind {
    Cumulative,
    Instant,
    Peak,
    LinearHist,
    LogHist,
    Unknown(u32),
}

/// `KVM_STATS_UNIT_*` (flags bits 7:4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatUnit {
    None,
    Bytes,
    Seconds,
    Cycles,
    Boolean,
    Unknown(u32),
}

impl StatKind {
    pub fn name(self) -> &'static str {
        match self {
            StatKind::Cumulative => "cumulative",
            StatKind::Instant => "instant",
            StatKind::Peak => "peak",
            StatKind::LinearHist => "linear_hist",
            StatKind::LogHist => "log_hist",
            StatKind::Unknown(_) => "unknown",
        }
    }
}

impl StatUnit {
    pub fn name(self) -> &'static str {
        match self {
            StatUnit::None => "none",
            StatUnit::Bytes => "bytes",
            StatUnit::Seconds => "seconds",
            StatUnit::Cycles => "cycles",
            StatUnit::Boolean => "boolean",
            StatUnit::Unknown(_) => "unknown",
        }
    }
}

/// One parsed `kvm_stats_desc`.
#[derive(Debug, Clone, PartialEq)]
pub struct StatDesc {
    pub name: String,
    pub kind: StatKind,
    pub unit: StatUnit,
    /// 10 (POW10) or 2 (POW2).
    pub base: u32,
    /// The value is `raw * base^exponent` in `unit` (e.g. -9 for nanoseconds).
    pub exponent: i16,
    /// Number of u64 values (1 for scalars, bucket count for histograms).
    pub size: u16,
    /// Byte offset of the first value inside the data block.
    pub offset: u32,
    /// Bucket width of a linear histogram (0 otherwise).
    pub bucket_size: u32,
}

/// The immutable part of a stats file: its id and descriptors.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsSchema {
    pub id: String,
    pub data_offset: u64,
    /// Length in bytes of the data block (covers every descriptor's values).
    pub data_len: usize,
    pub descs: Vec<StatDesc>,
}

fn u32_at(b: &[u8], off: usize) -> Result<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4-byte slice")))
        .ok_or_else(|| Error::InvalidArgument(format!("stats buffer too short for u32 at {off}")))
}

impl StatsSchema {
    /// Parses the header alone (24 bytes) and returns `(name_size, num_desc, id_offset, desc_offset, data_offset)`.
    pub fn parse_header(b: &[u8]) -> Result<(u32, u32, u32, u32, u32)> {
        if b.len() < HEADER_SIZE {
            return Err(Error::InvalidArgument(format!("stats header needs {HEADER_SIZE} bytes, got {}", b.len())));
        }
        Ok((u32_at(b, 4)?, u32_at(b, 8)?, u32_at(b, 12)?, u32_at(b, 16)?, u32_at(b, 20)?))
    }

    /// Parses header, id and descriptors from a buffer that holds the file from
    /// offset 0 up to (at least) `data_offset`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let (name_size, num_desc, id_offset, desc_offset, data_offset) = Self::parse_header(b)?;
        let name_size = name_size as usize;
        let desc_len = DESC_FIXED_SIZE + name_size;
        let need = desc_offset as usize + num_desc as usize * desc_len;
        if b.len() < need || b.len() < id_offset as usize + name_size {
            return Err(Error::InvalidArgument(format!(
                "stats buffer of {} bytes is shorter than its descriptors ({need} bytes)",
                b.len()
            )));
        }
        let cstr = |s: &[u8]| {
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        };
        let id = cstr(&b[id_offset as usize..id_offset as usize + name_size]);
        let mut descs = Vec::with_capacity(num_desc as usize);
        let mut data_len = 0usize;
        for i in 0..num_desc as usize {
            let d = &b[desc_offset as usize + i * desc_len..][..desc_len];
            let flags = u32_at(d, 0)?;
            let exponent = i16::from_le_bytes([d[4], d[5]]);
            let size = u16::from_le_bytes([d[6], d[7]]);
            let offset = u32_at(d, 8)?;
            let bucket_size = u32_at(d, 12)?;
            let kind = match flags & 0xf {
                0 => StatKind::Cumulative,
                1 => StatKind::Instant,
                2 => StatKind::Peak,
                3 => StatKind::LinearHist,
                4 => StatKind::LogHist,
                k => StatKind::Unknown(k),
            };
            let unit = match (flags >> 4) & 0xf {
                0 => StatUnit::None,
                1 => StatUnit::Bytes,
                2 => StatUnit::Seconds,
                3 => StatUnit::Cycles,
                4 => StatUnit::Boolean,
                u => StatUnit::Unknown(u),
            };
            let base = if (flags >> 8) & 0xf == 1 { 2 } else { 10 };
            data_len = data_len.max(offset as usize + size as usize * 8);
            descs.push(StatDesc {
                name: cstr(&d[DESC_FIXED_SIZE..]),
                kind,
                unit,
                base,
                exponent,
                size,
                offset,
                bucket_size,
            });
        }
        Ok(Self { id, data_offset: data_offset as u64, data_len, descs })
    }

    /// Index of the descriptor called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.descs.iter().position(|d| d.name == name)
    }

    /// Values of descriptor `i` inside a data block read at `data_offset`.
    pub fn values<'a>(&self, data: &'a [u8], i: usize) -> impl Iterator<Item = u64> + 'a {
        let d = &self.descs[i];
        let start = d.offset as usize;
        data[start..start + d.size as usize * 8]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
    }
}

/// An open stats fd with its parsed schema.
#[derive(Debug)]
pub struct StatsFd {
    file: File,
    pub schema: StatsSchema,
}

impl std::os::fd::AsFd for StatsFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl StatsFd {
    /// Takes ownership of a stats fd (from `KVM_GET_STATS_FD`) and parses its schema.
    pub fn new(file: File) -> Result<Self> {
        let mut head = [0u8; HEADER_SIZE];
        file.read_exact_at(&mut head, 0).map_err(|source| Error::Ioctl { call: "pread(stats header)", source })?;
        let (.., data_offset) = StatsSchema::parse_header(&head)?;
        let mut meta = vec![0u8; data_offset as usize];
        file.read_exact_at(&mut meta, 0).map_err(|source| Error::Ioctl { call: "pread(stats descriptors)", source })?;
        let schema = StatsSchema::parse(&meta)?;
        Ok(Self { file, schema })
    }

    /// Reads the whole data block with one positional read into `buf`
    /// (resized to the schema's data length).
    pub fn read_data(&self, buf: &mut Vec<u8>) -> Result<()> {
        buf.resize(self.schema.data_len, 0);
        self.file
            .read_exact_at(buf, self.schema.data_offset)
            .map_err(|source| Error::Ioctl { call: "pread(stats data)", source })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a stats file image the way the kernel lays it out.
    pub fn fake_stats_file(id: &str, descs: &[(&str, u32, i16, u16, u32)], values: &[u64]) -> Vec<u8> {
        let name_size = 48usize;
        let num = descs.len();
        let id_offset = HEADER_SIZE;
        let desc_offset = id_offset + name_size;
        let data_offset = desc_offset + num * (DESC_FIXED_SIZE + name_size);
        let mut b = Vec::new();
        for v in [0u32, name_size as u32, num as u32, id_offset as u32, desc_offset as u32, data_offset as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let mut idb = id.as_bytes().to_vec();
        idb.resize(name_size, 0);
        b.extend_from_slice(&idb);
        let mut off = 0u32;
        for &(name, flags, exp, size, bucket) in descs {
            b.extend_from_slice(&flags.to_le_bytes());
            b.extend_from_slice(&exp.to_le_bytes());
            b.extend_from_slice(&size.to_le_bytes());
            b.extend_from_slice(&off.to_le_bytes());
            b.extend_from_slice(&bucket.to_le_bytes());
            let mut nb = name.as_bytes().to_vec();
            nb.resize(name_size, 0);
            b.extend_from_slice(&nb);
            off += size as u32 * 8;
        }
        for v in values {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn parses_a_captured_layout() {
        // halt_exits: cumulative/none; halt_wait_ns: cumulative/seconds/-9;
        // blocking: instant/boolean; halt_wait_hist: log hist, 4 buckets, seconds.
        let img = fake_stats_file(
            "kvm-1234/vcpu-0",
            &[
                ("halt_exits", 0x00, 0, 1, 0),
                ("halt_wait_ns", 0x20, -9, 1, 0),
                ("blocking", 0x41, 0, 1, 0),
                ("halt_wait_hist", 0x24, -9, 4, 0),
                ("pages_linear", 0x113, 0, 2, 1024),
            ],
            &[7, 123_456, 1, 0, 5, 6, 0, 9, 10],
        );
        let s = StatsSchema::parse(&img).unwrap();
        assert_eq!(s.id, "kvm-1234/vcpu-0");
        assert_eq!(s.descs.len(), 5);
        assert_eq!(s.data_offset as usize, 24 + 48 + 5 * 64);
        assert_eq!(s.data_len, 9 * 8);
        let wait = &s.descs[1];
        assert_eq!((wait.kind, wait.unit, wait.base, wait.exponent), (StatKind::Cumulative, StatUnit::Seconds, 10, -9));
        assert_eq!(s.descs[2].kind, StatKind::Instant);
        assert_eq!(s.descs[2].unit, StatUnit::Boolean);
        assert_eq!(s.descs[3].kind, StatKind::LogHist);
        assert_eq!(s.descs[4].kind, StatKind::LinearHist);
        assert_eq!(s.descs[4].base, 2);
        assert_eq!(s.descs[4].bucket_size, 1024);
        let data = &img[s.data_offset as usize..];
        assert_eq!(s.values(data, 0).collect::<Vec<_>>(), vec![7]);
        assert_eq!(s.values(data, 3).collect::<Vec<_>>(), vec![0, 5, 6, 0]);
        assert_eq!(s.values(data, 4).collect::<Vec<_>>(), vec![9, 10]);
        assert_eq!(s.index_of("blocking"), Some(2));
    }

    /// The header, id and descriptors of a real vCPU stats fd, captured on the
    /// project's machine (kvm_pvm host, 47 descriptors) by
    /// `examples/capture_stats_meta.rs`.
    const CAPTURED: &[u8] = include_bytes!("testdata/vcpu_stats_meta_kvm_pvm.bin");

    #[test]
    fn parses_a_captured_vcpu_stats_header() {
        let s = StatsSchema::parse(CAPTURED).unwrap();
        assert_eq!(s.descs.len(), 47);
        assert!(s.id.starts_with("kvm-") && s.id.ends_with("/vcpu-0"), "{}", s.id);
        assert_eq!(s.data_offset as usize, CAPTURED.len());
        let d = |n: &str| &s.descs[s.index_of(n).unwrap_or_else(|| panic!("no {n}"))];
        // generic halt-polling stats ([K6])
        for n in ["halt_successful_poll", "halt_attempted_poll", "halt_poll_invalid", "halt_wakeup"] {
            assert_eq!((d(n).kind, d(n).unit, d(n).size), (StatKind::Cumulative, StatUnit::None, 1), "{n}");
        }
        for n in ["halt_poll_success_ns", "halt_poll_fail_ns", "halt_wait_ns"] {
            assert_eq!(
                (d(n).kind, d(n).unit, d(n).base, d(n).exponent),
                (StatKind::Cumulative, StatUnit::Seconds, 10, -9),
                "{n}"
            );
        }
        for n in ["halt_poll_success_hist", "halt_poll_fail_hist", "halt_wait_hist"] {
            assert_eq!((d(n).kind, d(n).size, d(n).bucket_size), (StatKind::LogHist, 32, 0), "{n}");
        }
        assert_eq!((d("blocking").kind, d("blocking").unit), (StatKind::Instant, StatUnit::Boolean));
        // x86 stats the project relies on
        for n in [
            "exits",
            "halt_exits",
            "insn_emulation",
            "directed_yield_attempted",
            "preemption_reported",
            "preemption_other",
        ] {
            assert_eq!(d(n).kind, StatKind::Cumulative, "{n}");
        }
        // values lie inside the data block and do not overlap
        let mut spans: Vec<(u32, u32)> = s.descs.iter().map(|x| (x.offset, x.offset + 8 * x.size as u32)).collect();
        spans.sort();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
        assert_eq!(spans.last().unwrap().1 as usize, s.data_len);
    }

    #[test]
    fn rejects_truncated_buffers() {
        let img = fake_stats_file("x", &[("a", 0, 0, 1, 0)], &[1]);
        assert!(StatsSchema::parse(&img[..10]).is_err());
        assert!(StatsSchema::parse(&img[..100]).is_err());
    }
}
