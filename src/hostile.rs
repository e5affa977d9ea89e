//! Hostile input for property tests: the text a chaos tester or an attacker would post.
//! Every text path (inbox lines, previews, the scripted model, compaction, redaction, SSE,
//! `chat`) is fed with it by its own module's tests.

use proptest::prelude::*;

/// Text of every kind: combining marks, right-to-left text and overrides, emoji sequences,
/// characters whose case mapping changes their length (`İ`), NUL and other controls, escape
/// sequences, quotes, backslashes, the delimiters of our line formats, and any Unicode scalar
/// value (a Rust string cannot hold a lone surrogate; JSON escapes of one are tested where
/// JSON is parsed).
pub fn hostile_text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("\u{0301}".to_string()),
        Just("\u{202e}".to_string()),
        Just("שלום".to_string()),
        Just("İ".to_string()),
        Just("ẞ".to_string()),
        Just("€".to_string()),
        Just("👩‍👩‍👧".to_string()),
        Just("\0".to_string()),
        Just("\u{1b}[2J\u{1b}]0;PWNED\u{7}".to_string()),
        Just("\u{85}".to_string()),
        Just("\r\n".to_string()),
        Just("\"\\".to_string()),
        Just("] ".to_string()),
        Just(": \"".to_string()),
        Just("remember that ".to_string()),
        Just("reviewer".to_string()),
        Just(" ".to_string()),
        any::<char>().prop_map(String::from),
    ];
    proptest::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
}
