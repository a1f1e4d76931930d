//! The shape of every result: a [`Table`] of named [`Column`]s, as the
//! metrics (`metrics.rs`) and the trace (`trace.rs`) build them and the
//! bindings hand them to polars without a copy. Plain data: it imports
//! nothing of the simulator.

/// One column of a result table.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    U64(Vec<u64>),
    I64(Vec<i64>),
    /// The trace's key columns (`pcpu`, `vm`, `vcpu`): 4 bytes a row.
    I32(Vec<i32>),
    F64(Vec<f64>),
    Str(Vec<String>),
    Bool(Vec<bool>),
    /// A categorical column: row `i` is `names[codes[i]]` (one byte a row;
    /// the trace's `why`).
    Cat {
        codes: Vec<u8>,
        names: Vec<&'static str>,
    },
}

/// An ordered set of named columns of equal length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<(String, Column)>,
}

impl Table {
    pub(crate) fn add(&mut self, name: &str, c: Column) {
        self.columns.push((name.to_string(), c));
    }
    pub fn get(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
    pub fn u64s(&self, name: &str) -> &[u64] {
        match self.get(name) {
            Some(Column::U64(v)) => v,
            _ => panic!("no u64 column {name}"),
        }
    }
    pub fn i32s(&self, name: &str) -> &[i32] {
        match self.get(name) {
            Some(Column::I32(v)) => v,
            _ => panic!("no i32 column {name}"),
        }
    }
    pub fn f64s(&self, name: &str) -> &[f64] {
        match self.get(name) {
            Some(Column::F64(v)) => v,
            _ => panic!("no f64 column {name}"),
        }
    }
}
