//! The optional per-host-CPU trace: one row per interval a task ran on a
//! host CPU, for sched maps ([S4]).
//!
//! Kept as columns from the first row on, in the types `Result.trace` has
//! (29 bytes a row: `start_ns` and `end_ns` u64, `pcpu`, `vm` and `vcpu`
//! i32, `why` a one-byte code), so that turning it into a frame moves the
//! columns instead of copying them: a traced 1-second 8 × 20 yield storm
//! keeps ~16.5 M rows, about 480 MB, in the run and in the frame alike.
//!
//! Rows are appended when an interval ends, at the engine's clock, so
//! `end_ns` never decreases from one row to the next: the rows of a window
//! start at a binary search on `end_ns` (`vcpulab.plot` renders sched maps
//! of a window that way).

use super::state::Why;
use super::table::{Column, Table};
use super::SimError;

/// Bytes one trace row takes, in the run and in `Result.trace` (with a
/// polars whose enums of at most 256 names take one byte a row).
pub const BYTES_PER_ROW: usize = 8 + 8 + 4 + 4 + 4 + 1;

/// The trace's columns, one entry a row. A non-vCPU task (background or
/// host noise) has `vm = vcpu = -1`; `why` is the `Why` code that ended the
/// interval ([`Why::ALL`] indexed by it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub start_ns: Vec<u64>,
    pub end_ns: Vec<u64>,
    pub pcpu: Vec<i32>,
    pub vm: Vec<i32>,
    pub vcpu: Vec<i32>,
    pub why: Vec<u8>,
}

impl Trace {
    pub fn len(&self) -> usize {
        self.end_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.end_ns.is_empty()
    }

    /// Whether the next [`push`](Trace::push) would have to grow a column
    /// (each is checked: an allocator may round one reservation up).
    #[inline]
    pub fn is_full(&self) -> bool {
        let n = self.len();
        [
            self.start_ns.capacity(),
            self.end_ns.capacity(),
            self.pcpu.capacity(),
            self.vm.capacity(),
            self.vcpu.capacity(),
            self.why.capacity(),
        ]
        .into_iter()
        .any(|c| c == n)
    }

    /// Room for `more` rows in every column, or an error (nothing is
    /// aborted: a trace that cannot grow ends the run with
    /// [`SimError::OutOfMemory`]).
    pub fn try_reserve(&mut self, more: usize) -> Result<(), std::collections::TryReserveError> {
        self.start_ns.try_reserve_exact(more)?;
        self.end_ns.try_reserve_exact(more)?;
        self.pcpu.try_reserve_exact(more)?;
        self.vm.try_reserve_exact(more)?;
        self.vcpu.try_reserve_exact(more)?;
        self.why.try_reserve_exact(more)
    }

    /// Append one interval. Callers keep `end_ns` non-decreasing.
    #[inline]
    pub fn push(&mut self, start_ns: u64, end_ns: u64, pcpu: u32, vm: i32, vcpu: i32, why: Why) {
        debug_assert!(self.end_ns.last().is_none_or(|&e| e <= end_ns), "trace rows out of end order");
        self.start_ns.push(start_ns);
        self.end_ns.push(end_ns);
        self.pcpu.push(pcpu as i32);
        self.vm.push(vm);
        self.vcpu.push(vcpu);
        self.why.push(why as u8);
    }

    /// The trace as a result table, its columns moved, not copied.
    pub fn into_table(self) -> Table {
        let mut t = Table::default();
        t.columns.push(("pcpu".into(), Column::I32(self.pcpu)));
        t.columns.push(("start_ns".into(), Column::U64(self.start_ns)));
        t.columns.push(("end_ns".into(), Column::U64(self.end_ns)));
        t.columns.push(("vm".into(), Column::I32(self.vm)));
        t.columns.push(("vcpu".into(), Column::I32(self.vcpu)));
        t.columns
            .push(("why".into(), Column::Cat { codes: self.why, names: Why::ALL.iter().map(|w| w.name()).collect() }));
        t
    }
}

/// The error of a trace that reached `limit` rows at `now_ns` with `rows`
/// kept since `from_ns`: how many rows and how much memory the asked-for
/// window (`from_ns` to `end_ns`) would need at the rate so far.
pub fn limit_error(limit: u64, rows: usize, now_ns: u64, from_ns: u64, end_ns: u64) -> SimError {
    let rate = rows as f64 / (now_ns.saturating_sub(from_ns).max(1)) as f64;
    let need = rate * end_ns.saturating_sub(from_ns) as f64;
    SimError::TraceLimit(format!(
        "the trace reached trace_max_rows={limit} rows at t={now_ns} ns; the asked-for trace would need about \
         {need:.3e} rows ({:.0} MB at {BYTES_PER_ROW} bytes a row; the frame takes the run's columns without \
         copying them); raise trace_max_rows, trace a window (Config.trace_from_ns / \
         trace_until_ns), shorten duration_ns or run without trace",
        need * BYTES_PER_ROW as f64 / 1e6,
    ))
}

const _: () = assert!(BYTES_PER_ROW == 29);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_columns_in_push_order_and_their_memory_is_moved() {
        let mut t = Trace::default();
        t.try_reserve(4).unwrap();
        t.push(0, 10, 1, 0, 2, Why::Tick);
        t.push(5, 10, 0, -1, -1, Why::Idle);
        t.push(10, 30, 1, 1, 0, Why::Yield);
        assert_eq!(t.len(), 3);
        let ptr = t.end_ns.as_ptr();
        let tab = t.into_table();
        assert_eq!(tab.u64s("end_ns").as_ptr(), ptr, "the column is the run's, not a copy");
        assert_eq!(tab.u64s("start_ns"), &[0, 5, 10]);
        assert_eq!(tab.i32s("pcpu"), &[1, 0, 1]);
        assert_eq!(tab.i32s("vm"), &[0, -1, 1]);
        assert_eq!(tab.i32s("vcpu"), &[2, -1, 0]);
        let Some(Column::Cat { codes, names }) = tab.get("why") else { panic!("why") };
        let why: Vec<&str> = codes.iter().map(|&c| names[c as usize]).collect();
        assert_eq!(why, ["tick", "idle", "yield"]);
    }

    #[test]
    fn the_limit_error_names_the_rows_and_memory_the_window_needs() {
        // 1,000 rows in the first 1 ms of a 1 s trace: ~1e6 rows, 29 MB
        let SimError::TraceLimit(m) = limit_error(1_000, 1_000, 1_000_000, 0, 1_000_000_000) else { panic!() };
        assert!(m.contains("trace_max_rows=1000 ") && m.contains("1.000e6 rows") && m.contains("(29 MB"), "{m}");
    }
}
