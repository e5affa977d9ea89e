//! `agentfleet approve|deny|answer|calls`: what waits for a human, answered from a terminal.
//! With `--gateway` as the caller's own identity (the gateway's routes decide, as for chat
//! and the console); without, on the data plane directly — an operator's break-glass, where
//! `--as` names who answers and no membership is checked. The rule and the audit message are
//! [`crate::decisions`]'s either way.

use std::io::Write;

use anyhow::bail;

use super::remote::{Remote, Via};
use super::{agent_arg, connect, time};

use crate::api::{CallAnswered, WaitingCall, WaitingCalls};

use crate::decisions::{self, Refusal, Reply};
use crate::party::Principal;
use crate::store::prelude::*;
use crate::store::{now_ms, CallId, RedisArgs};
use crate::terminal::{sanitize, Breaks};

/// Who answers and where: the flags every answer takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Answering {
    /// The agent whose call it is, `NAMESPACE/NAME`.
    pub agent: String,
    /// The call's id, as its request in the space names it.
    pub call: String,
    /// Who answers: a person's id, as the space's members and the gateway's tokens name them
    /// (the agent and the space's log see their display name). The call's approvers are
    /// checked as on every other route: by default the humans of the space it was asked in.
    #[arg(
        long = "as",
        value_name = "ID",
        env = "USER",
        default_value = "operator"
    )]
    pub by: String,
    /// A group `--as` is in, as the gateway's token file says (approver lists name groups as
    /// `group:NAME`); once for each.
    #[arg(long = "group", value_name = "NAME")]
    pub groups: Vec<String>,
    /// Through the gateway, as your own identity (then `--as` and `--group` are not read).
    #[command(flatten)]
    pub via: Via,
    /// The data plane.
    #[command(flatten)]
    pub redis: RedisArgs,
}

/// Answering a paused tool call from a terminal. Exit codes: 0 answered, 3 no such call
/// waiting, 4 already answered, 5 expired, 6 not `--as`'s to answer, 1 anything else.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum CallCommand {
    /// Approve an agent's call waiting for approval: it runs.
    Approve {
        #[command(flatten)]
        call: Answering,
        /// Why (the agent and the space's log see it).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny an agent's call waiting for approval: it does not run, and the agent is told why.
    Deny {
        #[command(flatten)]
        call: Answering,
        /// Why (the agent and the space's log see it).
        #[arg(long)]
        reason: String,
    },
    /// Give the result of an agent's interactive tool call (JSON matching the tool's schema).
    Answer {
        #[command(flatten)]
        call: Answering,
        /// The result, as JSON.
        result: String,
    },
    /// List an agent's calls waiting for a human: tool, call id, space, since, expires.
    Calls {
        /// The agent, `NAMESPACE/NAME`.
        agent: String,
        /// One JSON object a line.
        #[arg(long)]
        json: bool,
        /// Through the gateway, as your own identity (RBAC: `get agents/calls`).
        #[command(flatten)]
        via: Via,
        #[command(flatten)]
        redis: RedisArgs,
    },
}

/// Runs `agentfleet approve|deny|answer|calls`.
pub async fn calls(cmd: CallCommand) -> anyhow::Result<()> {
    match cmd {
        CallCommand::Approve { call, reason } => {
            answer(
                &call,
                Reply::Decision {
                    approve: true,
                    reason,
                },
            )
            .await
        }
        CallCommand::Deny { call, reason } => {
            if reason.trim().is_empty() {
                bail!("--reason: say why the call is denied");
            }
            answer(
                &call,
                Reply::Decision {
                    approve: false,
                    reason: Some(reason),
                },
            )
            .await
        }
        CallCommand::Answer { call, result } => {
            let result = serde_json::from_str(&result)
                .map_err(|e| anyhow::anyhow!("the result is not JSON: {e}"))?;
            answer(&call, Reply::Result(result)).await
        }
        CallCommand::Calls {
            agent,
            json,
            via,
            redis,
        } => list(&agent, json, &via, &redis).await,
    }
}

/// Answers a call as `--as`; says what was decided, or refuses (see [`Refusal::exit_code`]).
async fn answer(call: &Answering, reply: Reply) -> anyhow::Result<()> {
    let agent = agent_arg(&call.agent)?;
    let by = call.by.trim();
    if by.is_empty() {
        bail!("--as: name who answers");
    }
    let id = CallId::parse(&call.call)
        .filter(|id| id.agent() == &agent)
        .ok_or_else(|| Refusal::Unknown(call.call.clone()))?;
    if let Some(remote) = Remote::of(&call.via).await? {
        return answer_through(&remote, &id, reply).await;
    }
    let store = connect(&call.redis).await?;
    let mut who = principal(&store, &id, by).await?;
    who.groups.clone_from(&call.groups);
    let answered = decisions::answer(&store, &id, None, &who, reply).await?;
    let out = &mut std::io::stdout();
    writeln!(
        out,
        "{}",
        sanitize(
            &format!(
                "{} {} (call {}) as {}{}",
                answered.decision,
                answered.tool,
                answered.call,
                who.name,
                if answered.woke {
                    "; the agent was woken"
                } else {
                    ""
                }
            ),
            Breaks::Visible
        )
    )?;
    if answered.audit.is_none() {
        eprintln!("agentfleet: warning: the decision was taken, but its audit message could not be posted in the space");
    }
    Ok(())
}

/// Answers a call through the gateway, where it waits for the caller (`GET /v1/calls` says
/// in which space).
async fn answer_through(remote: &Remote, id: &CallId, reply: Reply) -> anyhow::Result<()> {
    let mine: WaitingCalls = remote.get("/v1/calls").await?;
    let Some(call) = mine.calls.iter().find(|c| c.call_id == id.as_str()) else {
        return Err(Refusal::Unknown(id.to_string()).into());
    };
    let body = match reply {
        Reply::Decision { approve, reason } => serde_json::json!({
            "decision": if approve { "approve" } else { "deny" },
            "reason": reason,
        }),
        Reply::Result(result) => serde_json::json!({ "result": result }),
    };
    let answered: CallAnswered = remote
        .post(
            &format!(
                "/v1/spaces/{}/{}/tool-calls/{}",
                call.namespace, call.space, call.call_id
            ),
            &body,
        )
        .await?;
    let text = format!(
        "{} {} (call {}) in space {}/{}{}",
        answered.decision,
        call.tool,
        answered.call_id,
        call.namespace,
        call.space,
        if answered.woke {
            "; the agent was woken"
        } else {
            ""
        }
    );
    writeln!(std::io::stdout(), "{}", sanitize(&text, Breaks::Visible))?;
    Ok(())
}

/// The person `--as` names, with the display name the space the call was asked in gives
/// them (else their id).
async fn principal(store: &dyn Store, id: &CallId, by: &str) -> anyhow::Result<Principal> {
    let asked = match store.call(id).await? {
        Some(call) => decisions::asked_in(id, &call.record),
        None => None,
    };
    let name = match asked {
        Some(space) => store.space(&space).await?.and_then(|r| {
            r.members
                .into_iter()
                .find(|m| m.kind == crate::store::MemberKind::Human && m.id == by)
                .map(|m| m.name)
        }),
        None => None,
    };
    Ok(Principal::human(by, name.unwrap_or_else(|| by.to_string())))
}

/// Lists what waits for a human, oldest first.
async fn list(agent: &str, json: bool, via: &Via, redis: &RedisArgs) -> anyhow::Result<()> {
    let agent = agent_arg(agent)?;
    let calls: Vec<WaitingCall> = match Remote::of(via).await? {
        Some(remote) => {
            let calls: WaitingCalls = remote
                .get(&format!(
                    "/v1/agents/{}/{}/calls",
                    agent.namespace, agent.name
                ))
                .await?;
            calls.calls
        }
        None => {
            let store = connect(redis).await?;
            store
                .human_calls(&agent)
                .await?
                .into_iter()
                .map(|c| {
                    let space = c.record.space.clone().unwrap_or_default();
                    WaitingCall::new(&c, &agent.namespace, &space, true)
                })
                .collect()
        }
    };
    let out = &mut std::io::stdout();
    if calls.is_empty() && !json {
        writeln!(out, "no call of {agent} waits for a human")?;
    }
    let now = now_ms();
    for c in calls {
        if json {
            let line = serde_json::json!({
                "callId": c.call_id,
                "tool": c.tool,
                "kind": c.kind,
                "space": (!c.space.is_empty()).then_some(&c.space),
                "arguments": c.arguments,
                "sinceMs": c.since_ms,
                "expiresMs": c.expires_ms,
            });
            writeln!(out, "{line}")?;
            continue;
        }
        let text = format!(
            "{}  {}  {}  space {}  since {}  expires {}{}",
            c.tool,
            c.call_id,
            c.kind,
            if c.space.is_empty() { "-" } else { &c.space },
            time(c.since_ms),
            time(c.expires_ms),
            if now > c.expires_ms { " (expired)" } else { "" }
        );
        writeln!(out, "{}", sanitize(&text, Breaks::Visible))?;
    }
    Ok(())
}
