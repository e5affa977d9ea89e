//! Spans over OTLP/HTTP (protobuf) when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set — and nothing at all otherwise: no exporter, no
//! background task. The exporter reads the other standard variables itself
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION` and their `…_TRACES_…` forms), the
//! resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, the batch processor `OTEL_BSP_*`.
//!
//! Spans go through a batch processor on the tokio runtime and are flushed at exit
//! ([`Traces::shutdown`]). A collector that cannot be reached never stops or slows the process:
//! the spans of that export are dropped, and it says so once, until an export succeeds again.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::runtime;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing::{info, warn};

/// The only OTLP protocol this build speaks.
const PROTOCOL: &str = "http/protobuf";

/// Why traces cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The exporter refused its configuration (a malformed endpoint, say).
    #[error("configuring the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// There is no tokio runtime to run the batch processor on.
    #[error("traces are exported only by commands that run on the async runtime")]
    NoRuntime,
}

/// Whether the environment (`var`) asks for traces: an OTLP endpoint for them, unless the SDK
/// is disabled (`OTEL_SDK_DISABLED=true`) or their exporter is `none`.
pub fn requested(var: impl Fn(&str) -> Option<String>) -> bool {
    let is =
        |name: &str, value: &str| var(name).is_some_and(|v| v.trim().eq_ignore_ascii_case(value));
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    !is("OTEL_SDK_DISABLED", "true")
        && !is("OTEL_TRACES_EXPORTER", "none")
        && (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

/// The protocol the environment asks for, when it is one this build does not speak.
pub fn unsupported_protocol(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty() && p != PROTOCOL)
}

/// Whether the environment names the service (else it is `agentfleet-ROLE`).
fn named(var: &impl Fn(&str) -> Option<String>) -> bool {
    var("OTEL_SERVICE_NAME").is_some_and(|n| !n.trim().is_empty())
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|a| a.trim_start().starts_with("service.name="))
        })
}

/// Traces being exported.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Starts the exporter and its batch processor on the current tokio runtime, for the
    /// process's `role` (`worker`, `operator`, …).
    pub fn start(role: &str) -> Result<Self, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let var = |name: &str| std::env::var(name).ok();
        // The exporter's reqwest client is ours: rustls with ring.
        crate::install_crypto_provider();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()?;
        let processor =
            BatchSpanProcessor::builder(Reporting::new(exporter), runtime::Tokio).build();
        let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ));
        if !named(&var) {
            resource = resource.with_service_name(format!("agentfleet-{role}"));
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.build())
            .build();
        Ok(Self { provider })
    }

    /// The tracer spans are made with.
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("agentfleet")
    }

    /// Says where spans go.
    pub fn announce(&self) {
        let var = |name: &str| std::env::var(name).ok();
        let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .unwrap_or_default();
        info!(endpoint = %crate::store::redact_url(&endpoint), protocol = PROTOCOL, "exporting traces over OTLP");
        if let Some(protocol) = unsupported_protocol(var) {
            warn!(%protocol, "this build exports traces over {PROTOCOL} only; a collector that expects {protocol} will refuse them");
        }
    }

    /// Exports the spans not exported yet and stops. Blocks until that is done (at most the
    /// export timeout): call it outside the runtime's `block_on`, while the runtime still runs.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "the last spans were not exported");
        }
    }
}

/// An exporter that says when exports start failing, once, and when they work again.
#[derive(Debug)]
struct Reporting<E> {
    inner: E,
    failing: AtomicBool,
}

impl<E> Reporting<E> {
    fn new(inner: E) -> Self {
        Self {
            inner,
            failing: AtomicBool::new(false),
        }
    }
}

impl<E: SpanExporter> SpanExporter for Reporting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        match &result {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => {
                warn!(error = %e, spans, "cannot export traces; dropping spans until the collector answers");
            }
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                info!("exporting traces again");
            }
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn traces_are_requested_by_an_endpoint_only() {
        assert!(!requested(env(&[])));
        assert!(!requested(env(&[
            ("OTEL_SERVICE_NAME", "x"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=b"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", " "),
        ])));
        assert!(requested(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://collector:4318"
        )])));
        assert!(requested(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://collector:4318/v1/traces"
        )])));
        assert!(!requested(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ])));
        assert!(!requested(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])));
    }

    #[test]
    fn only_http_protobuf_is_spoken() {
        assert_eq!(unsupported_protocol(env(&[])), None);
        assert_eq!(
            unsupported_protocol(env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])),
            None
        );
        assert_eq!(
            unsupported_protocol(env(&[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
            ])),
            Some("grpc".into())
        );
    }

    #[test]
    fn the_service_is_named_by_the_environment_or_the_role() {
        assert!(!named(&env(&[])));
        assert!(named(&env(&[("OTEL_SERVICE_NAME", "fleet")])));
        assert!(named(&env(&[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod, service.name=fleet"
        )])));
        assert!(!named(&env(&[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod"
        )])));
    }

    #[test]
    fn without_a_runtime_nothing_starts() {
        assert!(matches!(Traces::start("cli"), Err(Error::NoRuntime)));
    }
}
