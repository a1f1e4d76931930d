//! The decision log of vcpulab's scheduler in the simulator
//! (`Result.schedule`): one row per run-token hand-off, in the columns and
//! with the reasons of the real run's `Run.schedule` (`src/kvm/sched/`,
//! [`crate::schedule::Why`]), so that a real run and its twin are compared
//! decision by decision.
//!
//! Kept with `Config.trace` under the token schedulers (`Host.scheduler`
//! `round_robin`, `relaxed_co`, `balance`, `pinned`), over the trace's
//! window (`trace_from_ns` / `trace_until_ns`), as columns from the first
//! row on (26 bytes a row). A hand-off makes at least one trace row (the
//! task switched out or in ends an interval), so `trace_max_rows` bounds it
//! as well.

use crate::schedule::Why;

use super::table::{Column, Table};

/// Bytes one decision row takes.
pub const BYTES_PER_ROW: usize = 8 + 4 * 4 + 1 + 1;

/// The log's columns, one entry a row. `out_*` is the vCPU that gave the
/// token up (-1: the token was free), `in_*` the one that got it (-1: the
/// token falls free); `pcpu` is the token's host CPU; `why` a
/// [`Why`] code ([`Why::ALL`] indexed by it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decisions {
    pub t_ns: Vec<u64>,
    pub pcpu: Vec<i32>,
    pub out_vm: Vec<i32>,
    pub out_vcpu: Vec<i32>,
    pub in_vm: Vec<i32>,
    pub in_vcpu: Vec<i32>,
    pub why: Vec<u8>,
}

impl Decisions {
    pub fn len(&self) -> usize {
        self.t_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_ns.is_empty()
    }

    /// Room for one more row in every column, or an error (the caller ends
    /// the run with `SimError::OutOfMemory`, nothing aborts).
    pub fn try_reserve_one(&mut self) -> Result<(), std::collections::TryReserveError> {
        if self.t_ns.len() < self.t_ns.capacity()
            && [&self.pcpu, &self.out_vm, &self.out_vcpu, &self.in_vm, &self.in_vcpu]
                .iter()
                .all(|c| c.len() < c.capacity())
            && self.why.len() < self.why.capacity()
        {
            return Ok(());
        }
        let more = self.len().max(256);
        self.t_ns.try_reserve(more)?;
        for c in [&mut self.pcpu, &mut self.out_vm, &mut self.out_vcpu, &mut self.in_vm, &mut self.in_vcpu] {
            c.try_reserve(more)?;
        }
        self.why.try_reserve(more)
    }

    /// Append one decision; `out` and `into` are (vm, vCPU index) or (-1, -1).
    #[inline]
    pub fn push(&mut self, t_ns: u64, pcpu: u32, out: (i32, i32), into: (i32, i32), why: Why) {
        self.t_ns.push(t_ns);
        self.pcpu.push(pcpu as i32);
        self.out_vm.push(out.0);
        self.out_vcpu.push(out.1);
        self.in_vm.push(into.0);
        self.in_vcpu.push(into.1);
        self.why.push(why as u8);
    }

    /// The log as a result table, its columns moved, not copied.
    pub fn into_table(self) -> Table {
        let mut t = Table::default();
        t.columns.push(("t_ns".into(), Column::U64(self.t_ns)));
        t.columns.push(("pcpu".into(), Column::I32(self.pcpu)));
        t.columns.push(("out_vm".into(), Column::I32(self.out_vm)));
        t.columns.push(("out_vcpu".into(), Column::I32(self.out_vcpu)));
        t.columns.push(("in_vm".into(), Column::I32(self.in_vm)));
        t.columns.push(("in_vcpu".into(), Column::I32(self.in_vcpu)));
        t.columns
            .push(("why".into(), Column::Cat { codes: self.why, names: Why::ALL.iter().map(|w| w.name()).collect() }));
        t
    }
}

const _: () = assert!(BYTES_PER_ROW == 26);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_lands_in_every_column_and_names_its_reason() {
        let mut d = Decisions::default();
        d.try_reserve_one().unwrap();
        d.push(5, 1, (-1, -1), (0, 2), Why::Wake);
        d.try_reserve_one().unwrap();
        d.push(9, 1, (0, 2), (-1, -1), Why::Halt);
        assert_eq!(d.len(), 2);
        let t = d.into_table();
        let names: Vec<&str> = t.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["t_ns", "pcpu", "out_vm", "out_vcpu", "in_vm", "in_vcpu", "why"]);
        match &t.columns[6].1 {
            Column::Cat { codes, names } => {
                assert_eq!(codes.iter().map(|&c| names[c as usize]).collect::<Vec<_>>(), ["wake", "halt"]);
            }
            other => panic!("why is not categorical: {other:?}"),
        }
    }
}
