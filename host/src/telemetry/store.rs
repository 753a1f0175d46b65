//! The state store, measured: each operation's duration
//! (`toolcage.state.operation.duration`) and failures
//! (`toolcage.state.errors`), by operation and backend. Keys and values are
//! never attributes: they are the tasks', sessions' and states' names.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};

use crate::state::{StateStore, StoreFuture};

/// The store's durations, in seconds: a loopback Redis answers in tens of
/// microseconds, one timing out in its timeout (1 s by default).
const STORE_SECONDS_BUCKETS: [f64; 12] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0,
];

/// A [`StateStore`] whose every operation is measured.
pub(super) struct MeteredStore {
    inner: Arc<dyn StateStore>,
    backend: &'static str,
    duration: Histogram<f64>,
    errors: Counter<u64>,
}

impl MeteredStore {
    pub(super) fn new(inner: Arc<dyn StateStore>, backend: &'static str, meter: &Meter) -> Self {
        MeteredStore {
            inner,
            backend,
            duration: meter
                .f64_histogram("toolcage.state.operation.duration")
                .with_unit("s")
                .with_description("How long each operation of the state store took.")
                .with_boundaries(STORE_SECONDS_BUCKETS.to_vec())
                .build(),
            errors: meter
                .u64_counter("toolcage.state.errors")
                .with_unit("{error}")
                .with_description("Operations of the state store that failed or timed out.")
                .build(),
        }
    }

    fn measured<'a, T: Send + 'a>(
        &'a self,
        operation: &'static str,
        work: StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            let started = Instant::now();
            let outcome = work.await;
            self.record(operation, started.elapsed(), outcome.is_err());
            outcome
        })
    }

    fn record(&self, operation: &'static str, took: Duration, failed: bool) {
        let attributes = [
            KeyValue::new("toolcage.state.operation", operation),
            KeyValue::new("toolcage.state.backend", self.backend),
        ];
        self.duration.record(took.as_secs_f64(), &attributes);
        if failed {
            self.errors.add(1, &attributes);
        }
    }
}

impl StateStore for MeteredStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.measured("get", self.inner.get(key))
    }

    fn put<'a>(&'a self, key: &'a str, value: Vec<u8>, ttl: Duration) -> StoreFuture<'a, ()> {
        self.measured("put", self.inner.put(key, value, ttl))
    }

    fn take<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        self.measured("take", self.inner.take(key))
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        self.measured("delete", self.inner.delete(key))
    }
}
