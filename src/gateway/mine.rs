//! What is the caller's across the fleet: `GET /v1/spaces` (the spaces it is a member of) and
//! `GET /v1/calls` (the calls waiting for a person's answer in them) — what a console or a
//! pager shows first. Both read the data plane as it is; neither changes anything.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::Json;

use super::auth::{Caller, Entity};
use super::error::ApiError;
use super::{Gateway, RequestRefusals};
use crate::api::{ErrorBody, Member, SpaceInfo, SpaceList, WaitingCall, WaitingCalls};
use crate::identity::{AgentKey, SpaceKey};
use crate::store::SpaceRecord;

/// A space as its members see it (the one shape of `GET /v1/spaces` and of one space).
pub(super) fn space_info(key: &SpaceKey, record: &SpaceRecord) -> SpaceInfo {
    SpaceInfo {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        display_name: record.display_name.clone(),
        members: record
            .members
            .iter()
            .map(|m| Member {
                kind: crate::api::member_kind(m.kind).into(),
                id: m.id.clone(),
                name: m.name.clone(),
            })
            .collect(),
    }
}

/// The spaces (not A2A conversations) `caller` is a member of, sorted.
pub(super) async fn spaces_of(
    gw: &Gateway,
    caller: &Entity,
) -> Result<Vec<(SpaceKey, SpaceRecord)>, ApiError> {
    let store = &gw.inner.store;
    let keys = store
        .spaces()
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    let reads = keys
        .into_iter()
        .filter(|k| !k.is_conversation())
        .map(|key| async move {
            let record = store.space(&key).await?;
            Ok::<_, crate::store::StoreError>(record.map(|r| (key, r)))
        });
    let mut mine: Vec<(SpaceKey, SpaceRecord)> = futures::future::try_join_all(reads)
        .await
        .map_err(|e| ApiError::unavailable(&e))?
        .into_iter()
        .flatten()
        .filter(|(_, r)| caller.is_member(r))
        .collect();
    mine.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(mine)
}

/// The spaces the caller is a member of.
#[utoipa::path(
    get,
    path = "/v1/spaces",
    tag = "spaces",
    responses(
        (status = 200, description = "The caller's spaces (none for a service)", body = SpaceList),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        (status = 503, description = "Data plane unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn my_spaces(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
) -> Result<Json<SpaceList>, ApiError> {
    let spaces = spaces_of(&gw, &caller).await?;
    Ok(Json(SpaceList {
        spaces: spaces.iter().map(|(k, r)| space_info(k, r)).collect(),
    }))
}

/// The calls waiting for a person's answer in the caller's spaces, oldest first.
#[utoipa::path(
    get,
    path = "/v1/calls",
    tag = "spaces",
    responses(
        (status = 200, description = "The calls of the caller's spaces, and those that name the caller among their approvers; `mayAnswer` says which the caller may answer (`POST /v1/spaces/{namespace}/{space}/tool-calls/{callId}`)", body = WaitingCalls),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        (status = 503, description = "Data plane unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn my_calls(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
) -> Result<Json<WaitingCalls>, ApiError> {
    let spaces = spaces_of(&gw, &caller).await?;
    let mine: BTreeSet<&SpaceKey> = spaces.iter().map(|(k, _)| k).collect();
    let agents: BTreeSet<AgentKey> = spaces
        .iter()
        .flat_map(|(k, r)| r.agents().map(|a| AgentKey::new(k.namespace.clone(), a)))
        .collect();
    let store = &gw.inner.store;
    let reads = agents.iter().map(|a| store.human_calls(a));
    let me = caller.principal();
    let records: std::collections::BTreeMap<&SpaceKey, &SpaceRecord> =
        spaces.iter().map(|(k, r)| (k, r)).collect();
    let mut calls: Vec<WaitingCall> = futures::future::try_join_all(reads)
        .await
        .map_err(|e| ApiError::unavailable(&e))?
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let space = crate::decisions::asked_in(&c.id, &c.record)?;
            // The calls of the caller's spaces, and those of their agents that name the
            // caller among their approvers (asked in an A2A conversation, say).
            let named = crate::party::answers::names(&c.record, &me);
            if !mine.contains(&space) && !named {
                return None;
            }
            let may_answer =
                crate::party::may_answer(&c.record, &space.name, records.get(&space).copied(), &me)
                    .is_ok();
            Some(WaitingCall::new(
                &c,
                &space.namespace,
                &space.name,
                may_answer,
            ))
        })
        .collect();
    calls.sort_by(|a, b| (a.since_ms, &a.call_id).cmp(&(b.since_ms, &b.call_id)));
    Ok(Json(WaitingCalls { calls }))
}
