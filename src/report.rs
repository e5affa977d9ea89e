//! An error and its causes as one line, each cause said once.
//!
//! Errors here say their cause in their own text and do not return it again as
//! `source()` (see [`crate::store::StoreError`]), so `{e}` is the whole story. Errors of other
//! crates often do both: the `redis` crate's error prints its I/O error and returns it as its
//! source, kube's and hyper's wrap theirs the same way, so walking the chain (as anyhow's
//! `{:#}` does) repeats the cause ("Connection refused: Connection refused: …"). [`chain`] is
//! the one place a chain becomes a line: the final `agentfleet: …` line and every log line
//! whose error may have causes.

use std::error::Error;

/// `error`, then each cause whose text the line does not hold yet, joined by `: `.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{prelude::*, RedisStore};

    /// A loopback port nothing listens on, and what the OS says when connecting to it.
    fn refused() -> (u16, String) {
        let port = crate::testing::free_port().unwrap();
        let e = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        (port, e.to_string())
    }

    #[tokio::test]
    async fn a_refused_connection_is_said_once_however_it_is_wrapped() {
        let (port, os) = refused();
        let url = format!("redis://127.0.0.1:{port}/");

        // The driver's own error prints its I/O error and returns it as its source.
        let raw = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap_err();
        assert!(raw.is_connection_refusal(), "{raw}");
        let raw = anyhow::Error::new(raw).context("connecting");
        assert_eq!(chain(&*raw).matches(&os).count(), 1, "{}", chain(&*raw));

        // As the code wraps it: the store's error, then a context, as `cli` and `dev` do.
        let store = RedisStore::new(&url).unwrap();
        let err = store.ping().await.unwrap_err();
        assert!(err.is_connection_refused(), "{err}");
        assert_eq!(err.to_string().matches(&os).count(), 1, "{err}");
        let err = anyhow::Error::new(err).context("data plane");
        for line in [chain(&*err), format!("{err:#}")] {
            assert_eq!(line.matches(&os).count(), 1, "{line}");
            assert!(line.starts_with("data plane: redis connect: "), "{line}");
        }

        // The operator's error around the store's.
        let op = crate::operator::context::Error::from(store.ping().await.unwrap_err());
        for line in [
            chain(&op),
            op.to_string(),
            format!("{:#}", anyhow::Error::new(op)),
        ] {
            assert_eq!(line.matches(&os).count(), 1, "{line}");
        }
    }

    #[test]
    fn causes_are_kept_when_the_message_does_not_hold_them() {
        let io = std::io::Error::other("disk full");
        let err = anyhow::Error::new(io)
            .context("writing the file")
            .context("saving");
        assert_eq!(chain(&*err), "saving: writing the file: disk full");
        let silent = anyhow::Error::new(std::io::Error::other("")).context("x");
        assert_eq!(chain(&*silent), "x");
    }
}
