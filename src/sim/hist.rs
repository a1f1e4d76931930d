//! The log-linear latency histogram the guest fills during a run (64
//! sub-buckets per power of two: a value is known within 1.6 %) and the
//! quantiles and means `metrics` reads from it.
//!
//! The resolution was 16 sub-buckets (6.25 %) until 0.3.29: a latency of
//! 560 µs then fell in a bucket 32.8 µs wide, and a quantity derived from
//! it by subtracting a known part (an MSI round trip = the iteration's
//! latency − its 500-µs gap, `vcpulab.twins`) moved in steps of 32.8 µs:
//! the twin read 40.7 or 73.4 µs where the real round trip was 60-78 µs
//! (docs/twins.md, item 13). Now the step there is 8.2 µs.

/// log2 of the sub-buckets per power of two.
const SUB_BITS: usize = 6;
/// Sub-buckets per power of two; values below it have a bucket each.
const SUB: usize = 1 << SUB_BITS;
pub const HIST_BUCKETS: usize = SUB + (64 - SUB_BITS) * SUB;

fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // >= SUB_BITS
    let sub = ((v >> (e - SUB_BITS)) as usize) & (SUB - 1);
    SUB + (e - SUB_BITS) * SUB + sub
}

fn bucket_mid(b: usize) -> f64 {
    if b < SUB {
        return b as f64;
    }
    let e = (b - SUB) / SUB + SUB_BITS;
    let sub = ((b - SUB) % SUB) as u64;
    let lo = (SUB as u64 + sub) << (e - SUB_BITS);
    let width = 1u64 << (e - SUB_BITS);
    lo as f64 + (width as f64 - 1.0) / 2.0
}

pub fn hist_add(h: &mut Vec<u64>, v: u64) {
    if h.is_empty() {
        h.resize(HIST_BUCKETS, 0);
    }
    h[bucket(v)] += 1;
}

/// Approximate quantile (bucket midpoint); NaN if empty.
pub fn hist_quantile(h: &[u64], q: f64) -> f64 {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return f64::NAN;
    }
    let target = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut acc = 0;
    for (b, &c) in h.iter().enumerate() {
        acc += c;
        if acc >= target {
            return bucket_mid(b);
        }
    }
    f64::NAN
}

pub fn hist_mean(h: &[u64]) -> f64 {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return f64::NAN;
    }
    h.iter().enumerate().map(|(b, &c)| bucket_mid(b) * c as f64).sum::<f64>() / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_falls_in_a_bucket_whose_middle_is_within_a_64th_of_it() {
        for v in (0..5_000u64).chain([u64::MAX / 3, u64::MAX]).chain((0..63).map(|e| (1u64 << e) + 12_345)) {
            let b = bucket(v);
            assert!(b < HIST_BUCKETS, "{v} -> {b}");
            let mid = bucket_mid(b);
            assert!((mid - v as f64).abs() <= v as f64 / SUB as f64 + 0.5, "{v}: {mid}");
        }
        // the MSI twin's case: 560 us falls in a bucket 8.2 us wide (it was 32.8 us)
        let b = bucket(560_000);
        assert_eq!(bucket_mid(b + 1) - bucket_mid(b), 8_192.0);
    }

    #[test]
    fn histogram_quantiles_are_close() {
        let mut h = Vec::new();
        for v in 1..=10_000u64 {
            hist_add(&mut h, v * 1000);
        }
        let p50 = hist_quantile(&h, 0.5);
        assert!((p50 / 5_000_000.0 - 1.0).abs() < 0.07, "{p50}");
        let p99 = hist_quantile(&h, 0.99);
        assert!((p99 / 9_900_000.0 - 1.0).abs() < 0.07, "{p99}");
        assert!(hist_quantile(&[], 0.5).is_nan());
    }
}
