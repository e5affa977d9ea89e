//! What a cycle shows in traces (DESIGN "Observability"): a `cycle` span, in it one span per
//! model call (`chat MODEL`: each step's, and compaction's summary) and one per tool call
//! (`execute_tool TOOL`), with the attributes of OpenTelemetry's GenAI semantic conventions.
//! Counts, names, ids and durations only: never a message's text, a tool's arguments or
//! result, or an error's text (a bounded category).
//!
//! The fields log lines show too are span fields (`agentfleet.namespace`, shown in logs as
//! `namespace`); the rest are set on the OpenTelemetry span alone, and cost nothing when
//! traces are off.

use std::time::Duration;

use opentelemetry::trace::Status;
use opentelemetry::{Array, StringValue, Value};
use tracing::{field, info_span, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{Agentlet, Outcome};
use crate::model::{ModelError, ToolCall, Turn};
use crate::store::{InboxEvent, StoreError};

/// The span of a cycle over `events`; its number is recorded once known ([`numbered`]).
/// Numbers are signed: OpenTelemetry has no unsigned integers, and a `u64` field would be
/// exported as text.
pub(super) fn cycle(agentlet: &Agentlet, events: &[InboxEvent]) -> Span {
    info_span!(
        "cycle",
        agentfleet.namespace = %agentlet.key.namespace,
        agentfleet.agent = %agentlet.key.name,
        agentfleet.cycle = field::Empty,
        agentfleet.events = count(events.len() as u64),
    )
}

/// Records the current cycle's number, once known.
pub(super) fn numbered(cycle: u64) {
    Span::current().record("agentfleet.cycle", count(cycle));
}

/// Records how the cycle ended.
pub(super) fn cycle_ended(span: &Span, outcome: &Result<Outcome, StoreError>) {
    match outcome {
        Ok(outcome) => {
            span.set_attribute("agentfleet.outcome", outcome.label());
            if let Outcome::Failed(e) = outcome {
                failed(span, e.category());
            }
        }
        Err(e) => {
            span.set_attribute("agentfleet.outcome", "error");
            failed(span, e.category());
        }
    }
}

/// The span of step `step`'s model call (`chat MODEL`).
pub(super) fn step(agentlet: &Agentlet, step: u32) -> Span {
    let span = info_span!(
        "step",
        agentfleet.step = i64::from(step),
        otel.name = %format_args!("chat {}", agentlet.agent.spec.model.name),
    );
    chat(&span, agentlet);
    span
}

/// The span of the model call that writes compaction's summary (`chat MODEL` too).
pub(super) fn summary(agentlet: &Agentlet) -> Span {
    let span = info_span!(
        "summary",
        otel.name = %format_args!("chat {}", agentlet.agent.spec.model.name),
    );
    chat(&span, agentlet);
    span.set_attribute("agentfleet.purpose", "compaction");
    span
}

/// The request's attributes of a model call.
fn chat(span: &Span, agentlet: &Agentlet) {
    let model = &agentlet.agent.spec.model;
    let provider = model.provider().as_str();
    span.set_attribute("gen_ai.operation.name", "chat");
    span.set_attribute("gen_ai.provider.name", provider);
    // The name before semantic conventions 1.37, which many backends still read.
    span.set_attribute("gen_ai.system", provider);
    span.set_attribute("gen_ai.request.model", model.name.clone());
    span.set_attribute(
        "gen_ai.request.max_tokens",
        i64::from(model.max_output_tokens()),
    );
    if let Some(t) = model.temperature {
        span.set_attribute("gen_ai.request.temperature", t);
    }
}

/// Records what a model call cost and why it stopped, or that it failed; and how long its
/// first streamed piece took (`agentfleet.time_to_first_chunk_ms`).
pub(super) fn step_ended(
    span: &Span,
    result: &Result<Turn, ModelError>,
    first_chunk: Option<Duration>,
    model: &str,
) {
    // The model of its list that was asked last (the first, or a fallback): its Model's name.
    span.set_attribute("agentfleet.model", model.to_string());
    if let Some(d) = first_chunk {
        span.set_attribute("agentfleet.time_to_first_chunk_ms", millis(d));
    }
    match result {
        Ok(turn) => {
            span.set_attribute("gen_ai.usage.input_tokens", count(turn.usage.input));
            span.set_attribute("gen_ai.usage.output_tokens", count(turn.usage.output));
            if let Some(reason) = turn.finish_reason {
                span.set_attribute(
                    "gen_ai.response.finish_reasons",
                    Value::Array(Array::String(vec![StringValue::from(reason.as_str())])),
                );
            }
            span.set_attribute("agentfleet.tool_calls", count(turn.tool_calls.len() as u64));
        }
        Err(e) => failed(span, e.category()),
    }
}

/// The span of a tool call (`execute_tool TOOL`); `tool` is its bounded name (`unknown` for
/// a tool the agent does not have).
pub(super) fn tool(step: u32, call: &ToolCall, tool: &str) -> Span {
    let span = info_span!(
        "execute_tool",
        gen_ai.tool.name = %tool,
        otel.name = %format_args!("execute_tool {tool}"),
    );
    span.set_attribute("gen_ai.operation.name", "execute_tool");
    span.set_attribute("gen_ai.tool.call.id", call.id.clone());
    span.set_attribute("gen_ai.tool.type", "function");
    span.set_attribute("agentfleet.step", i64::from(step));
    span
}

/// Records a tool call's outcome (`ok`, `error`; `ends_cycle` for one that ended the cycle).
pub(super) fn tool_ended(span: &Span, ok: bool, ends_cycle: bool) {
    let outcome = match (ok, ends_cycle) {
        (true, true) => "ends_cycle",
        (true, false) => "ok",
        (false, _) => "error",
    };
    span.set_attribute("agentfleet.tool.outcome", outcome);
    if !ok {
        failed(span, "tool_error");
    }
}

/// The id of the current span's OpenTelemetry trace (32 hex digits), when traces are
/// exported (none otherwise: the span then has no valid context).
pub(super) fn trace_id() -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    let context = Span::current().context();
    let span = context.span();
    let ctx = span.span_context();
    ctx.is_valid().then(|| ctx.trace_id().to_string())
}

/// Marks a span failed, with a bounded category as its `error.type` (never the error's text).
fn failed(span: &Span, category: &'static str) {
    span.set_attribute("error.type", category);
    span.set_status(Status::error(category));
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
