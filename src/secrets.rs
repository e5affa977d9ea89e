//! Known secrets, kept out of everything the system says: a [`Redactor`] replaces every
//! occurrence of a secret with `***`: as written, in any case (a service that echoes a header
//! upper-cased), JSON-escaped, percent- or form-encoded, base64 (standard or URL-safe, at any
//! alignment inside a longer encoded text) and hex.
//!
//! Whoever holds a secret (a model provider its API key, a tool its headers) builds the
//! messages of its errors through its redactor, so a server that echoes a key back puts it in
//! no log, status, event, space message, tool result or consciousness.

use base64::Engine;

/// Where a worker pod holds the Secrets its tools take headers from: each Secret mounted at
/// `MOUNT_DIR/NAME/`, a file per key. The operator mounts them there and the worker reads them
/// there.
pub const MOUNT_DIR: &str = "/etc/agentfleet/secrets";

/// The text that replaces a secret.
pub const MASK: &str = "***";

/// Shortest text treated as a secret (shorter values would mask ordinary words).
const MIN_LEN: usize = 4;

/// Shortest base64 text masked as a secret's (a shorter run would mask random encoded text):
/// a secret of 7 bytes or more is found at every alignment.
const MIN_ENCODED: usize = 8;

/// Replaces known secrets in text.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Every form of every secret, ASCII-lowercased (matching ignores ASCII case).
    forms: Vec<String>,
}

impl Redactor {
    /// A redactor for `secrets` (empty and very short ones are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Self::default();
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
                let encoded = [
                    percent_encode(&value),
                    form_encode(&value),
                    crate::hex(value.as_bytes()),
                ];
                for form in [value.clone(), json]
                    .into_iter()
                    .chain(encoded)
                    .chain(base64_forms(value.as_bytes()))
                {
                    out.add(form);
                }
            }
        }
        out
    }

    /// Adds `form` (lowercased) unless it is there already.
    fn add(&mut self, form: String) {
        let form = form.to_ascii_lowercase();
        if !form.is_empty() && !self.forms.contains(&form) {
            self.forms.push(form);
        }
    }

    /// Adds the secrets `other` masks.
    pub fn join(&mut self, other: &Redactor) {
        for f in &other.forms {
            self.add(f.clone());
        }
    }

    /// `text` with every known secret masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        if self.forms.is_empty() {
            return out;
        }
        // Until none is left: masking can join characters into a secret again; each pass
        // shortens the text (every form is longer than the mask), so this ends.
        loop {
            let lower = out.to_ascii_lowercase();
            let mut found: Vec<(usize, usize)> = Vec::new();
            for f in &self.forms {
                let mut from = 0;
                while let Some(at) = lower[from..].find(f.as_str()) {
                    found.push((from + at, from + at + f.len()));
                    from += at + f.len();
                }
            }
            if found.is_empty() {
                return out;
            }
            found.sort_unstable();
            let mut masked = String::with_capacity(out.len());
            let mut kept = 0;
            for (start, end) in found {
                if end <= kept {
                    continue;
                }
                if start >= kept {
                    masked.push_str(&out[kept..start]);
                    masked.push_str(MASK);
                }
                kept = end;
            }
            masked.push_str(&out[kept..]);
            out = masked;
        }
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }
}

/// What `bytes` look like inside any longer base64 text (standard and URL-safe alphabets):
/// at each of the three alignments, the characters that only the secret's bits decide.
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for pad in 0..3usize {
        let mut buf = vec![0u8; pad];
        buf.extend_from_slice(bytes);
        let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&buf);
        let start = (8 * pad).div_ceil(6);
        let end = (8 * (pad + bytes.len()) / 6).min(encoded.len());
        let Some(core) = encoded.get(start..end).filter(|c| c.len() >= MIN_ENCODED) else {
            continue;
        };
        out.push(core.to_string());
        out.push(core.replace('+', "-").replace('/', "_"));
    }
    out
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

    #[test]
    fn a_secret_is_masked_in_any_case_and_its_common_encodings() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let token = "Bearer s3cr3t-Tok3n/with+chars";
        let r = Redactor::new([token]);
        assert_eq!(
            r.redact("auth: BEARER S3CR3T-TOK3N/WITH+CHARS"),
            "auth: ***"
        );
        assert_eq!(
            r.redact("echo: bearer s3cr3t-tok3n/with+chars!"),
            "echo: ***!"
        );
        for wrapped in [
            token.to_string(),
            format!("x{token}"),
            format!("xy{token}yz"),
            format!("{{\"auth\": \"{token}\"}}"),
        ] {
            for encoded in [STANDARD.encode(&wrapped), URL_SAFE_NO_PAD.encode(&wrapped)] {
                let shown = r.redact(&format!("data={encoded};"));
                assert!(shown.contains(MASK), "{wrapped} as {encoded}: {shown}");
                // What is left cannot be decoded back to the secret's credential.
                assert!(!shown.contains(&encoded), "{shown}");
            }
        }
        let hex = crate::hex(token.as_bytes());
        assert_eq!(r.redact(&format!("h={hex}")), "h=***");
        assert_eq!(r.redact(&format!("h={}", hex.to_uppercase())), "h=***");
        // Short secrets are not looked for in encodings (they would mask random text).
        let short = Redactor::new(["abcd"]);
        assert_eq!(short.redact("YWJjZA=="), "YWJjZA==");
        assert_eq!(short.redact("ABCD"), "***");
    }

    proptest! {
        #[test]
        fn no_secret_survives_in_base64(secret in "[ -~]{7,40}", before in "[ -~]{0,5}", after in "[ -~]{0,5}") {
            use base64::engine::general_purpose::STANDARD;
            let r = Redactor::new([&secret]);
            let encoded = STANDARD.encode(format!("{before}{secret}{after}"));
            let shown = r.redact(&encoded);
            prop_assert!(shown.contains(MASK), "{} {}", encoded, shown);
        }
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
