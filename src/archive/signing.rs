//! Signed checkpoints: an HMAC-SHA256 over a document's body, with a key from a Secret that
//! the operator holds and passes to its workers beside the store's credentials
//! (`AGENTFLEET_ARCHIVE_SIGNING_KEY`). A content digest alone tells a corrupted document
//! from an intact one, not a forged one from a real one: whoever can write to the bucket can
//! recompute it. With a key, every document written is signed, and a document read back
//! that is unsigned, or signed with another key, is refused before anything is restored.
//! Without a key, documents are unsigned and "verified" means "not corrupted" only (said so
//! where it is shown).

use std::sync::Arc;

use ring::hmac;

use super::ArchiveError;

/// The environment variable of the archive's signing key.
pub const SIGNING_KEY_ENV: &str = "AGENTFLEET_ARCHIVE_SIGNING_KEY";

/// The shortest signing key accepted, in bytes (`openssl rand -hex 32` makes 64).
pub const MIN_KEY_BYTES: usize = 32;

/// How a signature is written: `hmac-sha256:HEX`.
const PREFIX: &str = "hmac-sha256:";

/// Signs and checks documents with one key.
#[derive(Clone)]
pub struct Signer(Arc<hmac::Key>);

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(***)")
    }
}

impl Signer {
    /// The signer of `key` (the variable's value, as bytes); refused when it is too short.
    pub fn new(key: &str) -> Result<Self, ArchiveError> {
        if key.len() < MIN_KEY_BYTES {
            return Err(ArchiveError::InvalidKey(format!(
                "{SIGNING_KEY_ENV} is {} bytes; a signing key has at least {MIN_KEY_BYTES} (for example `openssl rand -hex 32`)",
                key.len()
            )));
        }
        Ok(Self(Arc::new(hmac::Key::new(
            hmac::HMAC_SHA256,
            key.as_bytes(),
        ))))
    }

    /// The signer `env` configures (`None`: no key, or an empty one).
    pub fn from_env(env: &[(String, String)]) -> Result<Option<Self>, ArchiveError> {
        env.iter()
            .find(|(k, v)| k == SIGNING_KEY_ENV && !v.is_empty())
            .map(|(_, v)| Self::new(v))
            .transpose()
    }

    /// The signature of `body`.
    pub fn sign(&self, body: &[u8]) -> String {
        format!("{PREFIX}{}", crate::hex(hmac::sign(&self.0, body).as_ref()))
    }

    /// Whether `signature` (a document's, if it has one) is this key's of `body`.
    pub fn check(&self, body: &[u8], signature: Option<&str>) -> Result<(), ArchiveError> {
        let Some(signature) = signature else {
            return Err(ArchiveError::Signature(
                "it is not signed, and this archive's checkpoints are (AGENTFLEET_ARCHIVE_SIGNING_KEY is set): it was not written by this fleet's workers".into(),
            ));
        };
        let tag = signature.strip_prefix(PREFIX).and_then(unhex);
        match tag {
            Some(tag) if hmac::verify(&self.0, body, &tag).is_ok() => Ok(()),
            _ => Err(ArchiveError::Signature(
                "its signature does not match this archive's signing key: it was changed after it was written, or written with another key".into(),
            )),
        }
    }
}

/// The bytes of lower- or upper-case hex text, if it is that.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_signature_is_the_keys_and_the_bodys() {
        let s = Signer::new(KEY).unwrap();
        let sig = s.sign(b"body");
        assert!(
            sig.starts_with("hmac-sha256:") && sig.len() == 12 + 64,
            "{sig}"
        );
        s.check(b"body", Some(&sig)).unwrap();
        s.check(
            b"body",
            Some(&sig.to_uppercase().replace("HMAC-SHA256", "hmac-sha256")),
        )
        .unwrap();
        for (body, signature) in [
            (&b"bodY"[..], Some(sig.as_str())),
            (b"body", Some("hmac-sha256:00")),
            (b"body", Some("sha256:abc")),
            (b"body", Some("hmac-sha256:zz")),
        ] {
            let e = s.check(body, signature).unwrap_err();
            assert_eq!(e.reason(), "SignatureInvalid");
            assert!(e.to_string().contains("does not match"), "{e}");
        }
        let other = Signer::new(&KEY.replace('0', "1")).unwrap();
        assert!(other.check(b"body", Some(&sig)).is_err());
        let e = s.check(b"body", None).unwrap_err();
        assert!(e.to_string().contains("not signed"), "{e}");
        assert!(!format!("{s:?}").contains(KEY));
    }

    #[test]
    fn a_key_comes_from_the_environment_and_is_long_enough() {
        let env = |v: &str| vec![(SIGNING_KEY_ENV.to_string(), v.to_string())];
        assert!(Signer::from_env(&[]).unwrap().is_none());
        assert!(Signer::from_env(&env("")).unwrap().is_none());
        assert!(Signer::from_env(&env(KEY)).unwrap().is_some());
        let e = Signer::from_env(&env("short")).unwrap_err();
        assert_eq!(e.reason(), "InvalidSigningKey");
        assert!(
            e.to_string().contains("at least 32") && !e.to_string().contains("short\""),
            "{e}"
        );
    }
}
