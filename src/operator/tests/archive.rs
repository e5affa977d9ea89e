//! The Agent controller with an archive (`--archive`), against a mocked API server and a real
//! S3-compatible server: the Secret beside each worker and its `envFrom`, its values nowhere
//! else (ConfigMap, Deployment, status, Events, logs); a deleted Agent's archived checkpoints
//! removed with it, kept with `retainOnDelete`, and an archive that is away holding the
//! deletion with a condition, then letting it go.

use http::Method;

use super::agents::{deleted_agent, deletion_script, removes_finalizer};
use super::{agent_yaml, condition, context_on, expect, lobby, Harness};
use crate::archive::Archive;
use crate::identity::AgentKey;
use crate::operator::agent;
use crate::testing::{s3, S3Server};

/// A harness whose operator has the archive `prod` of `server`.
fn archived(server: &S3Server) -> (Harness, Archive) {
    let archive = Archive::open_with(&server.url("prod"), &server.env()).unwrap();
    let h = context_on(
        vec![],
        vec![lobby(true)],
        true,
        None,
        Some(archive.clone()),
        Vec::new(),
    );
    (h, archive)
}

/// What must never be written or logged: the server's keys, as they are and in base64.
fn credentials() -> Vec<String> {
    // As the API server's JSON carries a Secret's data.
    let b64 = |s: &str| {
        serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec()))
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    };
    vec![
        s3::SECRET_KEY.into(),
        s3::ACCESS_KEY.into(),
        b64(s3::SECRET_KEY),
        b64(s3::ACCESS_KEY),
    ]
}

#[tokio::test]
async fn the_archive_reaches_each_worker_in_a_secret_beside_it_and_nowhere_else() {
    let (logs, _guard) = crate::testing::CapturedLogs::capture(tracing::Level::TRACE);
    let server = S3Server::start("fleet").unwrap();
    let (mut h, _) = archived(&server);
    let (result, bodies) = h
        .run_agent(
            agent_yaml(""),
            vec![
                expect(Method::PATCH, "/api/v1/namespaces/default/secrets/echo-worker-archive?&force=true&fieldManager=agentfleet-operator"),
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    result.unwrap();

    // The Secret: the URL and the store's variables, owned by the Agent.
    let secret = &bodies[0];
    assert_eq!(secret["kind"], "Secret");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["kind"], "Agent");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["name"], "echo");
    let value = |k: &str| {
        let bytes: k8s_openapi::ByteString = serde_json::from_value(secret["data"][k].clone())
            .unwrap_or_else(|e| panic!("{k}: {e}"));
        String::from_utf8(bytes.0).unwrap()
    };
    assert_eq!(value(crate::archive::URL_ENV), "s3://fleet/prod");
    assert_eq!(value("AWS_SECRET_ACCESS_KEY"), s3::SECRET_KEY);
    assert_eq!(value("AWS_ENDPOINT_URL"), server.endpoint());

    // The worker loads it whole; the hash in its pod is the one in the status.
    let pod = &bodies[2]["spec"]["template"];
    assert_eq!(
        pod["spec"]["containers"][0]["envFrom"],
        serde_json::json!([{"secretRef": {"name": "echo-worker-archive", "optional": false}}])
    );
    assert_eq!(
        bodies[4]["status"]["configHash"],
        pod["metadata"]["annotations"]["agentfleet.dev/config-hash"]
    );

    // Nothing of it in the ConfigMap, the Deployment, the Event, the status or the logs.
    let written = serde_json::to_string(&bodies[1..]).unwrap();
    let logged = logs.text();
    assert!(
        logged.contains("worker configuration applied"),
        "logs captured: {logged}"
    );
    for value in credentials() {
        assert!(!written.contains(&value), "{value} written: {written}");
        assert!(!logged.contains(&value), "{value} logged: {logged}");
    }
    assert!(!written.contains(&server.endpoint()), "{written}");
}

/// Archives checkpoints of `agent` after `cycles` in `archive`.
async fn put(archive: &Archive, agent: &AgentKey, cycles: &[u64]) {
    for &cycle in cycles {
        archive
            .put(&crate::archive::tests::doc(agent, cycle))
            .await
            .unwrap();
    }
}

async fn cycles(archive: &Archive, agent: &AgentKey) -> Vec<u64> {
    let mut c: Vec<u64> = archive
        .list(agent)
        .await
        .unwrap()
        .iter()
        .map(|l| l.cycle)
        .collect();
    c.sort_unstable();
    c
}

#[tokio::test]
async fn deleting_an_agent_removes_its_archived_checkpoints_and_only_its_own() {
    let server = S3Server::start("fleet").unwrap();
    let (mut h, archive) = archived(&server);
    let echo = AgentKey::new("default", "echo");
    let other = AgentKey::new("default", "planner");
    put(&archive, &echo, &[3, 4]).await;
    put(&archive, &other, &[9]).await;
    let (result, bodies) = h
        .run_finalized(deleted_agent("", 1), deletion_script(true))
        .await;
    result.unwrap();
    assert_eq!(bodies[0]["reason"], "DataPlaneRemoved");
    assert!(
        bodies[0]["note"]
            .as_str()
            .unwrap()
            .contains("and its 2 archived checkpoint(s) at s3://fleet/prod/default/echo"),
        "{}",
        bodies[0]["note"]
    );
    assert!(removes_finalizer(&bodies[1]), "{}", bodies[1]);
    assert_eq!(cycles(&archive, &echo).await, Vec::<u64>::new());
    assert_eq!(cycles(&archive, &other).await, [9], "untouched");
}

#[tokio::test]
async fn retain_on_delete_keeps_the_archive_and_a_prefix_of_its_own_is_purged() {
    let server = S3Server::start("fleet").unwrap();
    let (mut h, archive) = archived(&server);
    let echo = AgentKey::new("default", "echo");
    put(&archive, &echo, &[3]).await;
    let (result, bodies) = h
        .run_finalized(
            deleted_agent("  consciousness: {retainOnDelete: true}", 1),
            deletion_script(true),
        )
        .await;
    result.unwrap();
    assert_eq!(bodies[0]["reason"], "DataPlaneRetained");
    assert!(
        bodies[0]["note"]
            .as_str()
            .unwrap()
            .contains("and its archived checkpoints at s3://fleet/prod/default/echo, kept"),
        "{}",
        bodies[0]["note"]
    );
    assert_eq!(cycles(&archive, &echo).await, [3]);

    // An Agent whose checkpoints go under a prefix of its own: purged there.
    let own = archive
        .for_agent(&crate::crd::ArchiveSpec {
            prefix: Some("team-a".into()),
            ..Default::default()
        })
        .unwrap();
    put(&own, &echo, &[5]).await;
    let (mut h, _) = archived(&server);
    let (result, _) = h
        .run_finalized(
            deleted_agent("  consciousness: {archive: {prefix: team-a}}", 1),
            deletion_script(true),
        )
        .await;
    result.unwrap();
    assert_eq!(cycles(&own, &echo).await, Vec::<u64>::new());
    assert_eq!(cycles(&archive, &echo).await, [3], "the other prefix kept");
}

#[tokio::test]
async fn an_archive_that_is_away_holds_deletion_with_a_condition_then_lets_go() {
    let (logs, _guard) = crate::testing::CapturedLogs::capture(tracing::Level::TRACE);
    let server = S3Server::start("fleet").unwrap();
    let (mut h, archive) = archived(&server);
    put(&archive, &AgentKey::new("default", "echo"), &[3]).await;
    server.stop();
    let (result, bodies) = h
        .run_finalized(deleted_agent("", 1), deletion_script(false))
        .await;
    let err = result.unwrap_err();
    assert_eq!(err.category(), "cleanup_pending", "{err}");
    assert_eq!(
        (bodies[0]["type"].as_str(), bodies[0]["reason"].as_str()),
        (Some("Warning"), Some("ArchiveUnreachable"))
    );
    let cond = condition(&bodies[1]["status"], agent::DATA_PLANE_CLEANUP);
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("False"), Some("ArchiveUnreachable"))
    );
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "cannot remove the archived checkpoints at s3://fleet/prod/default/echo: "
        ) && message.contains("retrying for up to 60s after deletion"),
        "{message}"
    );

    // The time is up: the Agent goes, and an Event names what is left where.
    let (mut h, _) = archived(&server);
    let (result, late) = h
        .run_finalized(deleted_agent("", 120), deletion_script(true))
        .await;
    result.unwrap();
    assert_eq!(late[0]["reason"], "DataPlaneCleanupAbandoned");
    assert!(
        late[0]["note"]
            .as_str()
            .unwrap()
            .ends_with("the archived checkpoints at s3://fleet/prod/default/echo are left behind"),
        "{}",
        late[0]["note"]
    );
    assert!(removes_finalizer(&late[1]), "{}", late[1]);

    let written = serde_json::to_string(&[&bodies[..], &late[..]].concat()).unwrap();
    let logged = logs.text();
    for value in credentials() {
        assert!(!written.contains(&value), "{value} written: {written}");
        assert!(!logged.contains(&value), "{value} logged: {logged}");
    }
    // Back: it is all still there to remove.
    server.resume().unwrap();
    assert_eq!(
        cycles(&archive, &AgentKey::new("default", "echo")).await,
        [3]
    );
}

#[test]
fn the_archive_flag_is_opened_once_and_a_bad_url_is_one_clear_error() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: crate::operator::Args,
    }
    let args = |extra: &[&str]| {
        let mut argv = vec!["operator", "--redis", "redis://r:6379/"];
        argv.extend(extra);
        Cli::try_parse_from(argv).unwrap().args
    };
    let none = args(&[]);
    assert!(none.open_archive().unwrap().is_none());
    assert_eq!(none.worker_defaults(None).archive, None);

    let dir = std::env::temp_dir().join(format!("agentfleet-op-archive-{}", std::process::id()));
    let url = format!("file://{}", dir.display());
    let with = args(&["--archive", &url]);
    let archive = with.open_archive().unwrap().unwrap();
    assert_eq!(archive.url(), url);
    let worker = with.worker_defaults(Some(&archive)).archive.unwrap();
    assert!(
        format!("{worker:?}").contains(crate::archive::URL_ENV),
        "{worker:?}"
    );

    for bad in ["redis://r:6379/", "file:relative", "s3:/no-bucket"] {
        let err = args(&["--archive", bad]).open_archive().unwrap_err();
        let said = format!("{err:#}");
        assert!(
            said.starts_with("--archive (AGENTFLEET_ARCHIVE_URL): archive URL"),
            "{bad}: {said}"
        );
    }
}
