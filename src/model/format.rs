//! The text formats the worker writes into prompts: inbox lines and the space lines of the
//! system prompt. Formatters and parsers live together so that what one writes the other reads.

/// One inbox event as a line of the cycle's user message: `[Space] Sender: "text"`.
pub fn inbox_line(space: &str, sender: &str, text: &str) -> String {
    format!("[{space}] {sender}: {}", quote(text))
}

/// `text` in double quotes, inner quotes and newlines escaped so one event stays one line.
fn quote(text: &str) -> String {
    let escaped = text
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("\"{escaped}\"")
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
                other => out.push(other),
            },
            '"' => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// An inbox line read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxLine {
    /// The space as written in brackets.
    pub space: String,
    /// The sender's display name.
    pub sender: String,
    /// The text.
    pub text: String,
}

/// Reads the inbox lines of a user message (other lines are skipped).
pub fn parse_inbox(message: &str) -> Vec<InboxLine> {
    message
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix('[')?;
            let (space, rest) = rest.split_once("] ")?;
            let (sender, quoted) = rest.split_once(": ")?;
            Some(InboxLine {
                space: space.to_string(),
                sender: sender.to_string(),
                text: unquote(quoted.trim())?,
            })
        })
        .collect()
}

/// A space of the system prompt: `- [Display] space "name" — agents: a, b; humans: X, Y`.
pub fn space_line(display: &str, name: &str, agents: &[&str], humans: &[&str]) -> String {
    let list = |v: &[&str]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "- [{display}] space \"{name}\" — agents: {}; humans: {}",
        list(agents),
        list(humans)
    )
}

/// The names of the spaces a system prompt lists, in order.
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

/// The agents of the space a system prompt lists under `[display]` (or `space "display"`).
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

/// A memory of the system prompt: `- key: value`, under a line `Memories:`.
pub fn memory_line(key: &str, value: &str) -> String {
    format!("- {key}: {}", value.replace('\n', " "))
}

/// The memories a system prompt lists (the `- key: value` lines after `Memories:`).
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

    #[test]
    fn inbox_lines_round_trip_even_with_quotes_and_newlines() {
        let msg = [
            inbox_line("Family", "Husam", "Tell Muhammad the meeting is at 3pm"),
            inbox_line("Family", "Husam", "He said \"bring docs\"\nthanks"),
            "unrelated line".to_string(),
        ]
        .join("\n");
        let lines = parse_inbox(&msg);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].space, "Family");
        assert_eq!(lines[0].sender, "Husam");
        assert_eq!(lines[1].text, "He said \"bring docs\"\nthanks");
        assert_eq!(
            inbox_line("Family", "Husam", "hi"),
            r#"[Family] Husam: "hi""#
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
    fn event_data_after_the_text_is_ignored() {
        let line = format!(
            "{} {{\"plan\":\"report\"}}",
            inbox_line("Plan", "plan report", "Post \"the\" report")
        );
        let parsed = parse_inbox(&line);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].text, "Post \"the\" report");
        assert_eq!(parsed[0].sender, "plan report");
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
}
