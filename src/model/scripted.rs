//! The `scripted` provider: a deterministic model for demos and tests. No network, no key;
//! it reads the same fresh context and inbox message a real model gets, and follows the
//! seeds' rules the way a well-behaved model would.
//!
//! For each inbox line addressed to it it answers in that space with `send_message`. A line
//! is addressed to it when it is mentioned (`(to NAME)`), or when a human or service names it
//! in the text, or when it is the only agent of the space. Agents are answered only when they
//! mention it, so two scripted agents never talk in circles. The answer is:
//! - `remember <fact>` → stores the fact with `set_memories` and confirms;
//! - a text asking what it remembers → lists its memories from the fresh context;
//! - `deploy SERVICE VERSION`, when it has an interactive `confirm_deployment` tool (the
//!   seeds' "Interactive Tool Pause") → asks the space to confirm with it, and once a human
//!   answered says in that space whether it deploys;
//! - anything else → acknowledges who said what.
//!
//! A plan that comes due (`(plan) plan NAME: "instruction"`) and a service event
//! (`(service) NAME: "text"`) are announced in its first space.
//!
//! When nothing is addressed to it, it calls `skip`. After its tool calls have run it ends the
//! cycle with a short text. The mid-cycle inbox preview is information, never a request: it
//! is not answered (those events come in full next cycle). Asked for a summary (a request
//! without tools, as compaction sends), it writes one.

use async_trait::async_trait;
use serde_json::json;

use super::format::{parse_inbox, parse_memories, space_agents, space_names, InboxLine, Source};
use super::{
    Delta, FinishReason, Message, Model, ModelError, Request, ToolCall, ToolChoice, ToolSpec, Turn,
    Usage,
};

/// The scripted model of one agent.
pub struct Scripted {
    name: String,
}

impl Scripted {
    /// The scripted model of agent `name`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
        }
    }

    fn addressed(&self, context: &str, line: &InboxLine) -> bool {
        let Source::Space(space) = &line.source else {
            return false;
        };
        if let Some(m) = &line.mention {
            return *m == self.name;
        }
        let agents = space_agents(context, space).unwrap_or_default();
        if agents.contains(&line.sender) {
            // An agent's message is answered only when it mentions this agent.
            return false;
        }
        let me = self.name.to_lowercase();
        let named = line
            .text
            .to_lowercase()
            .split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_')
            .any(|w| w == me);
        named || (agents.len() == 1 && agents[0] == self.name)
    }

    fn plan(&self, context: &str, inbox: &str, tools: &[ToolSpec]) -> Vec<ToolCall> {
        let mut calls = Vec::new();
        let first_space = space_names(context).into_iter().next();
        for line in parse_inbox(inbox) {
            let announce = match line.source {
                Source::Plan => Some(format!("It is time ({}): {}", line.sender, line.text)),
                Source::Service => Some(format!("{} reports: {}", line.sender, line.text)),
                Source::ToolResult => None,
                Source::Space(_) => None,
            };
            if let Some(text) = announce {
                if let Some(space) = &first_space {
                    calls.push(call(
                        calls.len(),
                        "send_message",
                        json!({ "space": space, "text": text }),
                    ));
                }
                continue;
            }
            let Source::Space(space) = &line.source else {
                continue;
            };
            if line.sender == self.name || !self.addressed(context, &line) {
                continue;
            }
            if let Some((service, version)) = deploy_request(&line.text)
                .filter(|_| tools.iter().any(|t| t.name == CONFIRM_DEPLOYMENT))
            {
                // Asked first; the reply comes with the answer (see `confirmed`).
                calls.push(call(
                    calls.len(),
                    CONFIRM_DEPLOYMENT,
                    json!({ "service": service, "version": version }),
                ));
                continue;
            }
            let reply = if let Some(fact) = remember_request(&line.text) {
                let key = format!("note-{}", calls.len() + parse_memories(context).len() + 1);
                calls.push(call(
                    calls.len(),
                    "set_memories",
                    json!({ "memories": { key: fact } }),
                ));
                format!("Noted, {}: I will remember that {fact}.", line.sender)
            } else if line.text.to_lowercase().contains("what do you remember") {
                let memories = parse_memories(context);
                if memories.is_empty() {
                    format!("{}, I have nothing stored yet.", line.sender)
                } else {
                    let facts: Vec<String> = memories.into_iter().map(|(_, v)| v).collect();
                    format!("{}, I remember: {}.", line.sender, facts.join("; "))
                }
            } else {
                format!("{}, you said: \"{}\"", line.sender, line.text)
            };
            calls.push(call(
                calls.len(),
                "send_message",
                json!({ "space": space, "text": reply }),
            ));
        }
        if calls.is_empty() {
            calls.push(call(
                0,
                "skip",
                json!({ "reason": "nothing here is addressed to me" }),
            ));
        }
        calls
    }
}

/// The interactive tool the scripted model asks before a deployment.
const CONFIRM_DEPLOYMENT: &str = "confirm_deployment";

/// `(service, version)` of `deploy SERVICE VERSION` (any case), if the text asks.
fn deploy_request(text: &str) -> Option<(String, String)> {
    let mut words = text.split_whitespace();
    let verb = words.next()?;
    if !verb.eq_ignore_ascii_case("deploy") {
        return None;
    }
    let service = words.next()?.trim_end_matches([',', '.']);
    let version = words.next()?.trim_end_matches([',', '.', '!']);
    Some((service.to_string(), version.to_string()))
}

/// After a step that asked `confirm_deployment`: what to say in the space the deployment was
/// asked in, once each answer is in (`None` for any other step).
fn confirmed(context: &str, messages: &[Message]) -> Option<Vec<ToolCall>> {
    let (at, asked) = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m {
            Message::Assistant { tool_calls, .. } => Some((i, tool_calls)),
            _ => None,
        })?;
    // The space of the request that led to it; else the agent's first.
    let space = messages[..at]
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => parse_inbox(content)
                .into_iter()
                .filter(|l| deploy_request(&l.text).is_some())
                .find_map(|l| match l.source {
                    Source::Space(space) => Some(space),
                    _ => None,
                }),
            _ => None,
        })
        .or_else(|| space_names(context).into_iter().next())?;
    let calls: Vec<ToolCall> = asked
        .iter()
        .filter(|c| c.name == CONFIRM_DEPLOYMENT)
        .filter_map(|c| {
            let args: serde_json::Value = serde_json::from_str(&c.arguments).ok()?;
            let what = format!(
                "{} {}",
                args["service"].as_str().unwrap_or("?"),
                args["version"].as_str().unwrap_or("?")
            );
            let result = messages[at..].iter().find_map(|m| match m {
                Message::Tool {
                    tool_call_id,
                    content,
                } if *tool_call_id == c.id => {
                    serde_json::from_str::<serde_json::Value>(content).ok()
                }
                _ => None,
            })?;
            let text = if result["answer"]["confirmed"] == json!(true) {
                format!(
                    "Deploying {what}, as {} confirmed.",
                    result["by"].as_str().unwrap_or("a member")
                )
            } else if let Some(by) = result["by"].as_str() {
                format!(
                    "Not deploying {what}: {by} did not confirm ({}).",
                    result["answer"]
                )
            } else {
                format!(
                    "Not deploying {what}: {}",
                    result["error"].as_str().unwrap_or("nobody confirmed")
                )
            };
            Some(text)
        })
        .enumerate()
        .map(|(i, text)| call(i, "send_message", json!({ "space": space, "text": text })))
        .collect();
    (!calls.is_empty()).then_some(calls)
}

/// The fact of `remember that <fact>` / `remember <fact>` (any case), if the text asks.
fn remember_request(text: &str) -> Option<String> {
    /// Whether `text` continues with `phrase` at byte `at`, ignoring ASCII case (the phrase is
    /// ASCII, so a match always ends on a character boundary).
    fn at(text: &str, at: usize, phrase: &str) -> bool {
        text.get(at..at + phrase.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(phrase))
    }
    const THAT: &str = "remember that ";
    const PLAIN: &str = "remember ";
    let start = text
        .char_indices()
        .find(|(i, _)| at(text, *i, THAT))
        .map(|(i, _)| i + THAT.len())
        .or_else(|| at(text, 0, PLAIN).then_some(PLAIN.len()))?;
    let fact = text.get(start..)?.trim().trim_end_matches(['.', '!']);
    (!fact.is_empty()).then(|| fact.to_string())
}

/// A short, deterministic summary of what compaction drops (the text of
/// [`crate::worker::compaction::summary_prompt`]): who said what, most recent last.
fn summary(text: &str) -> String {
    const MAX: usize = 600;
    let said: Vec<String> = text
        .lines()
        .map(|l| l.strip_prefix("INPUT: ").unwrap_or(l))
        .flat_map(parse_inbox)
        .map(|l| format!("{} said \"{}\"", l.sender, l.text))
        .collect();
    let mut out = String::from("Earlier: ");
    if said.is_empty() {
        out.push_str("nothing of note.");
    }
    // The most recent statements matter most: keep the tail within the limit.
    let mut kept: Vec<&str> = Vec::new();
    let mut len = 0;
    for s in said.iter().rev() {
        len += s.chars().count() + 2;
        if len > MAX && !kept.is_empty() {
            break;
        }
        kept.push(s);
    }
    kept.reverse();
    out.push_str(&kept.join("; "));
    out.chars().take(MAX + 40).collect()
}

/// The text that ends a cycle once its tool calls have run.
fn done() -> Turn {
    Turn {
        text: Some("Done.".into()),
        ..Turn::default()
    }
}

fn call(index: usize, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: format!("call_{index}"),
        name: name.into(),
        arguments: args.to_string(),
    }
}

#[async_trait]
impl Model for Scripted {
    async fn complete(
        &self,
        request: &Request,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, ModelError> {
        // The fresh context (and any preview in it) is information only, not a request.
        let last = request.messages.last();
        let turn = match last {
            // A request that may not call tools (compaction's summary).
            Some(Message::User { content })
                if request.tools.is_empty() && request.tool_choice == ToolChoice::None =>
            {
                Turn {
                    text: Some(summary(content)),
                    ..Turn::default()
                }
            }
            Some(Message::User { content }) => Turn {
                tool_calls: self.plan(&request.context, content, &request.tools),
                ..Turn::default()
            },
            Some(Message::Tool { .. }) => match confirmed(&request.context, &request.messages) {
                Some(tool_calls) => Turn {
                    tool_calls,
                    ..Turn::default()
                },
                None => done(),
            },
            _ => done(),
        };
        // Stream like a real model: text, then each call's arguments in small pieces.
        if let Some(text) = &turn.text {
            on_delta(Delta::Text(text.clone()));
        }
        for (index, c) in turn.tool_calls.iter().enumerate() {
            let chars: Vec<char> = c.arguments.chars().collect();
            for piece in chars.chunks(16) {
                on_delta(Delta::ToolArguments {
                    index,
                    name: c.name.clone(),
                    delta: piece.iter().collect(),
                });
            }
        }
        let input = request.estimate_tokens();
        let output = turn.message().estimate_tokens();
        let finish_reason = Some(if turn.tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        });
        Ok(Turn {
            usage: Usage {
                input,
                output,
                ..Usage::default()
            },
            finish_reason,
            ..turn
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::hostile_text;
    use crate::model::format::{memory_line, space_line};
    use proptest::prelude::*;

    fn inbox_line(space: &str, sender: &str, text: &str) -> String {
        InboxLine::space(space, sender, text).render()
    }

    fn args(turn: &Turn, i: usize) -> serde_json::Value {
        serde_json::from_str(&turn.tool_calls[i].arguments).unwrap()
    }

    fn request(context: String, messages: Vec<Message>) -> Request {
        Request {
            system: "You are reviewer.".into(),
            messages,
            context,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
        }
    }

    async fn run(model: &Scripted, req: &Request) -> (Turn, Vec<Delta>) {
        let mut deltas = Vec::new();
        let turn = model.complete(req, &mut |d| deltas.push(d)).await.unwrap();
        (turn, deltas)
    }

    fn context() -> String {
        format!(
            "{}\nSpaces you are a member of:\n{}\n{}\n",
            crate::model::format::CONTEXT_HEADING,
            space_line(
                "Engineering",
                "engineering",
                &["reviewer", "oncall"],
                &["Husam"]
            ),
            space_line("Family", "family", &["reviewer"], &["Husam"])
        )
    }

    #[tokio::test]
    async fn answers_what_is_addressed_to_it_and_skips_the_rest() {
        let m = Scripted::new("reviewer");
        let inbox = [
            inbox_line("Engineering", "Husam", "oncall, is prod up?"),
            inbox_line("Engineering", "Husam", "reviewer, please look at PR 12"),
            inbox_line("Family", "Husam", "dinner at 8"),
        ]
        .join("\n");
        let (turn, deltas) = run(&m, &request(context(), vec![Message::user(inbox)])).await;
        let names: Vec<&str> = turn.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["send_message", "send_message"]);
        let first: serde_json::Value = serde_json::from_str(&turn.tool_calls[0].arguments).unwrap();
        assert_eq!(first["space"], "Engineering");
        assert_eq!(
            first["text"],
            "Husam, you said: \"reviewer, please look at PR 12\""
        );
        let streamed: String = deltas
            .iter()
            .filter_map(|d| match d {
                Delta::ToolArguments {
                    index: 0, delta, ..
                } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            streamed, turn.tool_calls[0].arguments,
            "arguments stream in pieces"
        );
        assert!(turn.usage.input > 0 && turn.usage.output > 0);

        let not_me = inbox_line("Engineering", "Husam", "oncall, restart the API");
        let (turn, _) = run(&m, &request(context(), vec![Message::user(not_me)])).await;
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].name, "skip");
    }

    #[tokio::test]
    async fn asks_before_deploying_and_says_what_the_answer_was() {
        let m = Scripted::new("reviewer");
        let confirm = ToolSpec {
            name: CONFIRM_DEPLOYMENT.into(),
            description: "Ask to confirm.".into(),
            parameters: json!({"type": "object"}),
        };
        let asking = Message::user(inbox_line("Family", "Husam", "deploy api 1.2, please"));
        // Without the tool it is just a message.
        let (turn, _) = run(&m, &request(context(), vec![asking.clone()])).await;
        assert_eq!(turn.tool_calls[0].name, "send_message");
        let mut req = request(context(), vec![asking]);
        req.tools = vec![confirm];
        let (turn, _) = run(&m, &req).await;
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].name, CONFIRM_DEPLOYMENT);
        assert_eq!(args(&turn, 0), json!({"service": "api", "version": "1.2"}));

        // The answer (or its absence) is said in the space that asked.
        let answered = |result: serde_json::Value| {
            let mut messages = req.messages.clone();
            messages.push(turn.message());
            messages.push(Message::Tool {
                tool_call_id: turn.tool_calls[0].id.clone(),
                content: result.to_string(),
            });
            request(context(), messages)
        };
        let yes = answered(json!({"answer": {"confirmed": true}, "by": "Husam"}));
        let (said, _) = run(&m, &yes).await;
        assert_eq!(said.tool_calls[0].name, "send_message");
        assert_eq!(
            args(&said, 0),
            json!({"space": "Family", "text": "Deploying api 1.2, as Husam confirmed."})
        );
        let no = answered(json!({"answer": {"confirmed": false, "note": "freeze"}, "by": "Dana"}));
        let (said, _) = run(&m, &no).await;
        assert_eq!(
            args(&said, 0)["text"],
            "Not deploying api 1.2: Dana did not confirm ({\"confirmed\":false,\"note\":\"freeze\"})."
        );
        let late = answered(json!({"error": "nobody answered in time"}));
        let (said, _) = run(&m, &late).await;
        assert_eq!(
            args(&said, 0)["text"],
            "Not deploying api 1.2: nobody answered in time"
        );
        // After saying it, the cycle ends.
        let mut after = late.messages.clone();
        after.push(said.message());
        after.push(Message::Tool {
            tool_call_id: said.tool_calls[0].id.clone(),
            content: "{}".into(),
        });
        let (end, _) = run(&m, &request(context(), after)).await;
        assert_eq!(end.text.as_deref(), Some("Done."));
    }

    #[tokio::test]
    async fn remembers_and_recalls() {
        let m = Scripted::new("reviewer");
        let (turn, _) = run(
            &m,
            &request(
                context(),
                vec![Message::user(inbox_line(
                    "Family",
                    "Husam",
                    "Remember that the wifi password is hunter2.",
                ))],
            ),
        )
        .await;
        assert_eq!(turn.tool_calls[0].name, "set_memories");
        let args: serde_json::Value = serde_json::from_str(&turn.tool_calls[0].arguments).unwrap();
        assert_eq!(args["memories"]["note-1"], "the wifi password is hunter2");
        let with_memory = format!(
            "{}Memories:\n{}\n",
            context(),
            memory_line("note-1", "the wifi password is hunter2")
        );
        let (turn, _) = run(
            &m,
            &request(
                with_memory,
                vec![Message::user(inbox_line(
                    "Family",
                    "Husam",
                    "What do you remember?",
                ))],
            ),
        )
        .await;
        let args: serde_json::Value = serde_json::from_str(&turn.tool_calls[0].arguments).unwrap();
        assert_eq!(
            args["text"],
            "Husam, I remember: the wifi password is hunter2."
        );
    }

    #[tokio::test]
    async fn ends_the_cycle_after_its_tools_ran() {
        let m = Scripted::new("reviewer");
        let msgs = vec![
            Message::user(inbox_line("Family", "Husam", "hi")),
            Message::Assistant {
                content: None,
                tool_calls: vec![call(0, "send_message", json!({}))],
            },
            Message::Tool {
                tool_call_id: "call_0".into(),
                content: "{}".into(),
            },
        ];
        let (turn, _) = run(&m, &request(context(), msgs)).await;
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.text.as_deref(), Some("Done."));
    }

    #[tokio::test]
    async fn text_whose_case_mapping_changes_length_is_handled() {
        // `İ` lower-cases to two characters: byte offsets of the lower-cased text do not fit
        // the original (this panicked).
        let m = Scripted::new("reviewer");
        let inbox = inbox_line("Family", "Husam", "İ remember that €");
        let (turn, _) = run(&m, &request(context(), vec![Message::user(inbox)])).await;
        assert_eq!(turn.tool_calls[0].name, "set_memories");
        assert_eq!(args(&turn, 0)["memories"]["note-1"], "€");
        assert_eq!(remember_request("REMEMBER THAT x"), Some("x".into()));
        assert_eq!(remember_request("İİİ"), None);
    }

    #[tokio::test]
    async fn the_preview_is_not_answered() {
        let m = Scripted::new("reviewer");
        let msgs = vec![
            Message::user(inbox_line("Family", "Husam", "quick message 1")),
            Message::Assistant {
                content: None,
                tool_calls: vec![call(0, "send_message", json!({}))],
            },
            Message::Tool {
                tool_call_id: "call_0".into(),
                content: "{}".into(),
            },
        ];
        let preview = crate::model::format::preview(
            &[InboxLine::space("Family", "Husam", "quick message 2")],
            1,
        );
        let (turn, _) = run(&m, &request(format!("{}\n{preview}", context()), msgs)).await;
        assert!(turn.tool_calls.is_empty(), "{turn:?}");
        assert_eq!(turn.text.as_deref(), Some("Done."));
    }

    #[tokio::test]
    async fn a_mention_makes_the_mentioned_agent_answer() {
        let m = Scripted::new("reviewer");
        let inbox = InboxLine::space("Engineering", "Husam", "please look at PR 12")
            .to(Some("reviewer"))
            .render();
        let (turn, _) = run(&m, &request(context(), vec![Message::user(inbox.clone())])).await;
        assert_eq!(turn.tool_calls[0].name, "send_message");
        assert_eq!(args(&turn, 0)["space"], "Engineering");
        let oncall = Scripted::new("oncall");
        let (turn, _) = run(&oncall, &request(context(), vec![Message::user(inbox)])).await;
        assert_eq!(turn.tool_calls[0].name, "skip");
    }

    #[tokio::test]
    async fn agents_are_answered_only_when_they_mention() {
        let m = Scripted::new("reviewer");
        // oncall quoting a text that names reviewer does not address reviewer.
        let quoted = inbox_line(
            "Engineering",
            "oncall",
            "Husam, you said: \"reviewer and oncall, please both say hi\"",
        );
        let (turn, _) = run(&m, &request(context(), vec![Message::user(quoted)])).await;
        assert_eq!(turn.tool_calls[0].name, "skip");
        let asked = InboxLine::space("Engineering", "oncall", "can you review?")
            .to(Some("reviewer"))
            .render();
        let (turn, _) = run(&m, &request(context(), vec![Message::user(asked)])).await;
        assert_eq!(turn.tool_calls[0].name, "send_message");
    }

    #[tokio::test]
    async fn service_events_and_plans_are_announced_in_the_first_space() {
        let m = Scripted::new("reviewer");
        let inbox = format!(
            "{} {{\"build\":7}}",
            InboxLine {
                source: Source::Service,
                sender: "dev".into(),
                mention: None,
                text: "deploy finished".into()
            }
            .render()
        );
        let (turn, _) = run(&m, &request(context(), vec![Message::user(inbox)])).await;
        assert_eq!(turn.tool_calls[0].name, "send_message");
        assert_eq!(args(&turn, 0)["space"], "engineering");
        assert_eq!(args(&turn, 0)["text"], "dev reports: deploy finished");
    }

    #[tokio::test]
    async fn a_summary_request_gets_a_summary() {
        let m = Scripted::new("reviewer");
        let (system, text) = crate::worker::compaction::summary_prompt(
            Some("before"),
            &[Message::user(inbox_line("Family", "Husam", "dinner at 8"))],
        );
        let mut req = request(String::new(), vec![Message::user(text)]);
        req.system = system;
        req.tool_choice = ToolChoice::None;
        let (turn, _) = run(&m, &req).await;
        assert!(turn.tool_calls.is_empty());
        assert_eq!(
            turn.text.as_deref(),
            Some("Earlier: Husam said \"dinner at 8\"")
        );
    }

    proptest! {
        #[test]
        fn any_inbox_and_any_summary_input_are_handled(
            lines in proptest::collection::vec((hostile_text(), hostile_text(), hostile_text()), 0..6),
            raw in hostile_text(),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let m = Scripted::new("reviewer");
            let mut inbox: Vec<String> = lines
                .iter()
                .map(|(space, sender, text)| inbox_line(space, sender, text))
                .collect();
            inbox.push(raw.clone());
            let inbox = inbox.join("\n");
            let tools = crate::worker::tools::specs(&crate::crd::BuiltinTool::all());
            let mut req = request(context(), vec![Message::user(inbox.clone())]);
            req.tools = tools;
            let summary_req = |system, text| {
                let mut r = request(String::new(), vec![Message::user(text)]);
                r.system = system;
                r.tool_choice = ToolChoice::None;
                r
            };
            let turn = rt.block_on(m.complete(&req, &mut |_| {})).unwrap();
            prop_assert!(!turn.tool_calls.is_empty());
            for c in &turn.tool_calls {
                prop_assert!(serde_json::from_str::<serde_json::Value>(&c.arguments).is_ok());
            }
            let (system, text) = crate::worker::compaction::summary_prompt(
                Some(&raw),
                &[Message::user(inbox)],
            );
            let turn = rt.block_on(m.complete(&summary_req(system, text), &mut |_| {})).unwrap();
            prop_assert!(turn.text.is_some_and(|t| !t.is_empty()));
        }
    }
}
