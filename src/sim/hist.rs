//! The log-linear latency histogram the guest fills during a run (16
//! sub-buckets per power of two, < 6.25 % error) and the quantiles and means
//! `metrics` reads from it.

pub const HIST_BUCKETS: usize = 16 + 60 * 16;

fn bucket(v: u64) -> usize {
    if v < 16 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // >= 4
    let sub = ((v >> (e - 4)) & 15) as usize;
    16 + (e - 4) * 16 + sub
}

fn bucket_mid(b: usize) -> f64 {
    if b < 16 {
        return b as f64;
    }
    let e = (b - 16) / 16 + 4;
    let sub = ((b - 16) % 16) as u64;
    let lo = (16 + sub) << (e - 4);
    let width = 1u64 << (e - 4);
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
