//! The Agent controller and the data-plane status writer against a mocked API server, for
//! tools: `ToolsConfigured` from the `headersFrom` Secrets, the Secrets mounted in the worker,
//! the callback URL, `status.tools` and `ToolsReady` written under the data plane's field
//! manager, and no Secret value anywhere the operator writes or logs.

use std::time::Duration;

use http::{Method, StatusCode};
use kube::runtime::controller::Action;
use serde_json::{json, Value};

use super::{agent_yaml, answering, condition, expect, harness, lobby, not_found, tracked_phase};
use crate::crd::{Agent, AgentPhase, AgentStatus};
use crate::identity::AgentKey;
use crate::store::{AgentObservation, ToolRecord};

/// The echo agent with an HTTP tool and an MCP server taking headers from `tracker-token`.
fn tooled() -> Agent {
    agent_yaml(
        r#"  tools:
    http:
      - name: open_ticket
        description: Open a ticket.
        url: "https://tracker.example.com/api/tickets"
        headersFrom: {secretName: tracker-token}
    mcp:
      - name: tracker
        url: "http://mcp.tracker.svc/mcp"
        headersFrom: {secretName: tracker-token}"#,
    )
}

/// A Secret as the API server would answer a full GET of it (the operator asks only for its
/// metadata; a server that answered with more must still leak nothing).
fn tracker_secret() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "tracker-token", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
           "data": {"Authorization": "QmVhcmVyIHRyYWNrZXItc2VjcmV0LXZhbHVl"},
           "stringData": {"X-Api-Key": "tracker-secret-value"}})
}

/// What must never appear: the Secret's values, encoded or not.
const VALUES: [&str; 3] = [
    "tracker-secret-value",
    "QmVhcmVyIHRyYWNrZXItc2VjcmV0LXZhbHVl",
    "Bearer tracker",
];

#[tokio::test]
async fn a_missing_headers_secret_is_a_false_condition_and_a_warning_then_heals() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, bodies) = h
        .run_agent(
            tooled(),
            vec![
                answering(
                    expect(
                        Method::GET,
                        "/api/v1/namespaces/default/secrets/tracker-token",
                    ),
                    StatusCode::NOT_FOUND,
                    not_found("secrets", "tracker-token"),
                ),
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
                expect(Method::POST, "/events"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(Duration::from_secs(30)),
        "Secrets are not watched: look again soon"
    );
    // The worker is configured as with a missing model key: applied, its pod waiting for the
    // Secret (a required volume), the agent Failed until the Secret exists.
    let pod = &bodies[2]["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "secret-tracker-token")
        .unwrap_or_else(|| panic!("no Secret volume: {pod}"));
    assert_eq!(
        volume["secret"],
        json!({"secretName": "tracker-token", "optional": false}),
        "one volume for the Secret both tools use"
    );
    let mounts = &pod["containers"][0]["volumeMounts"];
    assert!(
        mounts.as_array().unwrap().contains(&json!({
            "name": "secret-tracker-token",
            "mountPath": "/etc/agentfleet/secrets/tracker-token",
            "readOnly": true
        })),
        "{mounts}"
    );
    let env = &pod["containers"][0]["env"];
    assert!(
        env.as_array().unwrap().contains(&json!({
            "name": "AGENTFLEET_CALLBACK_URL",
            "value": "http://gateway.agentfleet.svc:80"
        })),
        "{env}"
    );
    assert_eq!(bodies[3]["reason"], "WorkerConfigured");
    let warning = &bodies[4];
    assert_eq!(
        (warning["type"].as_str(), warning["reason"].as_str()),
        (Some("Warning"), Some("SecretNotFound"))
    );
    assert_eq!(
        warning["note"],
        "Secret tracker-token not found (headersFrom of HTTP tool open_ticket, MCP server tracker)"
    );
    let status = &bodies[5]["status"];
    let tools = condition(status, "ToolsConfigured");
    assert_eq!(
        (tools["status"].as_str(), tools["reason"].as_str()),
        (Some("False"), Some("SecretNotFound"))
    );
    assert_eq!(condition(status, "Ready")["reason"], "SecretNotFound");
    assert_eq!(condition(status, "ModelConfigured")["status"], "True");
    assert_eq!(tracked_phase(&h), Some(AgentPhase::Failed));

    // The Secret is created: True, a Normal event for the transition, the same worker.
    let mut agent = tooled();
    agent.status = Some(serde_json::from_value(status.clone()).unwrap());
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, bodies) = h
        .run_agent(
            agent,
            vec![
                answering(
                    expect(Method::GET, "/secrets/tracker-token"),
                    StatusCode::OK,
                    tracker_secret(),
                ),
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));
    assert_eq!(
        (bodies[3]["type"].as_str(), bodies[3]["reason"].as_str()),
        (Some("Normal"), Some("SecretsFound"))
    );
    let status = &bodies[4]["status"];
    let tools = condition(status, "ToolsConfigured");
    assert_eq!(
        (tools["status"].as_str(), tools["reason"].as_str()),
        (Some("True"), Some("SecretsFound"))
    );
    assert_eq!(
        tools["message"],
        "headers from Secret tracker-token, mounted in the worker"
    );
    assert_eq!(
        status["configHash"],
        bodies[2]["spec"]["template"]["metadata"]["annotations"]["agentfleet.dev/config-hash"],
    );
    assert_eq!(tracked_phase(&h), Some(AgentPhase::ScaledToZero));
}

#[tokio::test]
async fn no_secret_value_reaches_the_configmap_the_deployment_status_events_or_logs() {
    let (logs, _guard) = crate::testing::CapturedLogs::capture(tracing::Level::TRACE);
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, bodies) = h
        .run_agent(
            tooled(),
            vec![
                answering(
                    expect(Method::GET, "/secrets/tracker-token"),
                    StatusCode::OK,
                    tracker_secret(),
                ),
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    result.unwrap();
    assert_eq!(bodies[0], Value::Null, "a GET: the operator sends nothing");
    assert!(
        bodies[1]["data"]["agent.yaml"]
            .as_str()
            .unwrap()
            .contains("secretName: tracker-token"),
        "the ConfigMap names the Secret"
    );
    let written = serde_json::to_string(&bodies).unwrap();
    let logged = logs.text();
    assert!(
        logged.contains("worker configuration applied"),
        "logs captured: {logged}"
    );
    for value in VALUES {
        assert!(!written.contains(value), "{value} written: {written}");
        assert!(!logged.contains(value), "{value} logged: {logged}");
    }
}

#[tokio::test]
async fn a_secret_the_operator_may_not_read_is_unknown_not_failed() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let forbidden = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": "secrets \"tracker-token\" is forbidden: User \"system:serviceaccount:agentfleet:agentfleet\" cannot get resource \"secrets\""});
    let (result, bodies) = h
        .run_agent(
            tooled(),
            vec![
                answering(
                    expect(Method::GET, "/secrets/tracker-token"),
                    StatusCode::FORBIDDEN,
                    forbidden,
                ),
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
                expect(Method::POST, "/events"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(30)));
    let tools = condition(&bodies[5]["status"], "ToolsConfigured");
    assert_eq!(
        (tools["status"].as_str(), tools["reason"].as_str()),
        (Some("Unknown"), Some("SecretUnreadable"))
    );
    assert_eq!(
        tracked_phase(&h),
        Some(AgentPhase::ScaledToZero),
        "not Failed"
    );
}

#[tokio::test]
async fn invalid_tools_are_an_invalid_spec_and_the_worker_is_left_alone() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let agent = agent_yaml(
        r#"  tools:
    http:
      - {name: skip, description: d, url: "http://t/{id}", inputSchema: {type: object, properties: {ticket: {}}}}
    mcp:
      - {name: tracker, url: "http://m/mcp"}
      - {name: tracker, url: "http://n/mcp"}
  cycle: {phases: [{activeTools: [tracker__create, jira__create]}]}"#,
    );
    let (result, bodies) = h
        .run_agent(
            agent,
            vec![
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    result.unwrap();
    assert_eq!(bodies[0]["reason"], "InvalidSpec");
    let ready = condition(&bodies[1]["status"], "Ready");
    let message = ready["message"].as_str().unwrap();
    for want in [
        "tools.http[0].name \"skip\" is the name of a built-in tool",
        "url placeholder {id} is not a property of inputSchema",
        "tools.mcp[1].name \"tracker\" is used by another MCP server",
        "activeTools names \"jira__create\"",
    ] {
        assert!(message.contains(want), "{want}: {message}");
    }
    assert!(!message.contains("tracker__create"), "{message}");
}

#[tokio::test]
async fn status_tools_and_tools_ready_are_written_under_the_data_planes_field_manager() {
    use crate::operator::dataplane::cluster::{Cluster, KubeCluster, Notice};
    use crate::operator::status::{data_status, find, notice, TOOLS_READY};
    use k8s_openapi::api::core::v1::ObjectReference;

    let h = harness(vec![], vec![lobby(true)]);
    let mut h = h;
    let handle = h.handle.take().unwrap();
    let seen = AgentObservation {
        worker: true,
        tools: Some(vec![
            ToolRecord {
                name: "send_message".into(),
                source: "builtin".into(),
                ready: true,
                ..Default::default()
            },
            ToolRecord {
                name: "tracker__*".into(),
                source: "mcp:tracker".into(),
                ready: false,
                last_error: Some(
                    "cannot reach http://mcp.tracker.svc/mcp: connection refused".into(),
                ),
                ..Default::default()
            },
        ]),
        ..AgentObservation::default()
    };
    let now = k8s_openapi::jiff::Timestamp::from_second(1_795_000_000).unwrap();
    let status: AgentStatus =
        data_status(false, Some(1), 0, None, None, None, &seen, &[], now, |c| {
            format!("r{c}")
        });
    let base = serde_json::to_value(tooled()).unwrap();
    let verifier = tokio::spawn(super::serve(
        handle,
        vec![
            expect(
                Method::PATCH,
                "/apis/agentfleet.dev/v1alpha1/namespaces/default/agents/echo/status?&force=true&fieldManager=agentfleet-dataplane",
            ),
            expect(Method::POST, "/namespaces/default/events"),
        ],
        base,
    ));
    let cluster = KubeCluster::new(h.ctx.client.clone(), h.ctx.recorder.clone());
    cluster
        .write_status(&AgentKey::new("default", "echo"), &status)
        .await
        .unwrap();
    // The transition's Event, as the loop publishes it (which transitions: dataplane tests).
    let ready = find(&status.conditions, TOOLS_READY).unwrap();
    let kind = notice(None, ready, true).unwrap();
    let object = ObjectReference {
        api_version: Some("agentfleet.dev/v1alpha1".into()),
        kind: Some("Agent".into()),
        name: Some("echo".into()),
        namespace: Some("default".into()),
        ..ObjectReference::default()
    };
    let warning = Notice {
        kind,
        reason: ready.reason.clone(),
        action: "Observe",
        note: ready.message.clone(),
    };
    cluster.publish(&object, warning).await;
    let bodies = verifier.await.unwrap();
    let event = &bodies[1];
    assert_eq!(
        (event["type"].as_str(), event["reason"].as_str()),
        (Some("Warning"), Some("McpUnreachable"))
    );
    assert_eq!(event["regarding"]["name"], "echo");
    assert!(event["note"]
        .as_str()
        .is_some_and(|n| n.contains("MCP server tracker unreachable")));
    let written = &bodies[0]["status"];
    assert_eq!(
        written["tools"],
        json!([
            {"name": "send_message", "source": "builtin", "ready": true},
            {"name": "tracker__*", "source": "mcp:tracker", "ready": false,
             "lastError": "cannot reach http://mcp.tracker.svc/mcp: connection refused"}
        ])
    );
    let ready = condition(written, TOOLS_READY);
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("McpUnreachable"))
    );
    assert_eq!(
        ready["message"],
        "1 of 2 tool(s) unavailable: MCP server tracker unreachable: cannot reach http://mcp.tracker.svc/mcp: connection refused"
    );
    assert_eq!(ready["lastTransitionTime"], "2026-11-18T11:06:40Z");
    assert!(
        written["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "ToolsConfigured" && c["type"] != "Ready"),
        "the reconcile's conditions are not the data plane's to write"
    );
}

#[test]
fn the_gateway_url_flag_reaches_the_worker_defaults() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: crate::operator::Args,
    }
    let parse = |extra: &[&str]| {
        let mut argv = vec!["operator", "--redis", "redis://r:6379/"];
        argv.extend(extra);
        Cli::try_parse_from(argv).map(|c| c.args.worker_defaults(None).callback_url)
    };
    assert_eq!(parse(&[]).unwrap(), None);
    assert_eq!(
        parse(&[
            "--gateway-url",
            "http://agentfleet-gateway.agentfleet.svc:80/"
        ])
        .unwrap()
        .as_deref(),
        Some("http://agentfleet-gateway.agentfleet.svc:80"),
        "without its trailing slash"
    );
    for bad in [
        "agentfleet-gateway:80",
        "http://",
        "http://g/?x=1",
        "ftp://g",
    ] {
        assert!(parse(&["--gateway-url", bad]).is_err(), "{bad}");
    }
}
