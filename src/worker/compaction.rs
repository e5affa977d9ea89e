//! Keeping consciousness inside its window (seed 002): a sliding window over the messages,
//! optionally with a model-written summary of what drops out. A tool call and its result are
//! never separated, and the most recent messages are always kept.

use crate::model::Message;

/// Where the window should start after this commit, or `None` when it fits.
///
/// `messages` is the whole window after the cycle (oldest first), `first_seq` the sequence
/// number of `messages[0]`. When the estimate is over `window_tokens`, messages are dropped
/// from the front until it is under half of it, keeping at least `keep_recent` messages, and
/// the new first message is never a tool result. Compacting well below the window makes it
/// rare: each compaction changes the start of every later prompt, which a provider's prompt
/// cache then misses once (`cargo bench --bench tokens`: half billed 16% less than three
/// quarters).
pub fn plan(
    messages: &[Message],
    first_seq: u64,
    summary_tokens: u64,
    window_tokens: u64,
    keep_recent: usize,
) -> Option<u64> {
    let tokens: Vec<u64> = messages.iter().map(Message::estimate_tokens).collect();
    let total: u64 = summary_tokens + tokens.iter().sum::<u64>();
    if total <= window_tokens {
        return None;
    }
    let target = window_tokens / 2;
    let max_drop = messages.len().saturating_sub(keep_recent);
    let mut drop = 0;
    let mut remaining = total;
    while drop < max_drop && remaining > target {
        remaining -= tokens[drop];
        drop += 1;
    }
    // Never start on a tool result (its call would be gone): drop the results too if the
    // recent messages allow, else keep the call with them. The recent messages are never
    // dropped (a cycle that stopped on its step or token limit ends on tool results).
    let is_result = |i: usize| matches!(messages.get(i), Some(Message::Tool { .. }));
    let mut forward = drop;
    while forward < max_drop && is_result(forward) {
        forward += 1;
    }
    if is_result(forward) {
        while drop > 0 && is_result(drop) {
            drop -= 1;
        }
    } else {
        drop = forward;
    }
    (drop > 0).then_some(first_seq + drop as u64)
}

/// The request that asks the model for a summary of what drops out.
pub fn summary_prompt(previous: Option<&str>, dropped: &[Message]) -> (String, String) {
    let system = "You maintain the long-term memory of an agent. Write a concise summary (at most 200 words) of the conversation below: who asked what, what was decided and done, what is still open. Keep names, numbers and commitments. Answer with the summary only.".to_string();
    let mut text = String::new();
    if let Some(p) = previous {
        text.push_str("Summary so far:\n");
        text.push_str(p);
        text.push_str("\n\nWhat happened next:\n");
    }
    for m in dropped {
        match m {
            Message::User { content } => text.push_str(&format!("INPUT: {content}\n")),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                if let Some(c) = content {
                    text.push_str(&format!("AGENT THOUGHT: {c}\n"));
                }
                for c in tool_calls {
                    text.push_str(&format!("AGENT CALLED {}: {}\n", c.name, c.arguments));
                }
            }
            Message::Tool { content, .. } => text.push_str(&format!("RESULT: {content}\n")),
        }
    }
    (system, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use proptest::prelude::*;

    fn user(n: usize) -> Message {
        Message::user("x".repeat(n * 4))
    }

    /// An assistant message calling tool call `c`.
    fn call_c() -> Message {
        Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: "t".into(),
                arguments: "{}".into(),
            }],
        }
    }

    /// A result of call `c`, `n` characters long.
    fn result_c(n: usize) -> Message {
        Message::Tool {
            tool_call_id: "c".into(),
            content: "x".repeat(n),
        }
    }

    #[test]
    fn fits_means_no_compaction() {
        assert_eq!(plan(&[user(10), user(10)], 0, 0, 1000, 2), None);
    }

    #[test]
    fn drops_from_the_front_to_half_the_window_keeping_recent() {
        let msgs: Vec<Message> = (0..10).map(|_| user(96)).collect(); // 100 tokens each
        let start = plan(&msgs, 50, 0, 800, 2).unwrap();
        assert_eq!(start, 56, "1000 → 400 tokens: six messages go");
        assert_eq!(
            plan(&msgs, 0, 0, 100, 4),
            Some(6),
            "at least keep_recent stay"
        );
    }

    #[test]
    fn a_tool_call_and_its_result_stay_together() {
        let call = call_c();
        let msgs = vec![user(96), call, result_c(400), user(96), user(96)];
        // Dropping two messages would start on the tool result; the result goes too.
        let start = plan(&msgs, 0, 0, 400, 1).unwrap();
        assert!(!matches!(msgs[start as usize], Message::Tool { .. }));
        assert_eq!(start, 3);
    }

    #[test]
    fn a_cycle_that_ended_on_tool_results_keeps_them_and_their_call() {
        // A cycle cut off by its step limit ends on results: dropping "up to the next
        // non-result" used to drop everything (an empty window).
        let msgs = vec![user(96), call_c(), result_c(2000), result_c(2000)];
        let start = plan(&msgs, 0, 0, 300, 1).unwrap();
        assert_eq!(start, 1, "the call and its results stay");
    }

    fn arbitrary_window() -> impl Strategy<Value = Vec<Message>> {
        let step = prop_oneof![
            (0usize..400).prop_map(|n| vec![Message::user("u".repeat(n))]),
            (0usize..3, 0usize..400).prop_map(|(calls, n)| {
                let mut v = vec![Message::Assistant {
                    content: Some("a".repeat(n)),
                    tool_calls: (0..calls)
                        .map(|i| ToolCall {
                            id: format!("c{i}"),
                            name: "t".into(),
                            arguments: "{}".into(),
                        })
                        .collect(),
                }];
                v.extend((0..calls).map(|i| Message::Tool {
                    tool_call_id: format!("c{i}"),
                    content: "r".repeat(n),
                }));
                v
            }),
        ];
        proptest::collection::vec(step, 0..30).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn compaction_keeps_the_recent_messages_and_pairs(
            msgs in arbitrary_window(), window in 1u64..5000, keep in 1usize..20,
            summary in 0u64..2000, text in crate::hostile::hostile_text(),
        ) {
            if let Some(start) = plan(&msgs, 10, summary, window, keep) {
                let drop = (start - 10) as usize;
                prop_assert!(drop <= msgs.len().saturating_sub(keep), "recent messages dropped");
                let starts_on_result = matches!(msgs.get(drop), Some(Message::Tool { .. }));
                prop_assert!(!starts_on_result, "the window starts on a tool result");
            }
            let mut with_text = msgs.clone();
            with_text.push(Message::user(text.clone()));
            let (_, prompt) = summary_prompt(Some(&text), &with_text);
            prop_assert!(prompt.contains(&text));
        }
    }

    #[test]
    fn the_summary_counts_against_the_window() {
        let msgs: Vec<Message> = (0..4).map(|_| user(96)).collect();
        assert_eq!(plan(&msgs, 0, 0, 450, 1), None);
        assert!(plan(&msgs, 0, 100, 450, 1).is_some());
    }
}
