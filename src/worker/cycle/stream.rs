//! Streaming a step's `send_message` text to the space's live events as the model writes it
//! (DESIGN "The think cycle": streaming), so people see the answer grow.

use std::time::{Duration, Instant};

use tracing::debug;

use super::partial::partial_string;
use super::Agentlet;
use crate::identity::SpaceKey;
use crate::membership::{self};
use crate::model::{Delta, ModelError, Request, Turn};
use crate::store::{LiveEvent, SpaceRecord};

/// How much of a call's arguments is read for live text: beyond it, the rest of a message
/// arrives whole with the message. Each delta rescans the arguments so far, so this bounds a
/// step's streaming work (a model that writes a megabyte costs at most this much per delta).
const MAX_STREAMED: usize = 16 << 10;

/// The `send_message` calls of one model call as their arguments stream in.
pub(super) struct SendStreams<'a> {
    /// The agent's spaces, to resolve the space a call names.
    spaces: &'a [(String, Option<SpaceRecord>)],
    /// Where a call that names no space (yet) streams.
    active: Option<String>,
    /// Per call, by position in the turn: its arguments so far and the text already streamed.
    calls: Vec<(String, String)>,
}

/// A piece of a call's text to show.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Piece {
    /// The space it goes to.
    pub(super) space: String,
    /// The call's position in the turn.
    pub(super) index: usize,
    /// The text that follows what was shown before.
    pub(super) text: String,
}

impl<'a> SendStreams<'a> {
    /// No call started yet.
    pub(super) fn new(spaces: &'a [(String, Option<SpaceRecord>)], active: Option<String>) -> Self {
        Self {
            spaces,
            active,
            calls: Vec::new(),
        }
    }

    /// Takes a streamed delta; returns the text to show now, if any: what the call's `text`
    /// has decoded beyond what was shown, once it is certain where the message goes — the
    /// space the call names once its name is complete, or, while it names none yet, the
    /// active space when that is the only space the cycle's party sees (with several, the
    /// call may still name another: its text waits until it does, or comes with the message).
    pub(super) fn push(&mut self, delta: Delta) -> Option<Piece> {
        let Delta::ToolArguments { index, name, delta } = delta else {
            return None;
        };
        if name != crate::crd::BuiltinTool::SendMessage.name() {
            return None;
        }
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, Default::default);
        }
        let (arguments, shown) = &mut self.calls[index];
        if arguments.len() >= MAX_STREAMED {
            return None;
        }
        arguments.push_str(&delta);
        let text = partial_string(arguments, "text")?.value;
        let space = match partial_string(arguments, "space") {
            Some(named) if named.complete => {
                membership::resolve(self.spaces, &named.value).map(str::to_string)?
            }
            // Its name is still arriving.
            Some(_) => return None,
            None if self.spaces.len() == 1 => self.active.clone()?,
            None => return None,
        };
        // Only ever an extension of what was shown (the decoded text only grows).
        let piece = text
            .strip_prefix(shown.as_str())
            .filter(|p| !p.is_empty())?;
        let piece = piece.to_string();
        *shown = text;
        Some(Piece {
            space,
            index,
            text: piece,
        })
    }
}

impl Agentlet {
    /// One model call, publishing each piece of `send_message` text as a live delta with
    /// stream id `{agent}:{step_id}:{call index}`. Publishing runs beside the model's stream
    /// and never slows or fails it. Also returns how long the first streamed piece took.
    pub(super) async fn stream(
        &self,
        request: &Request,
        mut streams: SendStreams<'_>,
        step_id: &str,
    ) -> (Result<Turn, ModelError>, Option<Duration>) {
        let started = Instant::now();
        let mut first_chunk = None;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Piece>();
        let forward = {
            let store = self.store.clone();
            let ns = self.key.namespace.clone();
            let me = self.me();
            let stream_id = format!("{}:{step_id}", self.key);
            tokio::spawn(async move {
                while let Some(piece) = rx.recv().await {
                    let event = LiveEvent::Delta {
                        stream_id: format!("{stream_id}:{}", piece.index),
                        sender: me.clone(),
                        delta: piece.text,
                    };
                    let space = SpaceKey::new(ns.clone(), piece.space);
                    if let Err(e) = store.publish_live(&space, &event).await {
                        debug!(error = %e, "live delta not published");
                    }
                }
            })
        };
        let mut on_delta = |d: Delta| {
            first_chunk.get_or_insert_with(|| started.elapsed());
            if let Some(piece) = streams.push(d) {
                let _ = tx.send(piece);
            }
        };
        let result = self.model.complete(request, &mut on_delta).await;
        drop(tx);
        let _ = forward.await;
        (result, first_chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spaces() -> Vec<(String, Option<SpaceRecord>)> {
        vec![
            ("family".into(), Some(super::super::tests::record("Family"))),
            ("work".into(), Some(super::super::tests::record("Work"))),
        ]
    }

    /// The spaces of a cycle whose party sees one space.
    fn one_space() -> Vec<(String, Option<SpaceRecord>)> {
        vec![("family".into(), Some(super::super::tests::record("Family")))]
    }

    fn args(index: usize, delta: &str) -> Delta {
        Delta::ToolArguments {
            index,
            name: "send_message".into(),
            delta: delta.into(),
        }
    }

    fn shown(streams: &mut SendStreams<'_>, deltas: Vec<Delta>) -> Vec<(String, usize, String)> {
        deltas
            .into_iter()
            .filter_map(|d| streams.push(d))
            .map(|p| (p.space, p.index, p.text))
            .collect()
    }

    #[test]
    fn a_long_text_streams_up_to_the_bound_then_comes_whole() {
        let spaces = one_space();
        let mut s = SendStreams::new(&spaces, Some("family".into()));
        let mut deltas = vec![args(0, r#"{"text": ""#)];
        deltas.extend((0..1000).map(|_| args(0, &"x".repeat(1000))));
        let out = shown(&mut s, deltas);
        let streamed: usize = out.iter().map(|(_, _, t)| t.len()).sum();
        // Up to the delta that crossed the bound, of a megabyte.
        assert!(
            (MAX_STREAMED - 1000..MAX_STREAMED + 1000).contains(&streamed),
            "{streamed}"
        );
    }

    #[test]
    fn text_streams_to_the_space_named_once_the_name_is_whole() {
        let spaces = spaces();
        let mut s = SendStreams::new(&spaces, Some("family".into()));
        let out = shown(
            &mut s,
            vec![
                args(0, r#"{"space":"Wo"#),
                args(0, r#"rk","text":"Hel"#),
                args(0, r#"lo \u00e"#),
                args(0, r#"9!"}"#),
            ],
        );
        assert_eq!(
            out,
            [
                ("work".into(), 0, "Hel".into()),
                ("work".into(), 0, "lo ".into()),
                ("work".into(), 0, "é!".into())
            ],
            "by display name, never before the text has a new piece"
        );
    }

    #[test]
    fn text_streams_only_where_the_message_goes() {
        // Issue 40, item 3: text before the space it names went live to the active space.
        let spaces = spaces();
        let deltas = || {
            vec![
                args(0, r#"{"text":"the door"#),
                args(0, r#" code is 4711","spa"#),
                args(0, r#"ce":"wo"#),
                args(0, r#"rk"}"#),
            ]
        };
        for active in [None, Some("family".to_string())] {
            let mut s = SendStreams::new(&spaces, active.clone());
            assert_eq!(
                shown(&mut s, deltas()),
                [("work".into(), 0, "the door code is 4711".into())],
                "held until the space is known, then all of it there ({active:?})"
            );
        }
        // Several spaces and none named (yet): nothing live; the message comes whole.
        let mut s = SendStreams::new(&spaces, Some("family".into()));
        assert_eq!(shown(&mut s, vec![args(0, r#"{"text":"Hi"}"#)]), []);
        // A party that sees one space: the active one, at once.
        let one = one_space();
        let mut s = SendStreams::new(&one, Some("family".into()));
        assert_eq!(
            shown(&mut s, vec![args(0, r#"{"text":"Hi"#), args(0, r#"!"}"#)]),
            [
                ("family".into(), 0, "Hi".into()),
                ("family".into(), 0, "!".into())
            ]
        );
        // A space the party does not see: nowhere.
        let mut unknown = SendStreams::new(&one, Some("family".into()));
        assert_eq!(
            shown(
                &mut unknown,
                vec![args(0, r#"{"space":"secret","text":"x"}"#)]
            ),
            []
        );
        let mut late = SendStreams::new(&one, Some("family".into()));
        assert_eq!(
            shown(
                &mut late,
                vec![args(0, r#"{"text":"x""#), args(0, r#","space":"secret"}"#)]
            ),
            [("family".into(), 0, "x".into())],
            "with one space, what was shown was the only place it could go"
        );
    }

    #[test]
    fn each_call_streams_on_its_own_and_other_tools_not_at_all() {
        let spaces = one_space();
        let mut s = SendStreams::new(&spaces, Some("family".into()));
        let out = shown(
            &mut s,
            vec![
                Delta::Text("thinking".into()),
                Delta::ToolArguments {
                    index: 0,
                    name: "set_memories".into(),
                    delta: r#"{"text":"no"}"#.into(),
                },
                args(2, r#"{"text":"b"#),
                args(1, r#"{"text":"a"#),
                args(2, r#"b"}"#),
            ],
        );
        assert_eq!(
            out,
            [
                ("family".into(), 2, "b".into()),
                ("family".into(), 1, "a".into()),
                ("family".into(), 2, "b".into())
            ]
        );
    }
}
