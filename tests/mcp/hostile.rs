//! MCP servers that misbehave (issue 26): a tool list that pages without end, thousands of
//! tools, huge descriptions, `tools/list_changed` storms, a connection that dies mid-call.
//! Each is bounded by the server's `limits`: over a bound its tools are cut or refused with a
//! reason in `status.tools`, memory stays flat, and a well-behaved server beside it is
//! untouched.

use std::time::{Duration, Instant};

use agentfleet::testing::CapturedLogs;
use agentfleet::worker::tools::mcp::McpServer;
use agentfleet::worker::tools::External;
use serde_json::json;

use super::server::{tool, tracker_tools, Era, McpTestServer, Paging};
use super::{agent_key, call, no_secrets, spec, status_of, until, until_known, until_offers};

/// The resident memory of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The one entry standing for a whole server (or the rest of its tools), once it says `what`.
async fn refused(source: &McpServer, server: &str, what: &str) -> String {
    until(
        &format!("{server} to be refused for {what}"),
        Duration::from_secs(30),
        async || {
            let status = source.status();
            status
                .iter()
                .find(|s| s.name == format!("{server}__*"))
                .and_then(|s| s.last_error.clone())
                .filter(|e| e.contains(what))
        },
    )
    .await
}

#[tokio::test]
async fn a_tool_list_without_end_is_refused_and_memory_stays_flat() {
    // Every answer: 1,000 tools with 500-byte descriptions, and another cursor. The build
    // before issue 26 followed it to 6.5 GB in 45 s, listing again every 30 s.
    let endless = McpTestServer::start_paging(
        Paging::Endless {
            tools: 1000,
            description: 500,
        },
        Vec::new(),
    )
    .await;
    let good = McpTestServer::start(Era::Current, tracker_tools()).await;
    let before = rss();
    let started = Instant::now();
    let bad = McpServer::start(
        &agent_key(),
        &serde_yaml::from_str(&format!("{{name: endless, url: '{}'}}", endless.url)).unwrap(),
        &no_secrets(),
    );
    let fine = McpServer::start(&agent_key(), &spec(&good.url, ""), &no_secrets());

    let why = refused(&bad, "endless", "limits.").await;
    assert_eq!(
        why,
        "MCP server endless lists more than 1000 tools (limits.maxListedTools); none of its tools are offered"
    );
    assert!(bad.specs().is_empty(), "none of its tools are offered");
    let (v, ok) = call(&bad, "endless__t1", json!({})).await;
    assert!(!ok && v["error"] == why.as_str(), "{v}");

    // The well-behaved server beside it is untouched.
    until_offers(&fine, "tracker__echo").await;
    let (v, ok) = call(&fine, "tracker__echo", json!({"text": "hi"})).await;
    assert_eq!((v, ok), (json!({"text": "echo: hi"}), true));

    // It is asked again with a growing wait, each time for two pages at most.
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(started.elapsed())).await;
    let lists = endless.lists();
    let grown = rss().saturating_sub(before);
    println!(
        "endless server: {lists} tools/list requests in {:.1}s, resident memory grew {} MB",
        started.elapsed().as_secs_f64(),
        grown / 1_000_000
    );
    assert!(lists <= 12, "{lists} tools/list requests in 8 s");
    assert!(grown < 200_000_000, "resident memory grew {grown} bytes");
    assert_eq!(status_of(&bad.status(), "endless__*").last_error, Some(why));
}

#[tokio::test]
async fn a_server_is_refused_over_each_bound_of_its_limits() {
    let (logs, _guard) = CapturedLogs::capture(tracing::Level::INFO);
    // 10,001 tools with 1 KB descriptions (the build before issue 26 offered them all).
    let many: Vec<_> = (0..10_001)
        .map(|i| tool(&format!("t{i}"), &"d".repeat(1024)))
        .collect();
    let server = McpTestServer::start_paging(Paging::By(1000), many).await;
    let source = McpServer::start(&agent_key(), &spec(&server.url, ""), &no_secrets());
    refused(
        &source,
        "tracker",
        "more than 1000 tools (limits.maxListedTools)",
    )
    .await;
    assert!(source.specs().is_empty());

    // Pages: a limit of 3 pages of 1,000 tools each.
    let source = McpServer::start(
        &agent_key(),
        &spec(
            &server.url,
            ", limits: {maxListPages: 3, maxListedTools: 100000, maxListBytes: 67108864}",
        ),
        &no_secrets(),
    );
    refused(
        &source,
        "tracker",
        "more than 3 pages of tools (limits.maxListPages)",
    )
    .await;

    // Bytes: 100 KB in all.
    let source = McpServer::start(
        &agent_key(),
        &spec(
            &server.url,
            ", limits: {maxListedTools: 100000, maxListBytes: 102400}",
        ),
        &no_secrets(),
    );
    refused(
        &source,
        "tracker",
        "more than 102400 bytes of tools (limits.maxListBytes)",
    )
    .await;

    // One answer larger than the transport reads (a 5.8 MB description).
    let huge = McpTestServer::start(
        Era::Current,
        vec![tool("big", &"x".repeat(5_800_000)), tool("echo", "Echo.")],
    )
    .await;
    let source = McpServer::start(&agent_key(), &spec(&huge.url, ""), &no_secrets());
    let why = refused(&source, "tracker", "(limits.maxListBytes").await;
    assert!(
        why.contains("an answer of more than 4194304 bytes"),
        "{why}"
    );

    let logged = logs.text();
    let longest = logged.lines().map(str::len).max().unwrap_or(0);
    assert!(logged.contains("MCP tools unavailable"), "{logged}");
    assert!(longest < 4096, "a log line of {longest} bytes");
}

#[tokio::test]
async fn what_a_server_offers_is_cut_to_its_bounds_and_status_says_so() {
    // 300 tools, the first with a 1 MB description: 64 are offered (the first ones listed),
    // that description is cut, the rest are one entry of status.
    let mut tools: Vec<_> = (0..300)
        .map(|i| tool(&format!("t{i:03}"), "A tool."))
        .collect();
    tools[0] = tool("t000", &"é".repeat(500_000));
    let server = McpTestServer::start_paging(Paging::By(100), tools).await;
    let source = McpServer::start(&agent_key(), &spec(&server.url, ""), &no_secrets());
    until_offers(&source, "tracker__t000").await;
    let specs = source.specs();
    assert_eq!(specs.len(), 64, "limits.maxTools");
    assert_eq!(specs[63].name, "tracker__t063");
    assert!(
        specs[0].description.len() <= 2048,
        "limits.maxDescriptionBytes"
    );
    let status = source.status();
    assert_eq!(
        status_of(&status, "tracker__t000").note.as_deref(),
        Some("description cut from 1000000 to 2048 bytes (limits.maxDescriptionBytes)")
    );
    assert_eq!(
        status_of(&status, "tracker__*").last_error.as_deref(),
        Some("MCP server tracker: 236 more of its tools are not offered: at most 64 are (limits.maxTools); name the ones to offer in its tools allowlist")
    );
    assert_eq!(status.len(), 65);
    let reported = serde_json::to_vec(&status).unwrap().len();
    assert!(reported < 16 * 1024, "status.tools is {reported} bytes");

    // Settable per server.
    let source = McpServer::start(
        &agent_key(),
        &spec(
            &server.url,
            ", limits: {maxTools: 5, maxDescriptionBytes: 100}",
        ),
        &no_secrets(),
    );
    until_offers(&source, "tracker__t000").await;
    assert_eq!(source.specs().len(), 5);
    assert!(source.specs()[0].description.len() <= 100);
}

#[tokio::test]
async fn a_storm_of_list_changed_notifications_is_answered_a_few_times() {
    for era in [Era::Current, Era::Legacy] {
        let server = McpTestServer::start(era, tracker_tools()).await;
        *server.world.paging.lock().unwrap() = Paging::By(100);
        let source = McpServer::start(&agent_key(), &spec(&server.url, ""), &no_secrets());
        until_offers(&source, "tracker__echo").await;
        until_known(&server, era).await;
        // Three seconds of notifications, one a millisecond (the build before issue 26
        // listed ~340 times a second).
        let before = server.lists();
        let storm = Instant::now();
        let mut told = 0;
        while storm.elapsed() < Duration::from_secs(3) {
            server.tell_changed().await;
            told += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The last notification is still answered, once the interval has passed.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let lists = server.lists() - before;
        println!("{era:?}: {told} tools/list_changed notifications, {lists} listings");
        assert!(
            (1..=4).contains(&lists),
            "{era:?}: {lists} listings for {told} notifications in 3 s (limits.minRelistSeconds: 2)"
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn a_connection_lost_mid_call_is_said_in_plain_words() {
    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    let source = McpServer::start(&agent_key(), &spec(&server.url, ""), &no_secrets());
    until_offers(&source, "tracker__slow").await;
    let stopping = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.stop().await;
    };
    let ((v, ok), ()) = tokio::join!(call(&source, "tracker__slow", json!({})), stopping);
    assert!(!ok, "{v}");
    let error = v["error"].as_str().unwrap();
    for said in [error.to_string(), format!("{:?}", source.status())] {
        assert!(
            !said.contains("::") && !said.contains("Transport ["),
            "no type names of the SDK: {said}"
        );
    }
    assert!(error.starts_with("MCP "), "{error}");
}
