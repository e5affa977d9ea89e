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
            for value in parts(s.as_ref()) {
                if value.len() < MIN_LEN {
                    continue;
                }
                let json = serde_json::to_string(&value).unwrap_or_default();
                let json = json
                    .strip_prefix('"')
                    .and_then(|j| j.strip_suffix('"'))
                    .unwrap_or(&value)
                    .to_string();
                let encoded = [percent_encode(&value), form_encode(&value)];
                for form in [value, json].into_iter().chain(encoded) {
                    if !form.is_empty() && !forms.contains(&form) {
                        forms.push(form);
                    }
                }
            }
        }
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        Self { forms }
    }

    /// Adds the secrets `other` masks.
    pub fn join(&mut self, other: &Redactor) {
        for f in &other.forms {
            if !self.forms.contains(f) {
                self.forms.push(f.clone());
            }
        }
        self.forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
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

/// A secret and what can be told of it alone: the credential of an `Authorization`-style
/// value (`Bearer TOKEN`: `TOKEN` too), and for `Basic` what it encodes (`user:password`, and
/// the password).
fn parts(secret: &str) -> Vec<String> {
    let mut out = vec![secret.to_string()];
    let Some((scheme, credential)) = secret.split_once(' ') else {
        return out;
    };
    let credential = credential.trim();
    let scheme_known = ["bearer", "basic", "token", "bot", "apikey", "key"]
        .iter()
        .any(|k| scheme.eq_ignore_ascii_case(k));
    if !scheme_known || credential.is_empty() || credential.contains(char::is_whitespace) {
        return out;
    }
    out.push(credential.to_string());
    if scheme.eq_ignore_ascii_case("basic") {
        // k8s-openapi's ByteString reads base64, as a Secret's data does.
        let decoded = serde_json::from_value::<k8s_openapi::ByteString>(credential.into())
            .ok()
            .and_then(|b| String::from_utf8(b.0).ok());
        if let Some(decoded) = decoded {
            if let Some((_, password)) = decoded.split_once(':') {
                out.push(password.to_string());
            }
            out.push(decoded);
        }
    }
    out
}

/// `s` as a query string writes it (`application/x-www-form-urlencoded`: a space as `+`),
/// as HTTP tools fill their query parameters.
fn form_encode(s: &str) -> String {
    let Ok(mut url) = reqwest::Url::parse("http://h/") else {
        return String::new();
    };
    url.query_pairs_mut().append_pair("k", s);
    url.query()
        .and_then(|q| q.strip_prefix("k="))
        .unwrap_or_default()
        .to_string()
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

    #[test]
    fn an_authorization_value_is_masked_whole_and_in_its_parts() {
        let r = Redactor::new(["Bearer s3cr3t-tok", "Basic dXNlcjpodW50ZXIy", "two words"]);
        assert_eq!(r.redact("token s3cr3t-tok revoked"), "token *** revoked");
        assert_eq!(
            r.redact("Authorization: Bearer s3cr3t-tok"),
            "Authorization: ***"
        );
        assert_eq!(r.redact("user:hunter2 / hunter2"), "*** / ***");
        assert_eq!(r.redact("q=Bearer+s3cr3t-tok"), "q=***", "form-encoded");
        assert_eq!(r.redact("in two words"), "in ***");
        assert_eq!(r.redact("words"), "words", "only a credential stands alone");
        let mut joined = Redactor::new(["first-secret"]);
        joined.join(&r);
        assert_eq!(joined.redact("first-secret s3cr3t-tok"), "*** ***");
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
