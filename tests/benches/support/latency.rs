//! Latency figures for benches: percentiles of measured durations, in ms,
//! and how a figure stands against its target.
#![allow(dead_code)]

use std::time::Duration;

/// The median of `latencies` (sorted in place).
pub fn p50(latencies: &mut [Duration]) -> Duration {
    percentile(latencies, 0.5)
}

/// The `at` quantile (0 to 1) of `latencies` (sorted in place).
pub fn percentile(latencies: &mut [Duration], at: f64) -> Duration {
    latencies.sort();
    latencies[((latencies.len() - 1) as f64 * at) as usize]
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// "met" or "NOT met".
pub fn met(yes: bool) -> &'static str {
    if yes { "met" } else { "NOT met" }
}
