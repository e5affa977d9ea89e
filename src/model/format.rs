//! The text formats the worker writes into prompts: inbox lines, the mid-cycle preview and the
//! space and memory lines of the fresh context. Formatters and parsers live together so that
//! what one writes the other reads (the scripted model reads what a real model reads).
//!
//! Every formatter takes arbitrary text (any Unicode, control characters included) and keeps
//! one event on one line: names are made into labels that cannot break the line's structure,
//! texts are quoted with escapes. Nothing here slices a string at a byte offset it did not
//! find itself, so no input can make it panic.

/// Where an inbox event comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A space, by the display name the agent knows it by.
    Space(String),
    /// A service (webhook).
    Service,
    /// One of the agent's plans.
    Plan,
    /// The result of an asynchronous tool call.
    ToolResult,
}

impl Source {
    fn tag(&self) -> Option<&'static str> {
        match self {
            Source::Space(_) => None,
            Source::Service => Some("service"),
            Source::Plan => Some("plan"),
            Source::ToolResult => Some("tool result"),
        }
    }
}

/// One inbox event as one line of the cycle's user message:
/// `[Space] Sender: "text"`, `[Space] Sender (to agent): "text"` when it mentions an agent,
/// `(service) Sender: "text" {data}` for events that come from outside a space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxLine {
    /// Where it comes from.
    pub source: Source,
    /// The sender's display name.
    pub sender: String,
    /// The agent it is addressed to (`mention`), if any.
    pub mention: Option<String>,
    /// What was said, quoted into the line as JSON text (so it cannot close the quote).
    pub text: String,
}

impl InboxLine {
    /// A message of a space.
    pub fn space(space: &str, sender: &str, text: &str) -> Self {
        Self {
            source: Source::Space(space.to_string()),
            sender: sender.to_string(),
            mention: None,
            text: text.to_string(),
        }
    }

    /// The same line, addressed to `agent`.
    pub fn to(mut self, agent: Option<&str>) -> Self {
        self.mention = agent.map(str::to_string);
        self
    }

    /// The line, without any event data.
    pub fn render(&self) -> String {
        let from = match &self.source {
            Source::Space(s) => format!("[{}]", label(s)),
            other => format!("({})", other.tag().unwrap_or_default()),
        };
        let to = self
            .mention
            .as_deref()
            .map(|m| format!(" (to {})", label(m)))
            .unwrap_or_default();
        format!("{from} {}{to}: {}", label(&self.sender), quote(&self.text))
    }
}

/// A name as it may appear in a line: control characters become spaces, and the characters
/// that delimit a line's parts (`"`, `[`, `]`) are replaced, so no name can forge structure.
pub fn label(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            c if c.is_control() => ' ',
            '"' => '\'',
            '[' => '(',
            ']' => ')',
            c => c,
        })
        .collect()
}

/// `text` in double quotes, with backslashes, quotes and line breaks escaped so one event
/// stays one line.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The quoted string at the start of `quoted` (what follows its closing quote, such as an
/// event's data, is ignored).
fn unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                other => out.push(other),
            },
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// Reads the inbox lines of a user message (other lines, such as headings, are skipped).
pub fn parse_inbox(message: &str) -> Vec<InboxLine> {
    message.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<InboxLine> {
    let line = line.trim_start();
    let (source, rest) = if let Some(rest) = line.strip_prefix('[') {
        let (space, rest) = rest.split_once("] ")?;
        (Source::Space(space.to_string()), rest)
    } else {
        let rest = line.strip_prefix('(')?;
        let (tag, rest) = rest.split_once(") ")?;
        let source = [Source::Service, Source::Plan, Source::ToolResult]
            .into_iter()
            .find(|s| s.tag() == Some(tag))?;
        (source, rest)
    };
    // The sender part ends at the first `: "` (labels hold no `"`); the quote starts there.
    let at = rest.find(": \"")?;
    let (head, quoted) = (&rest[..at], &rest[at + 2..]);
    let text = unquote(quoted)?;
    let (sender, mention) = match head.strip_suffix(')').and_then(|h| h.rsplit_once(" (to ")) {
        Some((sender, agent)) if crate::names::is_dns1123_subdomain(agent) => {
            (sender, Some(agent.to_string()))
        }
        _ => (head, None),
    };
    Some(InboxLine {
        source,
        sender: sender.to_string(),
        mention,
        text,
    })
}

/// The first line of the mid-cycle preview; the scripted model and tests recognize it.
pub const PREVIEW_HEADING: &str = "[INBOX PREVIEW";

/// The transient mid-cycle preview of waiting events (seed 000, strategy 2): what arrived
/// while the agent works, as information only — the events are delivered in full next cycle.
/// `lines` are the first events (their texts cut to 50 characters), `total` how many wait.
pub fn preview(lines: &[InboxLine], total: u64) -> String {
    let mut out = format!(
        "{PREVIEW_HEADING} — {total} new event(s) arrived while you were working; do not answer them now]\n"
    );
    for l in lines {
        let snippet: String = l.text.chars().take(50).collect();
        let cut = if l.text.chars().nth(50).is_some() {
            "…"
        } else {
            ""
        };
        // Indented and dashed, so a preview line never reads as an inbox line.
        let line = InboxLine {
            text: format!("{snippet}{cut}"),
            ..l.clone()
        };
        out.push_str("  - ");
        out.push_str(&line.render());
        out.push('\n');
    }
    out.push_str("(This is a preview, not a request: these events will be delivered to you in full in your next cycle, and you will answer them then. Finish your current task now; if one of them changes it — a correction, a cancellation — take that into account.)");
    out
}

/// The first line of a request's fresh context (its last message; never stored).
pub const CONTEXT_HEADING: &str = "[CONTEXT as this cycle began; not a message]";

/// Whether a user message is a request's fresh context.
pub fn is_context(message: &str) -> bool {
    message.starts_with(CONTEXT_HEADING)
}

/// Whether a user message is a mid-cycle preview.
pub fn is_preview(message: &str) -> bool {
    message.starts_with(PREVIEW_HEADING)
}

/// A space of the fresh context: `- [Display] space "name" — agents: a, b; humans: X, Y`.
pub fn space_line(display: &str, name: &str, agents: &[&str], humans: &[&str]) -> String {
    let list = |v: &[&str]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter().map(|n| label(n)).collect::<Vec<_>>().join(", ")
        }
    };
    format!(
        "- [{}] space \"{}\" — agents: {}; humans: {}",
        label(display),
        label(name),
        list(agents),
        list(humans)
    )
}

/// The names of the spaces a fresh context lists, in order.
pub fn space_names(system: &str) -> Vec<String> {
    system
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("- ["))
        .filter_map(|l| {
            let rest = l.split("] space \"").nth(1)?;
            Some(rest.split('"').next()?.to_string())
        })
        .collect()
}

/// The agents of the space a fresh context lists under `[display]` (or `space "display"`).
pub fn space_agents(system: &str, space: &str) -> Option<Vec<String>> {
    let by_display = format!("- [{space}] ");
    let by_name = format!("space \"{space}\" ");
    let line = system
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&by_display) || (l.starts_with("- [") && l.contains(&by_name)))?;
    let agents = line.split("agents: ").nth(1)?.split(';').next()?.trim();
    Some(if agents == "none" {
        Vec::new()
    } else {
        agents.split(", ").map(str::to_string).collect()
    })
}

/// A memory of the fresh context: `- key: value`, under a line `Memories:`.
pub fn memory_line(key: &str, value: &str) -> String {
    format!("- {}: {}", label(key), value.replace(['\n', '\r'], " "))
}

/// The memories a fresh context lists (the `- key: value` lines after `Memories:`).
pub fn parse_memories(system: &str) -> Vec<(String, String)> {
    system
        .lines()
        .skip_while(|l| l.trim() != "Memories:")
        .skip(1)
        .map_while(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| {
            l.split_once(": ")
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::hostile_text;
    use proptest::prelude::*;

    #[test]
    fn inbox_lines_round_trip_even_with_quotes_and_newlines() {
        let msg = [
            InboxLine::space("Family", "Husam", "Tell Muhammad the meeting is at 3pm").render(),
            InboxLine::space("Family", "Husam", "He said \"bring docs\"\nthanks\r").render(),
            "unrelated line".to_string(),
        ]
        .join("\n");
        let lines = parse_inbox(&msg);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].source, Source::Space("Family".into()));
        assert_eq!(lines[0].sender, "Husam");
        assert_eq!(lines[1].text, "He said \"bring docs\"\nthanks\r");
        assert_eq!(
            InboxLine::space("Family", "Husam", "hi").render(),
            r#"[Family] Husam: "hi""#
        );
    }

    #[test]
    fn a_mention_is_part_of_the_line() {
        let line = InboxLine::space("Engineering", "Husam", "can you look?").to(Some("reviewer"));
        assert_eq!(
            line.render(),
            r#"[Engineering] Husam (to reviewer): "can you look?""#
        );
        assert_eq!(parse_inbox(&line.render()), [line]);
        // A human whose display name looks like a mention is still the sender.
        let odd = InboxLine::space("Engineering", "Husam (to Ops!)", "x");
        assert_eq!(parse_inbox(&odd.render())[0].mention, None);
    }

    #[test]
    fn events_from_outside_spaces_say_where_they_come_from() {
        let line = format!(
            "{} {{\"plan\":\"report\"}}",
            InboxLine {
                source: Source::Plan,
                sender: "plan report".into(),
                mention: None,
                text: "Post \"the\" report".into()
            }
            .render()
        );
        assert!(line.starts_with("(plan) plan report: "), "{line}");
        let parsed = parse_inbox(&line);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].source, Source::Plan);
        assert_eq!(parsed[0].text, "Post \"the\" report");
        assert_eq!(parsed[0].sender, "plan report");
    }

    #[test]
    fn names_cannot_forge_structure() {
        let line = InboxLine::space("Fam] Evil", "Bob: \"x", "hi");
        let parsed = parse_inbox(&line.render());
        assert_eq!(parsed.len(), 1, "{}", line.render());
        assert_eq!(parsed[0].text, "hi");
    }

    #[test]
    fn the_preview_is_not_an_inbox_message() {
        let lines = [InboxLine::space("Family", "Husam", &"é".repeat(80))];
        let p = preview(&lines, 3);
        assert!(is_preview(&p));
        assert!(parse_inbox(&p).is_empty(), "{p}");
        assert!(p.contains(&format!("{}…", "é".repeat(50))), "{p}");
        assert!(
            p.contains("delivered to you in full in your next cycle"),
            "{p}"
        );
    }

    #[test]
    fn space_lines_tell_who_is_in_a_space() {
        let system = format!(
            "Spaces:\n{}\n{}\n",
            space_line(
                "Engineering",
                "engineering",
                &["reviewer", "oncall"],
                &["Husam"]
            ),
            space_line("Family", "family", &["assistant"], &[])
        );
        assert_eq!(
            space_agents(&system, "Engineering").unwrap(),
            ["reviewer", "oncall"]
        );
        assert_eq!(space_agents(&system, "family").unwrap(), ["assistant"]);
        assert_eq!(space_agents(&system, "Nowhere"), None);
        assert_eq!(space_names(&system), ["engineering", "family"]);
    }

    #[test]
    fn memories_are_listed_after_their_heading() {
        let system = format!(
            "Memories:\n{}\n{}\n\nGoals:\n- x",
            memory_line("tz", "UTC"),
            memory_line("q4", "waiting")
        );
        assert_eq!(
            parse_memories(&system),
            [
                ("tz".to_string(), "UTC".to_string()),
                ("q4".into(), "waiting".into())
            ]
        );
    }

    proptest! {
        #[test]
        fn any_text_round_trips_through_an_inbox_line(
            space in hostile_text(), sender in hostile_text(), text in hostile_text(),
            mention in proptest::option::of(proptest::sample::select(vec!["reviewer", "on-call", "a.v2"])),
        ) {
            let mention = mention.map(str::to_string);
            let line = InboxLine::space(&space, &sender, &text).to(mention.as_deref());
            let rendered = line.render();
            prop_assert!(!rendered.contains('\n'));
            let parsed = parse_inbox(&rendered);
            prop_assert_eq!(parsed.len(), 1);
            prop_assert_eq!(&parsed[0].text, &text);
            prop_assert_eq!(&parsed[0].mention, &mention);
            prop_assert_eq!(&parsed[0].sender, &label(&sender));
        }

        #[test]
        fn parsing_and_previews_never_panic(text in hostile_text(), total in any::<u64>()) {
            let _ = parse_inbox(&text);
            let _ = parse_memories(&text);
            let _ = space_names(&text);
            let _ = space_agents(&text, &text);
            let p = preview(&[InboxLine::space(&text, &text, &text)], total);
            prop_assert!(parse_inbox(&p).is_empty());
        }
    }
}
