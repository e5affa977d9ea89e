//! What chat shows: permanent lines, plus (on a terminal) one status line that is redrawn in
//! place: who is thinking, or the reply being typed. Every text goes out through
//! [`sanitize`]; nothing else writes to the terminal.

use std::collections::BTreeMap;
use std::io::Write;

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::terminal::{sanitize, Breaks};

/// Spaces before the continuation lines of a message of several lines.
const CONTINUATION: usize = 2;
/// The widest status line, in cells.
const STATUS_WIDTH: usize = 100;

/// The terminal's width in cells, if known.
pub(super) type Columns = fn() -> Option<usize>;

/// The lines and the status line chat writes to `out`.
pub(super) struct Screen<W> {
    out: W,
    /// `out` is a terminal: the status line is drawn.
    tty: bool,
    /// Standard input is a terminal too: it echoes the lines typed.
    echoes: bool,
    columns: Columns,
    status: BTreeMap<String, String>,
    /// The cells the status line takes, while it is drawn.
    shown: Option<usize>,
}

impl<W: Write> Screen<W> {
    pub(super) fn new(out: W, tty: bool, echoes: bool, columns: Columns) -> Self {
        Self {
            out,
            tty,
            echoes: tty && echoes,
            columns,
            status: BTreeMap::new(),
            shown: None,
        }
    }

    /// A permanent line; line breaks in `text` start indented continuation lines.
    pub(super) fn line(&mut self, text: &str) {
        self.clear();
        let _ = writeln!(self.out, "{}", sanitize(text, Breaks::Indent(CONTINUATION)));
        self.redraw();
    }

    /// What `who` is doing (`None`: nothing any more). On a terminal it is the status line;
    /// elsewhere a line says once what an agent starts doing (typing is not repeated).
    pub(super) fn set_status(&mut self, who: &str, what: Option<String>) {
        let changed = match &what {
            Some(w) => self.status.insert(who.to_string(), w.clone()).as_ref() != Some(w),
            None => self.status.remove(who).is_some(),
        };
        if !changed {
            return;
        }
        if self.tty {
            self.redraw();
        } else if let Some(w) = what.filter(|w| !w.starts_with("is typing: ")) {
            self.line(&format!("· {who} {w}"));
        }
    }

    /// A line was typed and Enter pressed. A terminal that echoes input has shown it (after
    /// the status line, if one was drawn), and the stream shows it again as `Name: text`, so
    /// the echo is erased: the rows it took, wrapped at the terminal's width.
    pub(super) fn typed(&mut self, text: &str) {
        if !self.echoes {
            return;
        }
        let start = self.shown.take().unwrap_or(0);
        let rows = match (self.columns)() {
            Some(cols) if cols > 0 => (start + echo_width(text)).div_ceil(cols).max(1),
            _ => 1,
        };
        // Up to the first row of the echo, then clear to the end of the screen.
        let _ = write!(self.out, "\x1b[{rows}A\r\x1b[J");
        self.redraw();
    }

    /// Leaves the terminal clean (no status line) before the process ends.
    pub(super) fn finish(&mut self) {
        self.clear();
        let _ = self.out.flush();
    }

    fn clear(&mut self) {
        if self.shown.take().is_some() {
            let _ = write!(self.out, "\r\x1b[2K");
        }
    }

    fn redraw(&mut self) {
        self.clear();
        if self.tty && !self.status.is_empty() {
            let line: Vec<String> = self
                .status
                .iter()
                .map(|(who, what)| format!("{who} {what}"))
                .collect();
            // One row: a status line that wrapped could not be redrawn in place.
            let width = (self.columns)()
                .filter(|&c| c > 1)
                .map_or(STATUS_WIDTH, |c| (c - 1).min(STATUS_WIDTH));
            let line = tail(&sanitize(&line.join(" · "), Breaks::Visible), width);
            let _ = write!(self.out, "\x1b[2m{line}\x1b[0m");
            self.shown = Some(line.width());
        }
        let _ = self.out.flush();
    }
}

/// The end of `text` that fits in `width` cells, after a `…` when cut: the newest text of a
/// long reply stays in view.
fn tail(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_string();
    }
    let mut kept = Vec::new();
    let mut used = 1;
    for c in text.chars().rev() {
        let w = c.width().unwrap_or(0);
        if used + w > width {
            break;
        }
        used += w;
        kept.push(c);
    }
    std::iter::once('…').chain(kept.into_iter().rev()).collect()
}

/// The cells a terminal's echo of `text` takes (a control is echoed as `^X`).
fn echo_width(text: &str) -> usize {
    text.chars()
        .map(|c| {
            if c.is_control() {
                2
            } else {
                c.width().unwrap_or(0)
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU16;

    /// What a terminal was asked to do besides drawing text.
    #[derive(Default)]
    struct Obeyed {
        titles: Vec<Vec<u8>>,
        bells: usize,
    }

    impl vt100::Callbacks for Obeyed {
        fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
            self.titles.push(title.to_vec());
        }
        fn set_window_icon_name(&mut self, _: &mut vt100::Screen, name: &[u8]) {
            self.titles.push(name.to_vec());
        }
        fn audible_bell(&mut self, _: &mut vt100::Screen) {
            self.bells += 1;
        }
    }

    const COLS: u16 = 40;

    fn terminal() -> vt100::Parser<Obeyed> {
        let n = |v| NonZeroU16::new(v).unwrap_or(NonZeroU16::MIN);
        vt100::Parser::new_with_callbacks(n(10), n(COLS), 0, Obeyed::default())
    }

    fn screen() -> Screen<Vec<u8>> {
        Screen::new(Vec::new(), true, true, || Some(usize::from(COLS)))
    }

    /// Draws what `screen` wrote since the last call, through a terminal's line discipline
    /// (LF → CRLF).
    fn draw(screen: &mut Screen<Vec<u8>>, term: &mut vt100::Parser<Obeyed>) {
        let out = String::from_utf8_lossy(&std::mem::take(&mut screen.out)).replace('\n', "\r\n");
        term.process(out.as_bytes());
    }

    #[test]
    fn hostile_text_is_shown_not_obeyed_on_a_terminal() {
        let (mut s, mut t) = (screen(), terminal());
        s.line("Eve: \x1b[2J\x1b]0;PWNED\x07hi\u{9b}2J");
        s.set_status(
            "Eve\x1b]2;x\x07",
            Some("is typing: \x1b]0;PWNED\x07\nsecond".into()),
        );
        draw(&mut s, &mut t);
        let shown = t.screen().contents();
        assert_eq!(
            shown,
            "Eve: ␛[2J␛]0;PWNED␇hi\\u{9b}2J\nEve␛]2;x␇ is typing: ␛]0;PWNED␇⏎second"
        );
        assert!(t.callbacks().titles.is_empty() && t.callbacks().bells == 0);
    }

    #[test]
    fn a_long_status_line_keeps_its_end_on_one_row() {
        let (mut s, mut t) = (screen(), terminal());
        let reply = format!("is typing: {}end", "x".repeat(80));
        s.set_status("assistant", Some(reply));
        s.line("a line");
        draw(&mut s, &mut t);
        let rows: Vec<String> = t.screen().rows(0, COLS).collect();
        assert_eq!(rows[0], "a line");
        assert_eq!(rows[1], format!("…{}end", "x".repeat(35)));
        assert_eq!(rows[2], "", "nothing wrapped");
    }

    #[test]
    fn the_echo_of_a_typed_line_is_erased_also_when_it_wrapped() {
        for (status, typed) in [
            (None, "short".to_string()),
            (None, "w".repeat(usize::from(COLS))),
            (Some("is thinking…"), "y".repeat(90)),
            (None, "中文".repeat(15)),
        ] {
            let (mut s, mut t) = (screen(), terminal());
            s.line("before");
            if let Some(w) = status {
                s.set_status("assistant", Some(w.into()));
            }
            draw(&mut s, &mut t);
            // The terminal echoes what is typed, then the Enter.
            t.process(format!("{typed}\r\n").as_bytes());
            s.typed(&typed);
            s.line("Husam: ok");
            draw(&mut s, &mut t);
            let mut want = "before\nHusam: ok".to_string();
            if let Some(w) = status {
                want.push_str(&format!("\nassistant {w}"));
            }
            assert_eq!(t.screen().contents(), want, "typed {typed:?}");
        }
    }

    #[test]
    fn off_a_terminal_nothing_is_drawn_or_erased() {
        let mut s = Screen::new(Vec::new(), false, true, || Some(80));
        s.set_status("assistant", Some("is thinking…".into()));
        s.set_status("assistant", Some("is typing: hi".into()));
        s.typed("hello");
        s.line("one\ttwo\nthree");
        s.finish();
        assert_eq!(
            String::from_utf8_lossy(&s.out),
            "· assistant is thinking…\none    two\n  three\n"
        );
    }
}
