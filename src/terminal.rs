//! Text from others, made safe to show on a terminal.
//!
//! A terminal obeys control characters in what it prints: a message holding
//! `\x1b[2J\x1b]0;PWNED\x07` clears the reader's screen and retitles their window, a C1 `CSI`
//! (U+009B) does the same on terminals that take 8-bit controls, and bidi overrides make text
//! read differently from what it is. Everything that prints text someone else wrote (names,
//! messages, tool names, an error a server sent) prints [`sanitize`]'s output, and nothing else.

use std::fmt::Write as _;

/// How a line break inside the text is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breaks {
    /// As a line break, the next line indented by this many spaces: a continuation line, told
    /// apart from a line of its own.
    Indent(usize),
    /// As a visible `⏎`, keeping the text on one line (a status line redrawn in place).
    Visible,
}

/// Spaces a tab becomes.
const TAB: &str = "    ";

/// `text` with nothing in it that a terminal obeys:
/// - C0 controls and DEL become their visible symbols (`␀`, `␇`, `␛`, `␍`, `␡`…);
/// - C1 controls (U+0080–U+009F) and bidi overrides and isolates (U+202A–U+202E,
///   U+2066–U+2069) become `\u{…}`;
/// - tabs become spaces;
/// - a line break (LF or CRLF) is shown as `breaks` says.
///
/// Everything else (letters of any script, combining marks, emoji, bidi *marks*) is kept.
pub fn sanitize(text: &str, breaks: Breaks) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => match breaks {
                Breaks::Indent(n) => {
                    out.push('\n');
                    out.extend(std::iter::repeat_n(' ', n));
                }
                Breaks::Visible => out.push('⏎'),
            },
            '\t' => out.push_str(TAB),
            '\0'..='\x1f' => out.extend(char::from_u32(0x2400 + u32::from(c))),
            '\x7f' => out.push('␡'),
            '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a terminal would act on: any control but a line feed, and bidi overrides/isolates.
    fn obeyed(c: char) -> bool {
        (c.is_control() && c != '\n')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    }

    #[test]
    fn controls_become_visible() {
        assert_eq!(
            sanitize("\x1b[2J\x1b]0;PWNED\x07", Breaks::Indent(2)),
            "␛[2J␛]0;PWNED␇"
        );
        assert_eq!(
            sanitize("a\0b\x7fc\u{9b}31m\u{85}", Breaks::Visible),
            "a␀b␡c\\u{9b}31m\\u{85}"
        );
        assert_eq!(
            sanitize("\u{202e}txt.exe\u{202c} \u{2067}x\u{2069}", Breaks::Visible),
            "\\u{202e}txt.exe\\u{202c} \\u{2067}x\\u{2069}"
        );
    }

    #[test]
    fn breaks_and_tabs() {
        assert_eq!(
            sanitize("one\ntwo\r\nthree\rfour\tend", Breaks::Indent(2)),
            "one\n  two\n  three␍four    end"
        );
        assert_eq!(sanitize("one\ntwo\r\n", Breaks::Visible), "one⏎two⏎");
        assert_eq!(sanitize("\n", Breaks::Indent(0)), "\n");
    }

    #[test]
    fn text_of_any_script_is_kept() {
        let text = "مرحبا שלום नमस्ते e\u{301} 👩‍👩‍👧 \u{200f}ok\u{200e} 中文";
        assert_eq!(sanitize(text, Breaks::Visible), text);
    }

    fn any_text() -> impl Strategy<Value = String> {
        // Controls, bidi characters and line ends often; any other char too.
        let special = prop::sample::select(vec![
            '\0', '\x07', '\x1b', '\r', '\n', '\t', '\x7f', '\u{85}', '\u{9b}', '\u{9f}',
            '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200f}', '\u{301}', '👩',
        ]);
        prop::collection::vec(prop_oneof![special, any::<char>()], 0..64)
            .prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        #[test]
        fn nothing_a_terminal_obeys_comes_out(text in any_text(), indent in 0usize..4) {
            let kept = sanitize(&text, Breaks::Indent(indent));
            prop_assert!(!kept.chars().any(obeyed), "{:?} → {:?}", text, kept);
            let breaks = text.matches('\n').count();
            prop_assert_eq!(kept.matches('\n').count(), breaks, "one break per line feed");
            let indented = format!("\n{}", " ".repeat(indent));
            prop_assert_eq!(kept.matches(&indented).count(), breaks);
            let flat = sanitize(&text, Breaks::Visible);
            prop_assert!(!flat.chars().any(|c| obeyed(c) || c == '\n'), "{:?} → {:?}", text, flat);
        }

        #[test]
        fn text_without_controls_is_unchanged(text in any::<String>()) {
            let plain: String = text.chars().filter(|&c| !obeyed(c) && c != '\n').collect();
            prop_assert_eq!(sanitize(&plain, Breaks::Visible), plain.clone());
        }
    }
}
