//! Who may read, for how long, and what the gateway holds and says back: paged replay, access
//! ending on open streams, bearer parsing, input quoted cut short.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use agentfleet::chat::SseParser;
use agentfleet::gateway::auth::{hash_token, Tokens};
use agentfleet::gateway::Limits;
use agentfleet::identity::SpaceKey;
use agentfleet::store::MemberKind;
use agentfleet::store::{NewMessage, Sender};
use agentfleet::testing::space_record;

use super::fixture::*;

/// Bytes Redis has sent to its clients, and what this reading itself cost (its reply).
async fn redis_bytes_out(conn: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    let out = info
        .lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // A RESP2 bulk string: `$<len>\r\n<data>\r\n`.
    let len = info.len() as u64;
    (out, len + len.to_string().len() as u64 + 5)
}

/// The most bytes the kernel can hold between the gateway and a client on this machine: the
/// largest TCP send buffer (the client's receive buffer is made small below).
fn kernel_send_buffer_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|t| t.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 << 20)
}

/// A resume over a long history from a client that reads slowly: everything arrives once, in
/// order, then live messages; and at every point the gateway has read from the data plane at
/// most what the client took plus what the sockets can hold plus about a page. Measured as
/// bytes Redis sent (all of them go to the gateway here) against bytes the client read.
#[tokio::test]
async fn a_slow_resume_over_a_long_history_holds_about_a_page() {
    let f = start(Limits::default()).await;
    let space = SpaceKey::new("ops", "archive");
    let mut record = space_record("Archive", &[], &["Husam"]);
    record.max_messages = 100_000;
    f.store.apply_space(&space, &record).await.unwrap();

    // What may legitimately be in flight: the kernel's send buffer, hyper's write buffer
    // (≈ 400 KiB), the client's small receive buffer, a page of 50 messages (≈ 210 KB), slack.
    let in_flight = kernel_send_buffer_max() + (3 << 19);
    let text = "x".repeat(4000);
    let count = ((3 * in_flight) / 4000).max(2000) as usize;
    let mut ids = Vec::with_capacity(count);
    for i in 0..count {
        let posted = f
            .store
            .post_message(
                &space,
                &NewMessage {
                    sender: Sender {
                        groups: Vec::new(),
                        id: "husam".into(),
                        name: "Husam".into(),
                        kind: Some(MemberKind::Human),
                    },
                    text: format!("{i} {text}"),
                    mention: None,
                    idempotency_key: None,
                    urgent: false,
                    depth: 0,
                },
            )
            .await
            .unwrap();
        ids.push(posted.id);
    }

    let mut redis = redis::Client::open(f.redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (before, mut own) = redis_bytes_out(&mut redis).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut tcp = socket.connect(f.addr).await.unwrap();
    tcp.write_all(
        format!(
            "GET /v1/spaces/ops/archive/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {HUSAM}\r\nLast-Event-ID: 0-0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();

    let mut taken: u64 = 0;
    let mut body = Vec::new();
    let mut buf = vec![0u8; 8 * 1024];
    let mut head_done = false;
    while !head_done {
        let n = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf))
            .await
            .expect("the response head")
            .unwrap();
        assert!(n > 0, "closed before the head");
        taken += n as u64;
        body.extend_from_slice(&buf[..n]);
        if let Some(end) = body.windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(
                body.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&body)
            );
            body.drain(..end + 4);
            head_done = true;
        }
    }

    // The client stops reading until the gateway stops reading the log.
    let mut read = 0;
    let mut quiet = 0;
    while quiet < 5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (now, cost) = redis_bytes_out(&mut redis).await;
        own += cost;
        // A page of the log is 200 KB: anything much smaller is not the replay reading on.
        quiet = if now - own < read + (64 << 10) {
            quiet + 1
        } else {
            0
        };
        read = now - own;
    }
    let ahead = |read: u64, taken: u64| read.saturating_sub(before).saturating_sub(taken);
    let history = (count * 4000) as u64;
    assert!(
        ahead(read, taken) <= in_flight,
        "before the client read: {} bytes read from the log for {taken} taken (history {history}, bound {in_flight})",
        read - before
    );

    // Then it reads, slowly, and a few messages are posted while it replays.
    let mut parser = SseParser::default();
    let mut got: Vec<String> = Vec::new();
    let mut events = parser.feed(&body);
    let mut live = Vec::new();
    let mut checked_at = 0;
    loop {
        for e in events.drain(..) {
            assert_eq!(e.event, "message", "{e:?}");
            got.push(e.id.unwrap());
        }
        if got.len() >= count / 2 && live.is_empty() {
            for t in ["live 1", "live 2", "live 3"] {
                let (_, p) = f.post(HUSAM, "archive", json!({ "text": t })).await;
                live.push(p["id"].as_str().unwrap().to_string());
            }
        }
        if got.len() == count + live.len() {
            break;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf[..4096]))
            .await
            .expect("more of the stream")
            .unwrap();
        assert!(n > 0, "the stream ended after {} messages", got.len());
        taken += n as u64;
        events = parser.feed(&buf[..n]);
        if taken - checked_at > 1 << 20 {
            checked_at = taken;
            let (now, cost) = redis_bytes_out(&mut redis).await;
            own += cost;
            // The three live posts reached Redis as commands, not as replies: no correction.
            assert!(
                ahead(now - own, taken) <= in_flight,
                "{} bytes read from the log for {taken} taken",
                now - own - before
            );
        }
    }
    let want: Vec<String> = ids.into_iter().chain(live).collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "every message once, in order");

    // Live from here.
    let (_, p) = f.post(HUSAM, "archive", json!({"text": "after"})).await;
    let mut next = Vec::new();
    while next.is_empty() {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
            .await
            .expect("the live message")
            .unwrap();
        next = parser
            .feed(&buf[..n])
            .into_iter()
            .filter(|e| e.event == "message")
            .collect();
    }
    assert_eq!(next[0].id.as_deref(), p["id"].as_str());
}

#[tokio::test]
async fn error_messages_quote_client_input_cut_short() {
    let f = start(Limits {
        rate_limit: 0.0,
        ..Limits::default()
    })
    .await;
    let huge = "a".repeat(6000); // under the URI limit
    let hostile = format!("\u{0}\r\n<script>\u{202e}{}", "b".repeat(20_000));
    let check = |what: &str, status: u16, v: &Value, want: u16| {
        assert_eq!(status, want, "{what}: {v}");
        let text = v.to_string();
        assert!(
            text.len() < 1024,
            "{what}: {} bytes: {text:.300}",
            text.len()
        );
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            !message.contains(['\0', '\r', '\n', '\u{202e}']),
            "{what}: raw control characters: {message:?}"
        );
    };

    let (s, v) = f
        .get(Some(HUSAM), &format!("/v1/spaces/ops/{huge}/messages"))
        .await;
    check("space name", s, &v, 404);
    assert!(v["error"]["message"].as_str().unwrap().contains('…'), "{v}");
    let (s, v) = f
        .get(
            Some(HUSAM),
            &format!("/v1/spaces/ops/family/messages?before={huge}"),
        )
        .await;
    check("before", s, &v, 400);
    let (s, v) = f
        .get(
            Some(HUSAM),
            &format!("/v1/spaces/ops/family/messages?limit={huge}"),
        )
        .await;
    check("limit", s, &v, 400);
    let (s, v) = f
        .post(HUSAM, "family", json!({"text": "hi", "mention": hostile}))
        .await;
    check("mention", s, &v, 400);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\\r\\n<script>"),
        "{v}"
    );
    let (s, v) = f
        .post(HUSAM, "family", json!({"text": "hi", hostile.clone(): 1}))
        .await;
    check("unknown field", s, &v, 400);
    for token in [ALERTS, HUSAM] {
        let resp = f
            .http
            .post(format!("{}/v1/agents/ops/{huge}/events", f.base))
            .bearer_auth(token)
            .json(&json!({"text": "x"}))
            .send()
            .await
            .unwrap();
        let s = resp.status().as_u16();
        check("agent name", s, &resp.json().await.unwrap(), 403);
    }
    let resp = f
        .http
        .get(format!("{}/v1/spaces/ops/family/stream", f.base))
        .bearer_auth(HUSAM)
        .header("Last-Event-ID", "9".repeat(20_000) + "x")
        .send()
        .await
        .unwrap();
    let s = resp.status().as_u16();
    check("Last-Event-ID", s, &resp.json().await.unwrap(), 400);
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_and_spaces_are_tolerated() {
    let f = start(Limits::default()).await;
    let me = |value: String| {
        let f = &f;
        async move {
            let resp = f
                .http
                .get(format!("{}/v1/me", f.base))
                .header("Authorization", value)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    for value in [
        format!("BEARER {HUSAM}"),
        format!("bearer {HUSAM}"),
        format!("BeArEr {HUSAM}"),
        format!("Bearer    {HUSAM}"),
        format!("Bearer \t {HUSAM} "),
    ] {
        let (s, v) = me(value.clone()).await;
        assert_eq!(
            (s, v["id"].as_str()),
            (200, Some("husam")),
            "{value:?}: {v}"
        );
    }
    for value in [
        "Bearer".to_string(),
        "Bearer ".to_string(),
        format!("Bearer{HUSAM}"),
        format!("Basic {HUSAM}"),
        format!("Bearer {HUSAM} extra"),
    ] {
        let (s, v) = me(value.clone()).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (401, Some("unauthenticated")),
            "{value:?}"
        );
    }
}

fn quick_recheck() -> Limits {
    Limits {
        sse_recheck: Duration::from_millis(200),
        ..Limits::default()
    }
}

#[tokio::test]
async fn an_open_stream_ends_when_its_caller_is_no_longer_a_member() {
    let f = start(quick_recheck()).await;
    let family = SpaceKey::new("ops", "family");
    let mut husam = f.stream(HUSAM, "family", None).await;
    let mut muhammad = f.stream(MUHAMMAD, "family", None).await;

    f.store
        .apply_space(&family, &space_record("Family", &["assistant"], &["Husam"]))
        .await
        .unwrap();
    let e = muhammad.next_other().await;
    assert_eq!(e.event, "error");
    let v: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(v["error"]["code"], "not_member", "{v}");
    muhammad.assert_ends().await;
    let (s, v) = f.get(Some(MUHAMMAD), "/v1/spaces/ops/family/stream").await;
    assert_eq!((s, v["error"]["code"].as_str()), (403, Some("not_member")));

    // The remaining member still streams.
    let (_, p) = f.post(HUSAM, "family", json!({"text": "just us"})).await;
    assert_eq!(husam.next_message().await.0, p["id"].as_str().unwrap());

    // The space goes: its last reader's stream ends too.
    f.store.remove_space(&family).await.unwrap();
    let e = husam.next_other().await;
    let v: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(
        (e.event.as_str(), v["error"]["code"].as_str()),
        ("error", Some("not_found"))
    );
    husam.assert_ends().await;
}

#[tokio::test]
async fn an_open_stream_ends_when_its_token_is_revoked() {
    let path = std::env::temp_dir().join(format!("agentfleet-gw-tokens-{}", std::process::id()));
    let file = |tokens: &[(&str, &str)]| {
        let mut text = String::from("tokens:\n");
        for (token, id) in tokens {
            text.push_str(&format!(
                "- sha256: {}\n  kind: human\n  id: {id}\n",
                hash_token(token)
            ));
        }
        text
    };
    std::fs::write(&path, file(&[(HUSAM, "husam"), (MUHAMMAD, "muhammad")])).unwrap();
    let tokens = Tokens::load(&path).unwrap();
    let watcher = tokens.watch(path.clone(), Duration::from_millis(50));
    let f = start_with(quick_recheck(), tokens).await;
    let mut husam = f.stream(HUSAM, "family", None).await;
    let mut muhammad = f.stream(MUHAMMAD, "family", None).await;

    std::fs::write(&path, file(&[(MUHAMMAD, "muhammad")])).unwrap();
    let e = husam.next_other().await;
    assert_eq!(e.event, "error");
    let v: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(v["error"]["code"], "unauthenticated", "{v}");
    husam.assert_ends().await;
    let (s, _) = f.get(Some(HUSAM), "/v1/spaces/ops/family/stream").await;
    assert_eq!(s, 401);

    // A token given to someone else ends its streams too; other tokens are untouched.
    let (_, p) = f
        .post(MUHAMMAD, "family", json!({"text": "still me"}))
        .await;
    assert_eq!(muhammad.next_message().await.0, p["id"].as_str().unwrap());
    std::fs::write(&path, file(&[(MUHAMMAD, "husam")])).unwrap();
    let e = muhammad.next_other().await;
    let v: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(
        (e.event.as_str(), v["error"]["code"].as_str()),
        ("error", Some("unauthenticated"))
    );
    muhammad.assert_ends().await;
    watcher.abort();
    let _ = std::fs::remove_file(&path);
}
