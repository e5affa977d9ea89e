//! Connections over raw TCP: timeouts, the connection limit, JSON answers for requests hyper
//! refuses, graceful shutdown.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use agentfleet::gateway::Limits;

use super::fixture::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn a_request_head_sent_too_slowly_is_closed_within_the_header_timeout() {
    let f = start(Limits {
        header_timeout: ms(300),
        ..Limits::default()
    })
    .await;
    // Half a request line, then nothing.
    let mut half = f.connect().await;
    half.write_all(b"GET /v1/me HT").await.unwrap();
    // Nothing at all.
    let mut silent = f.connect().await;
    // A header byte every 50 ms: bytes keep coming, the head never ends.
    let mut trickle = f.connect().await;
    let trickler = tokio::spawn(async move {
        trickle.write_all(b"GET /v1/me HTTP/1.1\r\n").await.unwrap();
        let start = Instant::now();
        while trickle.write_all(b"x").await.is_ok() {
            tokio::time::sleep(ms(50)).await;
            if start.elapsed() > Duration::from_secs(10) {
                return Err("still open after 10s");
            }
        }
        Ok(start.elapsed())
    });
    for tcp in [&mut half, &mut silent] {
        let answer = read_until_closed(tcp, Duration::from_secs(5))
            .await
            .expect("closed by the header timeout");
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    }
    trickler
        .await
        .unwrap()
        .expect("a trickled head is cut at the deadline");
    assert!(
        f.metric("agentfleet_gateway_connections_closed_total{reason=\"header_timeout\"}") >= 3.0
    );

    // A whole request in time is served, and the kept-alive connection then waits for the
    // next head no longer than the timeout either.
    let mut ok = f.connect().await;
    ok.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut ok, Duration::from_secs(5))
        .await
        .expect("closed after the timeout");
    assert_eq!(Response::parse(&answer).status, 200);
}

#[tokio::test]
async fn a_silent_connection_is_closed_by_the_idle_timeout_but_a_stream_is_kept_alive() {
    let f = start(Limits {
        idle_timeout: ms(600),
        ..Limits::default()
    })
    .await;
    // A head, then a body that stops halfway: no byte for longer than the idle timeout.
    let mut stalled = f.connect().await;
    stalled
        .write_all(
            format!(
                "POST /v1/spaces/ops/family/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {HUSAM}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"text\":"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    read_until_closed(&mut stalled, Duration::from_secs(5))
        .await
        .expect("closed by the idle timeout");
    assert!(
        f.metric("agentfleet_gateway_connections_closed_total{reason=\"idle_timeout\"}") >= 1.0
    );

    // A stream with nothing to say writes keep-alive comments, so it outlives the timeout.
    let mut sse = f.stream(HUSAM, "family", None).await;
    tokio::time::sleep(ms(2000)).await;
    let (_, posted) = f
        .post(MUHAMMAD, "family", json!({"text": "still there?"}))
        .await;
    let (id, _) = sse.next_message().await;
    assert_eq!(id, posted["id"].as_str().unwrap());
}

#[tokio::test]
async fn the_connection_limit_holds_and_frees() {
    let f = start(Limits {
        max_connections: 3,
        ..Limits::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tcp = f.connect().await;
        tcp.write_all(b"GET /v1/me HTTP/1.1\r\n").await.unwrap();
        held.push(tcp);
    }
    // The fourth connection completes in the kernel's backlog, but is not served.
    let mut fourth = f.connect().await;
    fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let early = tokio::time::timeout(ms(500), fourth.read(&mut buf)).await;
    assert!(early.is_err(), "served above the limit: {early:?}");
    assert!(f.metric("agentfleet_gateway_connection_limit_reached_total") >= 1.0);
    assert_eq!(f.metric("agentfleet_gateway_connections"), 3.0);

    // One closes: the fourth is served.
    drop(held.pop());
    let answer = read_until_closed(&mut fourth, Duration::from_secs(5))
        .await
        .expect("served once a slot freed");
    let answer = Response::parse(&answer);
    assert_eq!((answer.status, answer.body.as_slice()), (200, &b"ok\n"[..]));
}

#[tokio::test]
async fn a_request_not_answered_in_time_gets_a_json_408() {
    let f = start(Limits {
        request_timeout: ms(300),
        ..Limits::default()
    })
    .await;
    // The body trickles in so slowly that the request cannot complete.
    let mut tcp = f.connect().await;
    tcp.write_all(
        format!(
            "POST /v1/spaces/ops/family/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {HUSAM}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"text\":"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_until_closed(&mut tcp, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    let answer = Response::parse(&answer);
    assert_eq!(answer.status, 408);
    assert_eq!(answer.error_code(), "request_timeout");
    assert_eq!(
        f.metric("agentfleet_gateway_requests_total{method=\"POST\",route=\"/v1/spaces/{namespace}/{space}/messages\",status=\"408\"}"),
        1.0
    );

    // Ordinary requests and streams are not cut: a stream outlives the request timeout.
    let mut sse = f.stream(HUSAM, "family", None).await;
    tokio::time::sleep(ms(800)).await;
    let (s, posted) = f.post(MUHAMMAD, "family", json!({"text": "late"})).await;
    assert_eq!(s, 201);
    assert_eq!(sse.next_message().await.0, posted["id"].as_str().unwrap());
}

#[tokio::test]
async fn requests_hyper_refuses_get_json_answers() {
    let f = start(Limits::default()).await;
    // A request target over hyper's own 64 KiB limit.
    let long = format!(
        "GET /v1/me?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let answer = exchange(&f, long.as_bytes()).await;
    assert_eq!(
        (answer.status, answer.error_code().as_str()),
        (414, "uri_too_long")
    );
    // Headers over the head limit.
    let mut big = String::from("GET /v1/me HTTP/1.1\r\nHost: x\r\n");
    for i in 0..50 {
        big.push_str(&format!("x-filler-{i}: {}\r\n", "h".repeat(4000)));
    }
    big.push_str("\r\n");
    let answer = exchange(&f, big.as_bytes()).await;
    assert_eq!(
        (answer.status, answer.error_code().as_str()),
        (431, "headers_too_large")
    );
    // Not HTTP.
    for garbage in [
        &b"HELLO THERE\r\n\r\n"[..],
        b"GET /v1/me HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET /v1/me HTTP/9.9\r\n\r\n",
    ] {
        let answer = exchange(&f, garbage).await;
        assert_eq!(
            (answer.status, answer.error_code().as_str()),
            (400, "bad_request"),
            "{}",
            String::from_utf8_lossy(garbage)
        );
    }
    assert_eq!(
        f.metric("agentfleet_gateway_connections_closed_total{reason=\"bad_request\"}"),
        3.0
    );
}

#[tokio::test]
async fn a_long_request_target_gets_a_json_414_before_hyper_sees_it() {
    let f = start(Limits::default()).await;
    let path = format!("/v1/spaces/ops/{}/messages", "a".repeat(9000));
    for token in [Some(HUSAM), None] {
        let (s, v) = f.get(token, &path).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (414, Some("uri_too_long"))
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("8192 bytes"),
            "{v}"
        );
    }
    let (s, _) = f.get(None, &format!("/metrics?{}", "a".repeat(9000))).await;
    assert_eq!(s, 414, "every route, /metrics too");
    let (s, _) = f
        .get(Some(HUSAM), &format!("/v1/me?pad={}", "a".repeat(8000)))
        .await;
    assert_eq!(s, 200, "up to the limit is fine");
}

#[tokio::test]
async fn shutdown_stops_accepting_ends_streams_and_lets_requests_finish() {
    let f = start(Limits::default()).await;
    let mut sse = f.stream(HUSAM, "family", None).await;
    // A request under way: its head is in, half its body.
    let body = json!({"text": "finishing"}).to_string();
    let (first, rest) = body.split_at(5);
    let mut tcp = f.connect().await;
    tcp.write_all(
        format!(
            "POST /v1/spaces/ops/family/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {HUSAM}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{first}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(ms(200)).await;
    f.shutdown.send(true).unwrap();
    sse.assert_ends().await;
    tcp.write_all(rest.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut tcp, Duration::from_secs(5))
        .await
        .expect("answered, then closed");
    let answer = Response::parse(&answer);
    assert_eq!(answer.status, 201, "{answer:?}");
    let posted: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(posted["duplicate"], json!(false));
    tokio::time::timeout(Duration::from_secs(5), f.server)
        .await
        .expect("serve returns once every connection is done")
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(f.addr).await.is_err(),
        "no longer accepting"
    );
}
