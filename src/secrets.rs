//! Known secrets, kept out of everything the system says: a [`Redactor`] replaces every
//! occurrence of a secret (as written, JSON-escaped or percent-encoded) with `***`.
//!
//! Whoever holds a secret (a model provider its API key, a tool its headers) builds the
//! messages of its errors through its redactor, so a server that echoes a key back puts it in
//! no log, status, event, space message, tool result or consciousness.

/// The text that replaces a secret.
pub const MASK: &str = "***";

/// Shortest text treated as a secret (shorter values would mask ordinary words).
const MIN_LEN: usize = 4;

/// Replaces known secrets in text.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Every form of every secret, longest first (so a longer form is masked whole).
    forms: Vec<String>,
}

impl Redactor {
    /// A redactor for `secrets` (empty and very short ones are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut forms: Vec<String> = Vec::new();
        for s in secrets {
            let s = s.as_ref();
            if s.len() < MIN_LEN {
                continue;
            }
            let json = serde_json::to_string(s).unwrap_or_default();
            let json = json
                .strip_prefix('"')
                .and_then(|j| j.strip_suffix('"'))
                .unwrap_or(s)
                .to_string();
            for form in [s.to_string(), json, percent_encode(s)] {
                if !forms.contains(&form) {
                    forms.push(form);
                }
            }
        }
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        Self { forms }
    }

    /// `text` with every known secret masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for f in &self.forms {
            // Until none is left: masking can join characters into the secret again; each
            // pass shortens the text (a secret is longer than the mask), so this ends.
            while out.contains(f.as_str()) {
                out = out.replace(f.as_str(), MASK);
            }
        }
        out
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }
}

/// `s` with everything but unreserved URL characters percent-encoded: how a secret may
/// appear in a URL, and how HTTP tools fill URL placeholders (so a masked form is exactly the
/// one they write).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_form_of_a_secret_is_masked() {
        let r = Redactor::new(["sk-SECRET123", "p@ss\"word/x", "ab"]);
        assert_eq!(
            r.redact("Incorrect API key provided: sk-SECRET123. Bearer sk-SECRET123"),
            "Incorrect API key provided: ***. Bearer ***"
        );
        assert_eq!(r.redact(r#"{"k":"p@ss\"word/x"}"#), r#"{"k":"***"}"#);
        assert_eq!(r.redact("u=p%40ss%22word%2Fx"), "u=***");
        assert_eq!(r.redact("ab cd"), "ab cd", "too short to be a secret");
        assert!(Redactor::new([""]).is_empty());
    }

    proptest! {
        #[test]
        fn no_secret_survives(secret in crate::hostile::hostile_text(), around in crate::hostile::hostile_text()) {
            prop_assume!(secret.len() >= MIN_LEN);
            let r = Redactor::new([&secret]);
            let text = format!("{around}{secret}{around}");
            prop_assert!(!r.redact(&text).contains(&secret));
        }
    }
}
