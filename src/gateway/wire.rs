//! The bytes of one connection: when it was last active, and JSON instead of hyper's empty
//! error answers.
//!
//! hyper answers a request it cannot parse itself, before any service sees it: `400` (not
//! HTTP/1.1), `414` (a request target over 64 KiB), `431` (headers over its buffer) — each a
//! bare head with `content-length: 0` — and offers no hook to change that. Every answer of
//! the gateway is JSON with a stable code, so [`Wire`] recognizes that canned head on its way
//! out (a 400/414/431 with an empty body and no `content-type`, which no route of ours ever
//! sends: every refusal goes through `ApiError`, which always has a JSON body) and writes the
//! JSON answer in its place. hyper closes the connection after it, as it would have.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::ApiError;

/// When a connection last read or wrote a byte.
#[derive(Clone)]
pub struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    /// Active now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing was read or written for `limit`.
    pub async fn idle_for(&self, limit: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// A connection's IO: records activity, and replaces hyper's canned error answers with JSON.
pub struct Wire<T> {
    inner: T,
    activity: Activity,
    /// The URI limit the 414 names (the gateway's own, which is lower than hyper's).
    max_uri_bytes: usize,
    closed: IntCounterVec,
    /// A JSON answer being written in place of hyper's, and how much of it is written.
    replacement: Option<(Vec<u8>, usize)>,
}

impl<T> Wire<T> {
    /// Wraps a connection's IO.
    pub fn new(inner: T, activity: Activity, max_uri_bytes: usize, closed: IntCounterVec) -> Self {
        Self {
            inner,
            activity,
            max_uri_bytes,
            closed,
            replacement: None,
        }
    }
}

impl<T: AsyncWrite + Unpin> Wire<T> {
    /// Writes what is left of the replacement answer.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                self.replacement = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
            self.activity.touch();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Wire<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.touch();
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Wire<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        if let Some((code, json)) = json_answer(buf, this.max_uri_bytes) {
            this.closed.with_label_values(&[code]).inc();
            this.replacement = Some((json, 0));
            // hyper's bytes count as written; ours go out now or on the flush that follows.
            return match this.poll_replacement(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Ready(Ok(buf.len())),
            };
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes each head as one flat buffer, so its canned answer is
    // seen whole by `poll_write`.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// When `buf` ends with hyper's canned error head: its metric reason and the JSON answer to
/// write instead (anything before the head, a previous response's end, is kept).
fn json_answer(buf: &[u8], max_uri_bytes: usize) -> Option<(&'static str, Vec<u8>)> {
    const STATUS_LINE: &[u8] = b"HTTP/1.1 ";
    // Canned heads are a status line and two or three short headers.
    const LONGEST_HEAD: usize = 256;
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let tail_start = buf.len().saturating_sub(LONGEST_HEAD);
    let start = tail_start
        + buf[tail_start..]
            .windows(STATUS_LINE.len())
            .rposition(|w| w == STATUS_LINE)?;
    let head = std::str::from_utf8(&buf[start..]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()?
        .get(STATUS_LINE.len()..STATUS_LINE.len() + 3)?;
    let error = match status {
        "400" => ApiError::bad_request(),
        "414" => ApiError::uri_too_long(max_uri_bytes),
        "431" => ApiError::headers_too_large(),
        _ => return None,
    };
    let mut empty_body = false;
    let mut date = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            empty_body = value == "0";
        } else if name.eq_ignore_ascii_case("content-type") {
            return None;
        } else if name.eq_ignore_ascii_case("date") {
            date = Some(value);
        }
    }
    if !empty_body {
        return None;
    }
    let body = serde_json::to_vec(&error.body()).ok()?;
    let mut out = buf[..start].to_vec();
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
            error.status.as_str(),
            error.status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .as_bytes(),
    );
    if let Some(date) = date {
        out.extend_from_slice(format!("date: {date}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    Some((error.code, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(buf: &str) -> Option<(&'static str, String)> {
        json_answer(buf.as_bytes(), 8192).map(|(code, b)| (code, String::from_utf8(b).unwrap()))
    }

    #[test]
    fn hypers_canned_heads_become_json() {
        for (status, code) in [
            ("400 Bad Request", "bad_request"),
            ("414 URI Too Long", "uri_too_long"),
            ("431 Request Header Fields Too Large", "headers_too_large"),
        ] {
            let canned = format!(
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\ndate: Tue, 01 Jul 2025 10:00:00 GMT\r\n\r\n"
            );
            let (got, out) = answer(&canned).unwrap();
            assert_eq!(got, code);
            let (head, body) = out.split_once("\r\n\r\n").unwrap();
            assert!(
                head.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{head}"
            );
            assert!(head.contains("content-type: application/json\r\n"));
            assert!(head.contains("date: Tue, 01 Jul 2025 10:00:00 GMT"));
            assert!(head.contains(&format!("content-length: {}", body.len())));
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(v["error"]["code"], code);
        }
        // A previous response's end is kept before the answer.
        let (_, out) =
            answer("{\"a\":1}HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").unwrap();
        assert!(out.starts_with("{\"a\":1}HTTP/1.1 400 Bad Request\r\n"));
    }

    #[test]
    fn our_own_answers_pass_untouched() {
        for ours in [
            // A JSON refusal of a route: it has a type and a body.
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 52\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            // A head whose body follows in a later write.
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            "data: {\"text\":\"HTTP/1.1 400 \"}\n\n",
        ] {
            assert!(answer(ours).is_none(), "{ours:?}");
        }
    }
}
