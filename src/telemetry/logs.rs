//! Log lines on stderr: text (coloured only on a terminal) or one JSON object a line (in
//! pods). Each line carries the fields of the spans it was logged in, so every line of a think
//! cycle says its `namespace`, `agent` and `cycle`; in JSON they are top-level keys, beside
//! `timestamp`, `level`, `target`, the event's own fields and `spans` (the spans' names, outermost
//! first).
//!
//! Span fields are named for OpenTelemetry (`agentfleet.cycle`, `otel.name`): a log line shows
//! ours without the `agentfleet.` prefix and leaves OpenTelemetry's own out.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// The prefix of the span fields named for OpenTelemetry that logs show without it.
const PREFIX: &str = "agentfleet.";

/// The name a log line gives a field: ours without [`PREFIX`], none for OpenTelemetry's own
/// (`otel.name`, `otel.status_code`).
fn shown(name: &str) -> Option<&str> {
    if name.starts_with("otel.") {
        return None;
    }
    Some(name.strip_prefix(PREFIX).unwrap_or(name))
}

/// The layer that writes log lines in `format` to `writer` (colours when `ansi`, text only).
pub fn layer<S, W>(format: LogFormat, writer: W, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Text => layer.with_ansi(ansi).fmt_fields(TextFields).boxed(),
        LogFormat::Json => layer
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .boxed(),
    }
}

/// Fields as `name=value`, separated by spaces, the message first as it is.
struct TextFields;

impl<'w> FormatFields<'w> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let Some(name) = shown(field.name()) else {
            return;
        };
        let gap = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{gap}{value:?}")
        } else {
            write!(self.writer, "{gap}{name}={value:?}")
        };
    }
}

/// One JSON object a line: the event's fields and those of every span it is in, flat.
struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        let mut time = String::new();
        SystemTime.format_time(&mut Writer::new(&mut time))?;
        line.insert("timestamp".into(), time.into());
        line.insert("level".into(), meta.level().as_str().into());
        line.insert("target".into(), meta.target().into());
        event.record(&mut JsonVisitor(&mut line));
        // The spans' fields come last: inside a cycle, its namespace, agent and cycle are
        // always the cycle's (an event's own `agent` may say it another way).
        if let Some(scope) = ctx.event_scope() {
            let mut names = Vec::new();
            for span in scope.from_root() {
                names.push(Value::from(span.name()));
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    for (name, value) in fields {
                        if let Some(name) = shown(&name) {
                            line.insert(name.to_string(), value);
                        }
                    }
                }
            }
            line.insert("spans".into(), Value::Array(names));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// An event's fields into a JSON object.
struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl JsonVisitor<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        if let Some(name) = shown(field.name()) {
            self.0.insert(name.to_string(), value);
        }
    }
}

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::CapturedLogs;
    use tracing::{debug, info, info_span};

    fn lines(logs: &CapturedLogs) -> Vec<Value> {
        logs.text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn json_lines_carry_the_spans_fields_flat_without_the_prefix() {
        let (logs, _guard) = CapturedLogs::capture_json(tracing::Level::DEBUG);
        info!(answer = 42, "outside");
        let cycle = info_span!(
            "cycle",
            agentfleet.namespace = "ops",
            agentfleet.agent = "sre",
            agentfleet.cycle = tracing::field::Empty,
            otel.name = "hidden"
        );
        cycle.in_scope(|| {
            tracing::Span::current().record("agentfleet.cycle", 7);
            info_span!("step", agentfleet.step = 1).in_scope(|| {
                debug!(agent = "ops/sre", ok = true, "inside");
            });
        });
        let lines = lines(&logs);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["message"], "outside");
        assert_eq!(lines[0]["answer"], 42);
        assert_eq!(lines[0]["level"], "INFO");
        assert!(lines[0].get("spans").is_none());
        let inside = &lines[1];
        assert_eq!(inside["message"], "inside");
        assert_eq!(inside["level"], "DEBUG");
        assert_eq!(inside["namespace"], "ops");
        assert_eq!(inside["agent"], "sre", "the cycle's, not the event's");
        assert_eq!(inside["cycle"], 7);
        assert_eq!(inside["step"], 1);
        assert_eq!(inside["ok"], true);
        assert_eq!(inside["spans"], serde_json::json!(["cycle", "step"]));
        assert!(inside["timestamp"]
            .as_str()
            .is_some_and(|t| t.contains('T')));
        let text = logs.text();
        assert!(
            !text.contains("otel.") && !text.contains("hidden"),
            "{text}"
        );
        assert!(!text.contains("agentfleet.namespace"), "{text}");
    }

    #[test]
    fn text_lines_show_the_fields_without_the_prefix_and_no_colours() {
        let (logs, _guard) = CapturedLogs::capture(tracing::Level::INFO);
        info_span!(
            "cycle",
            agentfleet.namespace = "ops",
            agentfleet.agent = "sre",
            otel.name = "hidden"
        )
        .in_scope(|| info!(tool = "send_message", "ran"));
        let text = logs.text();
        assert!(
            text.contains("cycle{namespace=\"ops\" agent=\"sre\"}:"),
            "{text}"
        );
        assert!(text.contains("ran tool=\"send_message\""), "{text}");
        assert!(!text.contains("hidden") && !text.contains('\x1b'), "{text}");
    }
}
