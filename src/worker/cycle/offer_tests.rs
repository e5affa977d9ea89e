//! What a cycle's requests tell the model, end to end (issue 44): the cue after the context
//! follows the cycle step by step, and the notes tools' flat forms keep and forget. Same rig
//! as [`super::tests`].

use serde_json::json;

use super::tests::{calls, rig, send, text};
use crate::store::prelude::*;

#[tokio::test]
async fn the_cue_ends_every_request_and_follows_the_cycle() {
    let r = rig(
        "",
        vec![
            Ok(calls(&[(
                "set_memories",
                json!({"key": "dinner", "fact": "at 8"}),
            )])),
            Ok(send("Dinner is at 8, noted.")),
            Ok(text("Done.")),
        ],
    )
    .await;
    r.cycle("Remember dinner is at 8.").await;
    let contexts: Vec<String> = r.requests().into_iter().map(|q| q.context).collect();
    assert_eq!(contexts.len(), 3, "{contexts:?}");
    let ends = [
        " Do what it asks, with your tools where one fits, and answer with send_message.\n",
        " Tell Husam with send_message what the result above answers.\n",
        " You answered with send_message; if nothing more is asked, call skip.\n",
    ];
    for (context, end) in contexts.iter().zip(ends) {
        assert!(
            context.contains("This cycle you woke for 1 message Husam wrote in")
                && context.ends_with(end),
            "{context}"
        );
    }
    // The cue is never remembered.
    let remembered = serde_json::to_string(&r.remembered().await).unwrap();
    assert!(!remembered.contains("This cycle you woke"), "{remembered}");
}

#[tokio::test]
async fn a_fact_is_kept_by_key_and_forgotten_by_an_empty_one() {
    let r = rig(
        "",
        vec![
            Ok(calls(&[
                ("set_memories", json!({"key": "dinner", "fact": "at 8"})),
                ("set_memories", json!({"key": "lunch", "fact": "at 1"})),
            ])),
            Ok(calls(&[(
                "set_memories",
                json!({"key": "lunch", "fact": ""}),
            )])),
            Ok(send("Noted.")),
            Ok(text("Done.")),
        ],
    )
    .await;
    r.cycle("Dinner is at 8; forget lunch.").await;
    let memories = r.store.memories(&r.agentlet.key).await.unwrap();
    assert_eq!(
        memories.into_iter().collect::<Vec<_>>(),
        [("dinner".to_string(), "at 8".to_string())]
    );
}
