//! The `scripted` provider: a deterministic model for demos and tests. No network, no key;
//! it reads the same system prompt and inbox message a real model gets.
//!
//! For each inbox line that is addressed to it (its name appears in the text) or that comes
//! from a space where it is the only agent, it answers in that space with `send_message`:
//! - `remember <fact>` → stores the fact with `set_memories` and confirms;
//! - a text asking what it remembers → lists its memories from the system prompt;
//! - anything else → acknowledges who said what.
//!
//! A plan that comes due (`[Plan] plan NAME: "instruction"`) is announced in its first space.
//!
//! When nothing is addressed to it, it calls `skip`. After its tool calls have run it ends the
//! cycle with a short text.

use async_trait::async_trait;
use serde_json::json;

use super::format::{parse_inbox, parse_memories, space_agents, space_names};
use super::{Delta, Message, Model, ModelError, Request, ToolCall, Turn, Usage};

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

    fn addressed(&self, system: &str, space: &str, text: &str) -> bool {
        let me = self.name.to_lowercase();
        let mentioned = text
            .to_lowercase()
            .split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_')
            .any(|w| w == me);
        let only_agent =
            space_agents(system, space).is_some_and(|a| a.len() == 1 && a[0] == self.name);
        mentioned || only_agent
    }

    fn plan(&self, system: &str, inbox: &str) -> Vec<ToolCall> {
        let mut calls = Vec::new();
        for line in parse_inbox(inbox) {
            if line.space == "Plan" {
                if let Some(space) = space_names(system).into_iter().next() {
                    calls.push(call(
                        calls.len(),
                        "send_message",
                        json!({ "space": space, "text": format!("It is time ({}): {}", line.sender, line.text) }),
                    ));
                }
                continue;
            }
            if line.sender == self.name || !self.addressed(system, &line.space, &line.text) {
                continue;
            }
            let lower = line.text.to_lowercase();
            let reply = if let Some(fact) = remember_request(&line.text) {
                let key = format!("note-{}", calls.len() + parse_memories(system).len() + 1);
                calls.push(call(
                    calls.len(),
                    "set_memories",
                    json!({ "memories": { key: fact } }),
                ));
                format!("Noted, {}: I will remember that {fact}.", line.sender)
            } else if lower.contains("what do you remember") {
                let memories = parse_memories(system);
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
                json!({ "space": line.space, "text": reply }),
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

fn remember_request(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let at = lower
        .find("remember that ")
        .map(|i| i + "remember that ".len())
        .or_else(|| lower.strip_prefix("remember ").map(|_| "remember ".len()))?;
    let fact = text[at..].trim().trim_end_matches(['.', '!']);
    (!fact.is_empty()).then(|| fact.to_string())
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
        let turn = match request.messages.last() {
            Some(Message::User { content }) => Turn {
                text: None,
                tool_calls: self.plan(&request.system, content),
                usage: Usage::default(),
            },
            _ => Turn {
                text: Some("Done.".into()),
                tool_calls: Vec::new(),
                usage: Usage::default(),
            },
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
        let input = (request.system.len() as u64).div_ceil(4)
            + request
                .messages
                .iter()
                .map(Message::estimate_tokens)
                .sum::<u64>();
        let output = turn.message().estimate_tokens();
        Ok(Turn {
            usage: Usage { input, output },
            ..turn
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::format::{inbox_line, memory_line, space_line};
    use crate::model::ToolChoice;

    fn request(system: String, messages: Vec<Message>) -> Request {
        Request {
            system,
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
        }
    }

    async fn run(model: &Scripted, req: &Request) -> (Turn, Vec<Delta>) {
        let mut deltas = Vec::new();
        let turn = model.complete(req, &mut |d| deltas.push(d)).await.unwrap();
        (turn, deltas)
    }

    fn system() -> String {
        format!(
            "You are reviewer.\nSpaces:\n{}\n{}\n",
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
        let (turn, deltas) = run(&m, &request(system(), vec![Message::user(inbox)])).await;
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
        let (turn, _) = run(&m, &request(system(), vec![Message::user(not_me)])).await;
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].name, "skip");
    }

    #[tokio::test]
    async fn remembers_and_recalls() {
        let m = Scripted::new("reviewer");
        let (turn, _) = run(
            &m,
            &request(
                system(),
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
            system(),
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
        let (turn, _) = run(&m, &request(system(), msgs)).await;
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.text.as_deref(), Some("Done."));
    }
}
