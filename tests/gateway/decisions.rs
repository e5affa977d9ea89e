//! Humans answer paused tool calls: `POST /v1/spaces/{ns}/{space}/tool-calls/{callId}`.

use serde_json::{json, Value};

use agentfleet::gateway::Limits;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{now_ms, CallKind, EventKind, HumanCall, InboxEvent, ReadQuery, Sender};

use super::fixture::*;
use agentfleet::identity::AgentKey;

fn oncall() -> AgentKey {
    AgentKey::new("ops", "oncall")
}

/// Registers a call of `agent` asked in `space` (of the agent's namespace).
async fn paused(
    f: &Fixture,
    agent: &AgentKey,
    tool: &str,
    kind: CallKind,
    space: &str,
    schema: Option<Value>,
) -> String {
    let call = HumanCall::new(
        agent,
        tool,
        kind,
        space,
        json!({"deployment": "api"}),
        schema,
        60_000,
    )
    .unwrap();
    f.store.register_human_call(&call).await.unwrap();
    call.id.to_string()
}

impl Fixture {
    async fn answer(
        &self,
        token: Option<&str>,
        space: &str,
        call: &str,
        body: Value,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!(
                "{}/v1/spaces/ops/{space}/tool-calls/{call}",
                self.base
            ))
            .json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    }

    async fn inbox(&self, agent: &AgentKey) -> Vec<InboxEvent> {
        self.store.peek_inbox(agent, 10).await.unwrap()
    }

    /// The space's log, oldest first.
    async fn log(&self, space: &str) -> Vec<(Sender, String)> {
        let mut log = self
            .store
            .read_messages(
                &SpaceKey::new("ops", space),
                &ReadQuery {
                    limit: 50,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        log.reverse();
        log.into_iter().map(|m| (m.sender, m.text)).collect()
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_member_approves_a_paused_call_once_and_the_space_records_it() {
    let f = start(Limits::default()).await;
    let id = paused(
        &f,
        &oncall(),
        "restart_deployment",
        CallKind::Approval,
        "engineering",
        None,
    )
    .await;
    let mut sse = f.stream(HUSAM, "engineering", None).await;
    let approve = json!({"decision": "approve", "reason": "looks safe"});

    // Refused, writing nothing: no token, a service, a non-member, the wrong space, an id
    // nobody registered or that is no id, an answer that is not the approval's.
    let (s, v) = f.answer(None, "engineering", &id, approve.clone()).await;
    assert_eq!((s, code(&v)), (401, "unauthenticated"), "{v}");
    let (s, v) = f
        .answer(Some(ALERTS), "engineering", &id, approve.clone())
        .await;
    assert_eq!((s, code(&v)), (403, "not_member"), "{v}");
    let (s, v) = f
        .answer(Some(MUHAMMAD), "engineering", &id, approve.clone())
        .await;
    assert_eq!((s, code(&v)), (403, "not_member"), "{v}");
    let (s, v) = f.answer(Some(HUSAM), "family", &id, approve.clone()).await;
    assert_eq!((s, code(&v)), (404, "not_found"), "asked elsewhere: {v}");
    let other = "ops.oncall.0123456789abcdef0123456789abcdef";
    let (s, v) = f
        .answer(Some(HUSAM), "engineering", other, approve.clone())
        .await;
    assert_eq!((s, code(&v)), (404, "not_found"), "{v}");
    let (s, v) = f
        .answer(Some(HUSAM), "engineering", "not-a-call", approve.clone())
        .await;
    assert_eq!((s, code(&v)), (404, "not_found"), "{v}");
    let (s, v) = f
        .answer(
            Some(HUSAM),
            "engineering",
            &id,
            json!({"result": {"ok": true}}),
        )
        .await;
    assert_eq!((s, code(&v)), (400, "invalid_request"), "{v}");
    let (s, v) = f
        .answer(
            Some(HUSAM),
            "engineering",
            &id,
            json!({"decision": "maybe"}),
        )
        .await;
    assert_eq!((s, code(&v)), (400, "invalid_request"), "{v}");
    assert!(f.inbox(&oncall()).await.is_empty());
    assert!(!f.store.call(&parse(&id)).await.unwrap().unwrap().done);
    assert!(f.log("engineering").await.is_empty());

    // Approved: one event in the agent's inbox, one notice in the space's log.
    let (s, v) = f
        .answer(Some(HUSAM), "engineering", &id, approve.clone())
        .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(
        v,
        json!({"callId": id, "decision": "approved", "woke": true})
    );
    let inbox = f.inbox(&oncall()).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].kind, EventKind::ToolResult);
    assert_eq!(
        inbox[0].data.as_ref().unwrap(),
        &json!({"callId": id, "tool": "restart_deployment", "decision": "approved", "by": "Husam", "reason": "looks safe"})
    );
    let audit = format!("Husam approved restart_deployment (call {id}): looks safe");
    assert_eq!(
        f.log("engineering").await,
        [(Sender::system(), audit.clone())]
    );
    let (_, live) = sse.next_message().await;
    assert_eq!(
        (&live["text"], &live["sender"]["id"]),
        (&json!(audit), &json!("agentfleet"))
    );

    // A second answer, either way: conflict, nothing more written.
    for body in [approve, json!({"decision": "deny"})] {
        let (s, v) = f.answer(Some(HUSAM), "engineering", &id, body).await;
        assert_eq!((s, code(&v)), (409, "conflict"), "{v}");
    }
    assert_eq!(f.inbox(&oncall()).await.len(), 1);
    assert_eq!(f.log("engineering").await.len(), 1);
}

fn parse(id: &str) -> agentfleet::store::CallId {
    agentfleet::store::CallId::parse(id).unwrap()
}

#[tokio::test]
async fn denials_and_interactive_results_reach_the_agent() {
    let f = start(Limits::default()).await;
    let deny = paused(
        &f,
        &oncall(),
        "restart_deployment",
        CallKind::Approval,
        "engineering",
        None,
    )
    .await;
    let (s, v) = f
        .answer(
            Some(HUSAM),
            "engineering",
            &deny,
            json!({"decision": "deny", "reason": "not during the freeze"}),
        )
        .await;
    assert_eq!((s, &v["decision"]), (202, &json!("denied")), "{v}");
    let inbox = f.inbox(&oncall()).await;
    assert_eq!(
        inbox[0].data.as_ref().unwrap()["reason"],
        "not during the freeze"
    );
    assert_eq!(
        inbox[0].text.as_deref(),
        Some(format!("call {deny} denied by Husam").as_str())
    );

    let schema = json!({
        "type": "object",
        "required": ["confirmed"],
        "properties": {"confirmed": {"type": "boolean"}, "note": {"type": "string"}},
        "additionalProperties": false
    });
    let form = paused(
        &f,
        &oncall(),
        "confirm_deployment",
        CallKind::Interactive,
        "engineering",
        Some(schema),
    )
    .await;
    for bad in [
        json!({"result": {"confirmed": "yes"}}),
        json!({"result": {"note": "?"}}),
        json!({"result": {"confirmed": true, "extra": 1}}),
        json!({"decision": "approve"}),
    ] {
        let (s, v) = f
            .answer(Some(HUSAM), "engineering", &form, bad.clone())
            .await;
        assert_eq!((s, code(&v)), (400, "invalid_request"), "{bad}: {v}");
    }
    let (s, v) = f
        .answer(
            Some(HUSAM),
            "engineering",
            &form,
            json!({"result": {"confirmed": "yes"}}),
        )
        .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("confirmed"),
        "names the problem: {s} {v}"
    );
    assert_eq!(f.inbox(&oncall()).await.len(), 1, "only the denial");
    let (s, v) = f
        .answer(
            Some(HUSAM),
            "engineering",
            &form,
            json!({"result": {"confirmed": true}}),
        )
        .await;
    assert_eq!((s, &v["decision"]), (202, &json!("answered")), "{v}");
    let inbox = f.inbox(&oncall()).await;
    assert_eq!(inbox.len(), 2);
    assert_eq!(
        inbox[1].data.as_ref().unwrap()["result"],
        json!({"confirmed": true})
    );
    let log: Vec<String> = f
        .log("engineering")
        .await
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        log,
        [
            format!("Husam denied restart_deployment (call {deny}): not during the freeze"),
            format!("Husam answered confirm_deployment (call {form}): {{\"confirmed\":true}}"),
        ]
    );
}

#[tokio::test]
async fn expired_and_foreign_calls_are_refused() {
    let f = start(Limits::default()).await;
    let mut late = HumanCall::new(
        &oncall(),
        "restart_deployment",
        CallKind::Approval,
        "engineering",
        json!({}),
        None,
        60_000,
    )
    .unwrap();
    late.record.expires_ms = now_ms() - 1;
    f.store.register_human_call(&late).await.unwrap();
    let (s, v) = f
        .answer(
            Some(HUSAM),
            "engineering",
            late.id.as_str(),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((s, code(&v)), (410, "expired"), "{v}");

    // An agent of another namespace, whose call names a space of the same name.
    let foreign = paused(
        &f,
        &AgentKey::new("other", "oncall"),
        "restart_deployment",
        CallKind::Approval,
        "engineering",
        None,
    )
    .await;
    let (s, v) = f
        .answer(
            Some(HUSAM),
            "engineering",
            &foreign,
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!((s, code(&v)), (404, "not_found"), "{v}");
    assert!(f.inbox(&oncall()).await.is_empty());
    assert!(f.inbox(&AgentKey::new("other", "oncall")).await.is_empty());
    assert!(f.log("engineering").await.is_empty());
}

#[tokio::test]
async fn each_person_lists_their_spaces_and_the_calls_waiting_for_them() {
    let f = start(Limits::default()).await;
    let assistant = AgentKey::new("ops", "assistant");
    let family = paused(
        &f,
        &assistant,
        "restart_deployment",
        CallKind::Approval,
        "family",
        None,
    )
    .await;
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    let engineering = paused(
        &f,
        &oncall(),
        "confirm",
        CallKind::Interactive,
        "engineering",
        Some(schema.clone()),
    )
    .await;
    let names = |v: &Value| -> Vec<String> {
        v["spaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                format!(
                    "{}/{}",
                    s["namespace"].as_str().unwrap(),
                    s["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    let ids = |v: &Value| -> Vec<String> {
        v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["callId"].as_str().unwrap().to_string())
            .collect()
    };

    // Husam is in both spaces, Muhammad only in the family; a service is in none.
    let (status, husam) = f.get(Some(HUSAM), "/v1/spaces").await;
    assert_eq!(status, 200);
    assert_eq!(names(&husam), ["ops/engineering", "ops/family"]);
    assert_eq!(
        names(&f.get(Some(MUHAMMAD), "/v1/spaces").await.1),
        ["ops/family"]
    );
    assert_eq!(
        names(&f.get(Some(ALERTS), "/v1/spaces").await.1),
        Vec::<String>::new()
    );

    // The calls: each person sees those of their spaces, with what answering them needs.
    let (status, calls) = f.get(Some(HUSAM), "/v1/calls").await;
    assert_eq!(status, 200);
    assert_eq!(ids(&calls), [family.clone(), engineering.clone()]);
    let c = &calls["calls"][1];
    assert_eq!(
        (
            c["space"].as_str(),
            c["agent"].as_str(),
            c["tool"].as_str(),
            c["kind"].as_str()
        ),
        (
            Some("engineering"),
            Some("oncall"),
            Some("confirm"),
            Some("interactive")
        )
    );
    assert_eq!(c["resultSchema"], schema);
    assert_eq!(c["arguments"], json!({"deployment": "api"}));
    assert!(c["expiresMs"].as_i64().unwrap() > c["sinceMs"].as_i64().unwrap());
    assert_eq!(
        ids(&f.get(Some(MUHAMMAD), "/v1/calls").await.1),
        std::slice::from_ref(&family)
    );
    assert_eq!(
        ids(&f.get(Some(ALERTS), "/v1/calls").await.1),
        Vec::<String>::new()
    );

    // Answered, it is no longer waiting.
    let answered = f
        .http
        .post(format!(
            "{}/v1/spaces/ops/family/tool-calls/{family}",
            f.base
        ))
        .bearer_auth(MUHAMMAD)
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 202);
    assert_eq!(ids(&f.get(Some(HUSAM), "/v1/calls").await.1), [engineering]);
    let (status, _) = f.get(Some("no-such-token"), "/v1/calls").await;
    assert_eq!(status, 401);
}

/// `GET /v1/agents/{ns}/{agent}`: what the console's agent page shows, for the members of the
/// agent's spaces only; anyone else learns nothing, not even whether it exists.
#[tokio::test]
async fn an_agent_is_shown_to_the_members_of_its_spaces() {
    use agentfleet::store::AgentFacts;
    let f = start(Limits::default()).await;
    let oncall = oncall();
    // The fleet each person sees: the agents of their spaces, with the spaces they share
    // (issue 43's overview); a service sees none.
    let names = |v: &Value| -> Vec<(String, Value)> {
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    format!(
                        "{}/{}",
                        a["namespace"].as_str().unwrap(),
                        a["name"].as_str().unwrap()
                    ),
                    a["spaces"].clone(),
                )
            })
            .collect()
    };
    let (status, fleet) = f.get(Some(HUSAM), "/v1/agents").await;
    assert_eq!(status, 200);
    assert_eq!(
        names(&fleet),
        [
            ("ops/assistant".to_string(), json!(["family"])),
            ("ops/oncall".to_string(), json!(["engineering"])),
            ("ops/reviewer".to_string(), json!(["engineering"])),
        ]
    );
    let (_, fleet) = f.get(Some(MUHAMMAD), "/v1/agents").await;
    assert_eq!(
        names(&fleet),
        [("ops/assistant".to_string(), json!(["family"]))]
    );
    let (status, fleet) = f.get(Some(ALERTS), "/v1/agents").await;
    assert_eq!((status, names(&fleet).len()), (200, 0));
    // Before the operator has described it.
    let (status, seen) = f.get(Some(HUSAM), "/v1/agents/ops/oncall").await;
    assert_eq!((status, &seen["state"]), (200, &json!("unknown")));
    f.store
        .apply_facts(
            &oncall,
            &AgentFacts {
                model_provider: "openai".into(),
                model_name: "gpt-4o-mini".into(),
                tokens_per_day: Some(1000),
                ..AgentFacts::default()
            },
        )
        .await
        .unwrap();
    paused(
        &f,
        &oncall,
        "confirm",
        CallKind::Interactive,
        "engineering",
        None,
    )
    .await;

    // Husam shares the engineering space with it.
    let (status, seen) = f.get(Some(HUSAM), "/v1/agents/ops/oncall").await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["state"], "stopped", "no worker holds it");
    assert_eq!(
        (&seen["modelProvider"], &seen["modelName"]),
        (&json!("openai"), &json!("gpt-4o-mini"))
    );
    assert_eq!(seen["spaces"], json!(["engineering"]));
    assert_eq!(seen["tokensPerDay"], 1000);
    assert_eq!(seen["tokensToday"], 0);
    assert_eq!(seen["asking"], 1);
    assert_eq!(seen["checkpoints"], json!([]));
    assert!(seen.get("tokensPerMonth").is_none());

    // Muhammad does not: the same answer as for an agent that does not exist.
    let (status, hidden) = f.get(Some(MUHAMMAD), "/v1/agents/ops/oncall").await;
    assert_eq!(status, 404);
    assert_eq!(
        hidden["error"]["message"],
        "no agent \"ops/oncall\" in your spaces"
    );
    let (status, _) = f.get(Some(HUSAM), "/v1/agents/ops/ghost").await;
    assert_eq!(status, 404);

    // What the operator says it cannot do comes first.
    f.store
        .apply_facts(
            &oncall,
            &AgentFacts {
                problem: Some("Secret openai-key not found".into()),
                ..AgentFacts::default()
            },
        )
        .await
        .unwrap();
    let (_, seen) = f.get(Some(HUSAM), "/v1/agents/ops/oncall").await;
    assert_eq!(
        (&seen["state"], &seen["problem"]),
        (&json!("failed"), &json!("Secret openai-key not found"))
    );
}

#[tokio::test]
async fn a_group_of_the_token_file_answers_a_call_that_names_it() {
    use agentfleet::gateway::auth::{hash_token, Tokens};
    let file = std::env::temp_dir().join(format!("agentfleet-groups-{}", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "tokens:\n- {{sha256: {}, kind: human, id: husam, name: Husam}}\n- {{sha256: {}, kind: human, id: fatima, name: Fatima, groups: [finance]}}\n",
            hash_token(HUSAM),
            hash_token("tok-fatima")
        ),
    )
    .unwrap();
    let tokens = Tokens::load(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    let f = start_with(Limits::default(), tokens).await;
    let call = HumanCall::new(
        &oncall(),
        "refund",
        CallKind::Approval,
        "engineering",
        json!({"order": 7}),
        None,
        60_000,
    )
    .unwrap()
    .answered_by(vec!["group:finance".into()]);
    f.store.register_human_call(&call).await.unwrap();
    let id = call.id.to_string();
    let approve = json!({"decision": "approve"});
    // Husam is in the space, not in the group: refused, with who may.
    let (status, body) = f
        .answer(Some(HUSAM), "engineering", &id, approve.clone())
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    assert!(
        body.to_string().contains("only group:finance may answer"),
        "{body}"
    );
    // Fatima is in the group, not in the space: hers to answer.
    let (status, body) = f
        .answer(Some("tok-fatima"), "engineering", &id, approve)
        .await;
    assert_eq!(status, 202, "{body}");
    let inbox = f.inbox(&oncall()).await;
    assert_eq!(inbox[0].data.as_ref().unwrap()["by"], json!("Fatima"));
}
