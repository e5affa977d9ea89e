//! Server-sent events, parsed from the bytes of a stream as they arrive.
//!
//! Bytes are kept until a line is complete, and only whole lines are decoded: a character
//! split between two network chunks is decoded once both halves are in (a per-chunk decode
//! turned each half into U+FFFD). Lines end with LF, CR or CRLF, as the SSE specification
//! says, also when a CRLF is split between two chunks.

/// One SSE event.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SseEvent {
    /// `event:` (default `message`).
    pub event: String,
    /// `data:` lines joined by newlines.
    pub data: String,
    /// `id:`, if the event had one.
    pub id: Option<String>,
}

/// Splits a byte stream into SSE events (comments and `retry:` are dropped).
#[derive(Default)]
pub struct SseParser {
    /// The start of a line whose end has not arrived yet.
    partial: Vec<u8>,
    /// The last line ended with a CR: an LF that comes next is part of that line end.
    after_cr: bool,
    /// The event being read: its `event:`, `data:` lines (each followed by a newline), `id:`.
    event: String,
    data: Option<String>,
    id: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            if self.partial.is_empty() {
                out.extend(self.line(&rest[..end]));
            } else {
                self.partial.extend_from_slice(&rest[..end]);
                let line = std::mem::take(&mut self.partial);
                out.extend(self.line(&line));
            }
            let crlf = rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n');
            self.after_cr = rest[end] == b'\r' && end + 1 == rest.len();
            rest = &rest[end + if crlf { 2 } else { 1 }..];
        }
        self.partial.extend_from_slice(rest);
        out
    }

    /// Takes one complete line; an empty line ends the event.
    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                let data = self.data.get_or_insert_with(String::new);
                data.push_str(value);
                data.push('\n');
            }
            // The specification ignores an id holding NUL.
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
        None
    }

    /// The event read so far, if it has data (an event without is dropped).
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        let id = self.id.take();
        let mut data = self.data.take()?;
        data.pop();
        Some(SseEvent {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data,
            id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sse_events_are_parsed_across_chunks() {
        let mut p = SseParser::default();
        assert!(p
            .feed(b"retry: 2000\n: connected\n\nevent: mess")
            .is_empty());
        let evs = p.feed(b"age\ndata: {\"a\":1}\nid: 5-0\n\nevent: delta\r\ndata: x\r\n\r\n");
        assert_eq!(
            evs,
            vec![
                SseEvent {
                    event: "message".into(),
                    data: "{\"a\":1}".into(),
                    id: Some("5-0".into())
                },
                SseEvent {
                    event: "delta".into(),
                    data: "x".into(),
                    id: None
                },
            ]
        );
        assert_eq!(p.feed(b"data: a\ndata: b\n\n")[0].data, "a\nb");
    }

    #[test]
    fn a_character_split_between_chunks_is_decoded_whole() {
        let wire = "data: é€😀\n\n".as_bytes();
        let mut p = SseParser::default();
        let mut got = Vec::new();
        for b in wire {
            got.extend(p.feed(std::slice::from_ref(b)));
        }
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data, "é€😀");
    }

    #[test]
    fn a_crlf_split_between_chunks_is_one_line_end() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: a\r").is_empty());
        assert!(p.feed(b"").is_empty());
        assert!(
            p.feed(b"\ndata: b\r").is_empty(),
            "no blank line in \\r|\\n"
        );
        assert_eq!(
            p.feed(b"\r")[0].data,
            "a\nb",
            "CR CR: a line and a blank line"
        );
        assert_eq!(p.feed(b"\ndata: c\n\n")[0].data, "c", "LF after a CR");
    }

    /// Text of up to `n` arbitrary chars (NUL, combining marks, RTL, emoji…) without `not`.
    fn text(n: usize, not: &'static [char]) -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<char>(), 0..n)
            .prop_map(move |cs| cs.into_iter().filter(|c| !not.contains(c)).collect())
    }

    fn event() -> impl Strategy<Value = SseEvent> {
        (
            text(12, &['\r', '\n']),
            text(40, &['\r']),
            proptest::option::of(text(12, &['\r', '\n', '\0'])),
        )
            .prop_map(|(event, data, id)| SseEvent {
                event: if event.is_empty() {
                    "message".into()
                } else {
                    event
                },
                data,
                id,
            })
    }

    /// `events` on the wire, each line ended by LF, CR or CRLF in turn from `ends`, with
    /// comments and retry lines between them.
    fn encode(events: &[SseEvent], ends: &[u8]) -> Vec<u8> {
        let mut lines = vec![":ok".to_string(), "retry: 1000".into(), String::new()];
        for e in events {
            lines.push(format!("event: {}", e.event));
            if let Some(id) = &e.id {
                lines.push(format!("id: {id}"));
            }
            lines.extend(e.data.split('\n').map(|l| format!("data: {l}")));
            lines.push(": keep-alive".into());
            lines.push(String::new());
        }
        let mut out: Vec<u8> = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            out.extend_from_slice(l.as_bytes());
            let end: &[u8] = match ends[i % ends.len()] % 3 {
                // CR, then an empty line ended by LF, would be one CRLF.
                0 if l.is_empty() && out.ends_with(b"\r") => b"\r",
                0 => b"\n",
                1 => b"\r",
                _ => b"\r\n",
            };
            out.extend_from_slice(end);
        }
        out
    }

    proptest! {
        #[test]
        fn events_split_anywhere_parse_to_the_events_sent(
            events in proptest::collection::vec(event(), 0..6),
            ends in proptest::collection::vec(any::<u8>(), 1..8),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..12),
        ) {
            let wire = encode(&events, &ends);
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
            cuts.push(wire.len());
            cuts.sort_unstable();
            let mut parser = SseParser::default();
            let mut got = Vec::new();
            let mut from = 0;
            for cut in cuts {
                got.extend(parser.feed(&wire[from..cut]));
                from = cut;
            }
            prop_assert_eq!(got, events);
        }
    }
}
