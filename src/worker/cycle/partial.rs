//! The one scanner of a tool call's JSON arguments while they stream (seed 000 "Stream
//! Processing"): a string field of the top-level object, decoded as far as it has arrived.
//! `send_message` streams its `text` with it, to the space its `space` names.

/// A string field of JSON arguments that may still be arriving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialString {
    /// The decoded value so far. It only grows as more arrives: an escape cut by the end of
    /// the input is left out until it is complete.
    pub value: String,
    /// Whether the closing quote has arrived: the value is final.
    pub complete: bool,
}

/// The string field `field` of the top-level object of `json`, a JSON object text that may
/// be cut anywhere. `None` until the field's value has started, and when the value is not a
/// string or what comes before it is not a JSON object. Fields of nested objects, and names
/// that appear inside other values, are never mistaken for it.
pub fn partial_string(json: &str, field: &str) -> Option<PartialString> {
    let mut s = Scanner(json.chars());
    s.skip_whitespace();
    s.eat('{')?;
    loop {
        s.skip_whitespace();
        s.eat('"')?;
        let key = s.string()?;
        if !key.complete {
            return None;
        }
        s.skip_whitespace();
        s.eat(':')?;
        s.skip_whitespace();
        if key.value == field {
            s.eat('"')?;
            return s.string();
        }
        s.skip_value()?;
        s.skip_whitespace();
        s.eat(',')?;
    }
}

/// A cursor over the JSON text.
struct Scanner<'a>(std::str::Chars<'a>);

impl Scanner<'_> {
    fn peek(&self) -> Option<char> {
        self.0.clone().next()
    }

    fn eat(&mut self, c: char) -> Option<()> {
        (self.peek()? == c).then(|| {
            self.0.next();
        })
    }

    fn skip_whitespace(&mut self) {
        while self
            .peek()
            .is_some_and(|c| matches!(c, ' ' | '\t' | '\n' | '\r'))
        {
            self.0.next();
        }
    }

    /// The rest of a string whose opening quote was read. `None` only for an escape that can
    /// never be read (more input would not help); the value then ends before it.
    fn string(&mut self) -> Option<PartialString> {
        let mut value = String::new();
        let complete = loop {
            match self.0.next() {
                None => break false,
                Some('"') => break true,
                Some('\\') => match self.0.next() {
                    None => break false,
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('r') => value.push('\r'),
                    Some('b') => value.push('\u{8}'),
                    Some('f') => value.push('\u{c}'),
                    Some('u') => match self.unicode() {
                        Ok(c) => value.push(c),
                        Err(Hex::Cut | Hex::Bad) => break false,
                    },
                    Some(other) => value.push(other),
                },
                Some(c) => value.push(c),
            }
        };
        Some(PartialString { value, complete })
    }

    /// The character of a `\u` escape whose `\u` was read: a surrogate pair needs both
    /// halves (a lone half stands for U+FFFD).
    fn unicode(&mut self) -> Result<char, Hex> {
        let unit = self.hex4()?;
        if !(0xD800..0xDC00).contains(&unit) {
            return Ok(char::from_u32(unit).unwrap_or('\u{fffd}'));
        }
        let mut ahead = Scanner(self.0.clone());
        match (ahead.0.next(), ahead.0.next()) {
            (Some('\\'), Some('u')) => match ahead.hex4() {
                Ok(low) if (0xDC00..0xE000).contains(&low) => {
                    self.0 = ahead.0;
                    Ok(
                        char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                            .unwrap_or('\u{fffd}'),
                    )
                }
                Err(Hex::Cut) => Err(Hex::Cut),
                _ => Ok('\u{fffd}'),
            },
            (None, _) | (Some('\\'), None) => Err(Hex::Cut),
            _ => Ok('\u{fffd}'),
        }
    }

    /// The four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u32, Hex> {
        let mut v = 0;
        for _ in 0..4 {
            let d = self
                .0
                .next()
                .ok_or(Hex::Cut)?
                .to_digit(16)
                .ok_or(Hex::Bad)?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// Skips one whole value; `None` when it has not fully arrived.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            '"' => {
                self.0.next();
                self.string().filter(|s| s.complete).map(|_| ())
            }
            '{' | '[' => {
                let mut depth = 0u32;
                loop {
                    match self.0.next()? {
                        '{' | '[' => depth += 1,
                        '}' | ']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                        '"' => {
                            self.string().filter(|s| s.complete)?;
                        }
                        _ => {}
                    }
                }
            }
            // A number, true, false or null: complete once something follows it.
            _ => loop {
                match self.peek()? {
                    ',' | '}' | ']' | ' ' | '\t' | '\n' | '\r' => return Some(()),
                    _ => {
                        self.0.next();
                    }
                }
            },
        }
    }
}

/// Why four hex digits of a `\u` escape could not be read.
enum Hex {
    /// The input ended before them (more may arrive).
    Cut,
    /// Something else stands there.
    Bad,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The streamed text of a `send_message` call, as the cycle reads it.
    fn partial_text(arguments: &str) -> Option<String> {
        partial_string(arguments, "text").map(|t| t.value)
    }

    #[test]
    fn partial_text_follows_the_stream() {
        assert_eq!(partial_text(r#"{"spa"#), None);
        assert_eq!(
            partial_text(r#"{"space":"Family","text":"Hi Hu"#).as_deref(),
            Some("Hi Hu")
        );
        assert_eq!(
            partial_text(r#"{"text": "a \"b\"\nc\"#).as_deref(),
            Some("a \"b\"\nc")
        );
        assert_eq!(
            partial_text(r#"{"text":"done","space":"x"}"#).as_deref(),
            Some("done")
        );
        assert_eq!(
            partial_text(r#"{"text":"caf\u00e9"#).as_deref(),
            Some("café")
        );
    }

    #[test]
    fn partial_text_waits_for_both_halves_of_a_surrogate_pair() {
        let full = r#"{"text":"a\ud83d\ude00b"}"#;
        let mut seen = String::new();
        for end in 0..=full.len() {
            if let Some(t) = partial_text(&full[..end]) {
                assert!(t.starts_with(&seen), "{seen:?} then {t:?}");
                seen = t;
            }
        }
        assert_eq!(seen, "a😀b");
        assert_eq!(
            partial_text(r#"{"text":"\ud800x"}"#).as_deref(),
            Some("\u{fffd}x")
        );
    }

    #[test]
    fn the_space_is_complete_only_once_its_quote_arrives() {
        let space = |json: &str| partial_string(json, "space");
        assert_eq!(
            space(r#"{"text":"hi","space":"fam"#).map(|s| s.complete),
            Some(false)
        );
        assert_eq!(
            space(r#"{"text":"hi","space":"fam\"ily","#),
            Some(PartialString {
                value: "fam\"ily".into(),
                complete: true
            })
        );
        assert_eq!(space(r#"{"text":"hi","#), None);
    }

    #[test]
    fn only_top_level_fields_count() {
        // A field name inside another value, or a nested field of the same name.
        let json = r#"{"space":"text","wait":{"text":"no","for":[{"type":"any"}]},"n":12,"ok":true,"text":"yes"}"#;
        assert_eq!(partial_text(json).as_deref(), Some("yes"));
        assert_eq!(
            partial_string(json, "space").map(|s| s.value).as_deref(),
            Some("text")
        );
        let quoted = r#"{"mention":"a \"text\": \"x\"","text":"y"}"#;
        assert_eq!(partial_text(quoted).as_deref(), Some("y"));
        // Not a string, or not an object.
        assert_eq!(partial_text(r#"{"text":5}"#), None);
        assert_eq!(partial_text(r#"["text","x"]"#), None);
        // A value still arriving hides what follows it.
        assert_eq!(partial_text(r#"{"n":12"#), None);
        assert_eq!(partial_text(r#"{"wait":{"for":[{"type":"an"#), None);
    }

    /// `value` as a JSON string, every non-ASCII character as a `\u` escape when `ascii`
    /// (surrogate pairs for the astral ones).
    fn encode(value: &str, ascii: bool) -> String {
        if !ascii {
            return serde_json::Value::from(value).to_string();
        }
        let mut out = String::from("\"");
        for c in value.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
                c => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
        }
        out.push('"');
        out
    }

    /// Every prefix of `json` (on character boundaries) and `json` itself: what `field` reads
    /// only grows, is complete only when whole, and ends as `expected`.
    fn streams_as(json: &str, field: &str, expected: &str) -> Result<(), TestCaseError> {
        let mut seen = String::new();
        for (end, _) in json.char_indices().skip(1) {
            if let Some(t) = partial_string(&json[..end], field) {
                prop_assert!(t.value.starts_with(&seen), "{seen:?} then {:?}", t.value);
                if t.complete {
                    prop_assert_eq!(&t.value, expected);
                }
                seen = t.value;
            }
        }
        prop_assert_eq!(
            partial_string(json, field),
            Some(PartialString {
                value: expected.to_string(),
                complete: true
            })
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn streamed_text_only_grows_and_ends_as_sent(text in crate::hostile::hostile_text(), ascii in proptest::bool::ANY) {
            let json = format!("{{\"text\":{}}}", encode(&text, ascii));
            streams_as(&json, "text", &text)?;
        }

        #[test]
        fn streamed_space_and_text_are_read_in_either_order(
            text in crate::hostile::hostile_text(),
            space in crate::hostile::hostile_text(),
            ascii in proptest::bool::ANY,
            space_first in proptest::bool::ANY,
        ) {
            let (t, s) = (encode(&text, ascii), encode(&space, ascii));
            let json = if space_first {
                format!("{{\"space\": {s}, \"text\": {t}, \"mention\": null}}")
            } else {
                format!("{{\"text\":{t},\"wait\":{{\"for\":[{{\"type\":\"any\"}}],\"timeout\":5}},\"space\":{s}}}")
            };
            streams_as(&json, "text", &text)?;
            streams_as(&json, "space", &space)?;
        }
    }
}
