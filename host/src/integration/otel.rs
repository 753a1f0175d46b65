//! [`Telemetry`](crate::telemetry::Telemetry) over the embedder's own
//! OpenTelemetry SDK providers. Follows `opentelemetry_sdk` **=0.33.1**
//! exactly (toolcage pins it): a toolcage release that moves to another
//! version changes these signatures.
//!
//! [`PrometheusReader`](crate::telemetry::PrometheusReader) implements the
//! same version's `MetricReader`, so that it can be registered with one's
//! own meter provider; the rest of [`crate::telemetry`] takes toolcage's
//! types only.
//!
//! Without providers of one's own,
//! [`Telemetry::from_env`](crate::telemetry::Telemetry::from_env) builds
//! them from the standard `OTEL_*` variables.
//!
//! ```no_run
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//! use toolcage::integration::otel::SdkProviders as _;
//! use toolcage::telemetry::Telemetry;
//!
//! let provider = SdkTracerProvider::builder().build();
//! let telemetry = Telemetry::builder().tracer_provider(&provider).build();
//! ```

use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::telemetry::TelemetryBuilder;

/// Gives a [`TelemetryBuilder`] the embedder's SDK providers. Implemented
/// by [`TelemetryBuilder`] only.
pub trait SdkProviders: sealed::Sealed {
    /// Makes spans with a tracer of `provider` (scope `toolcage`). Default:
    /// no spans.
    fn tracer_provider(self, provider: &SdkTracerProvider) -> Self;

    /// Records metrics with a meter of `provider` (scope `toolcage`);
    /// register a [`PrometheusReader`](crate::telemetry::PrometheusReader)
    /// with it to render them for Prometheus. Default: no metrics.
    fn meter_provider(self, provider: &SdkMeterProvider) -> Self;
}

impl SdkProviders for TelemetryBuilder {
    fn tracer_provider(self, provider: &SdkTracerProvider) -> Self {
        self.with_tracer_provider(provider.clone())
    }

    fn meter_provider(self, provider: &SdkMeterProvider) -> Self {
        self.with_meter_provider(provider.clone())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::telemetry::TelemetryBuilder {}
}
