//! What the model gets of a remote agent: the one place that bounds it. Every answer of a
//! remote (a task, a message, a task still working, an error) reaches the model through
//! [`Reply::for_model`] or [`error`], whether the call answered it or the follower did:
//!
//! - the remote's texts (its answer and its question) together at most [`MAX_TEXT_BYTES`] as
//!   JSON (cut, and the model is told);
//! - its ids (`taskId`, `contextId`) at most [`MAX_ID_BYTES`]: over it the answer is refused,
//!   since an id cut short would name another task;
//! - an error at most [`MAX_ERROR_BYTES`];
//! - the Secret's values masked ([`masked`]).

use serde_json::{json, Value};

use crate::a2a::{Message, Part, Task};
use crate::secrets::Redactor;

/// The most of a remote's texts one result gives the model, in bytes of JSON.
pub const MAX_TEXT_BYTES: usize = 32 * 1024;

/// The longest id (`taskId`, `contextId`) taken from a remote, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// The longest error the model gets of a remote, in bytes.
pub const MAX_ERROR_BYTES: usize = 1024;

/// An answer of a remote agent, as the model is to get it.
pub(super) enum Reply<'a> {
    /// A task that is over or asks something.
    Task(&'a Task),
    /// A message instead of a task.
    Message(&'a Message),
    /// A task still working, followed from now on as call `call`.
    Pending { task: &'a Task, call: &'a str },
}

impl Reply<'_> {
    /// The result of remote agent `source`'s answer, or why it is refused (an id over
    /// [`MAX_ID_BYTES`]). Its texts are masked with `masks` before they are cut, so that no
    /// start of a secret is left at the cut.
    pub(super) fn for_model(&self, source: &str, masks: &Redactor) -> Result<Value, String> {
        let mut out = json!({"agent": source});
        let (task_id, context_id) = match self {
            Reply::Task(t) | Reply::Pending { task: t, .. } => (Some(&t.id), &t.context_id),
            Reply::Message(m) => (None, &m.context_id),
        };
        if let Some(id) = task_id {
            out["taskId"] = json!(checked_id("taskId", id)?);
        }
        if let Some(id) = context_id.as_deref().filter(|c| !c.is_empty()) {
            out["contextId"] = json!(checked_id("contextId", id)?);
        }
        let (answer, question) = match self {
            Reply::Task(t) => {
                out["state"] = json!(state(t));
                let artifacts: Vec<&str> = t
                    .artifacts
                    .iter()
                    .flat_map(|a| a.parts.iter().filter_map(Part::as_text))
                    .collect();
                let said = t.status.message.as_ref().map(Message::text);
                if t.status.state.is_interrupted() {
                    out["note"] = json!("it waits for you: call the same tool again with this taskId and your answer as message");
                    let answer = (!artifacts.is_empty()).then(|| artifacts.join("\n"));
                    (answer, Some(said.unwrap_or_default()))
                } else if artifacts.is_empty() {
                    (said.filter(|s| !s.is_empty()), None)
                } else {
                    (Some(artifacts.join("\n")), None)
                }
            }
            Reply::Message(m) => {
                out["state"] = json!("answered");
                (Some(m.text()), None)
            }
            Reply::Pending { task, call } => {
                out["status"] = json!("pending");
                out["callId"] = json!(call);
                out["state"] = json!(state(task));
                out["note"] = json!("the remote task is still working; its result comes into your inbox as a tool_result of this callId");
                (None, None)
            }
        };
        // The question first: it is what the model must act on.
        let mut left = MAX_TEXT_BYTES;
        let mut was_cut = false;
        for (key, text) in [("question", question), ("answer", answer)] {
            let Some(text) = text else { continue };
            let text = masks.redact(&text);
            let (kept, cut) = cut_to_json(&text, left);
            left -= json_len(kept);
            was_cut |= cut;
            out[key] = json!(kept);
        }
        if was_cut {
            out["cut"] = json!(format!(
                "its text was cut at {MAX_TEXT_BYTES} bytes; the rest was not read"
            ));
        }
        Ok(out)
    }
}

/// A task's state as the model reads it: `completed`, `input_required`, …
fn state(task: &Task) -> String {
    task.status
        .state
        .as_str()
        .trim_start_matches("TASK_STATE_")
        .to_ascii_lowercase()
}

/// `id` when it fits; refused otherwise (never cut: that would be another id).
pub(super) fn checked_id<'a>(what: &str, id: &'a str) -> Result<&'a str, String> {
    if id.is_empty() {
        return Err(format!("refused: its {what} is empty"));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "refused: its {what} is over {MAX_ID_BYTES} bytes ({} bytes)",
            id.len()
        ));
    }
    Ok(id)
}

/// An error for the model: cut at [`MAX_ERROR_BYTES`].
pub(super) fn error(why: &str) -> String {
    if why.len() <= MAX_ERROR_BYTES {
        return why.to_string();
    }
    let (kept, _) = cut_to_json(why, MAX_ERROR_BYTES);
    format!("{kept}… (cut)")
}

/// What reaches the model of a call's result or error: the Secret's values masked (in the
/// JSON text, so every escaped form is found), an error bounded.
pub(super) fn masked(answered: Result<Value, String>, masks: &Redactor) -> Result<Value, String> {
    match answered {
        Ok(v) if masks.is_empty() => Ok(v),
        // Masking keeps the JSON whole (a mask replaces a run of one string's characters),
        // and is told apart should it not.
        Ok(v) => serde_json::from_str(&masks.redact(&v.to_string()))
            .map_err(|_| "its answer could not be shown without a secret in it".to_string()),
        Err(why) => Err(error(&masks.redact(why.as_str()))),
    }
}

/// How many bytes `c` takes inside a JSON string.
fn char_json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// How many bytes `s` takes inside a JSON string (without its quotes).
fn json_len(s: &str) -> usize {
    s.chars().map(char_json_len).sum()
}

/// The longest start of `s` that takes at most `most` bytes inside a JSON string, and whether
/// anything was left out.
fn cut_to_json(s: &str, most: usize) -> (&str, bool) {
    let mut used = 0;
    for (at, c) in s.char_indices() {
        used += char_json_len(c);
        if used > most {
            return (&s[..at], true);
        }
    }
    (s, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::{Artifact, Role, TaskState, TaskStatus};

    /// A task `id` in `state`, saying `said` in its status and `artifact` as its one artifact.
    fn task(state: TaskState, said: Option<String>, artifact: Option<String>) -> Task {
        Task {
            id: "t1".into(),
            context_id: Some("c1".into()),
            status: TaskStatus {
                state,
                message: said.map(|s| Message {
                    role: Role::Agent,
                    parts: vec![Part::text(s)],
                    ..Default::default()
                }),
                ..Default::default()
            },
            artifacts: artifact
                .map(|a| Artifact {
                    artifact_id: "a".into(),
                    parts: vec![Part::text(a)],
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    fn size(v: &Value) -> usize {
        v.to_string().len()
    }

    #[test]
    fn a_task_reads_as_its_answer_or_its_question() {
        let done = Reply::Task(&task(TaskState::Completed, None, Some("42".into())))
            .for_model("calc", &Redactor::default())
            .unwrap();
        assert_eq!(done["state"], "completed");
        assert_eq!(done["answer"], "42");
        assert_eq!(done["contextId"], "c1");
        assert!(done.get("question").is_none() && done.get("cut").is_none());
        let asks = Reply::Task(&task(
            TaskState::InputRequired,
            Some("Which colour?".into()),
            None,
        ))
        .for_model("calc", &Redactor::default())
        .unwrap();
        assert_eq!(asks["state"], "input_required");
        assert_eq!(asks["question"], "Which colour?");
        assert_eq!(asks["taskId"], "t1");
        assert!(
            asks.get("answer").is_none(),
            "the question is not said twice"
        );
        let failed = Reply::Task(&task(TaskState::Failed, Some("no disk".into()), None))
            .for_model("calc", &Redactor::default())
            .unwrap();
        assert_eq!(failed["answer"], "no disk");
    }

    #[test]
    fn every_text_of_a_remote_is_bounded_together() {
        let big = "é".repeat(400_000);
        // Control characters take six bytes each in JSON: the bound is on what the model
        // reads, not on the remote's characters.
        let escaped = "\u{1}".repeat(400_000);
        let message = Message {
            role: Role::Agent,
            parts: vec![Part::text(big.clone())],
            ..Default::default()
        };
        for reply in [
            Reply::Task(&task(TaskState::Completed, None, Some(big.clone()))),
            Reply::Task(&task(TaskState::Completed, None, Some(escaped.clone()))),
            Reply::Task(&task(TaskState::Completed, Some(big.clone()), None)),
            Reply::Task(&task(
                TaskState::InputRequired,
                Some(escaped.clone()),
                Some(big.clone()),
            )),
            Reply::Message(&message),
        ] {
            let v = reply.for_model("big", &Redactor::default()).unwrap();
            assert!(size(&v) < MAX_TEXT_BYTES + 512, "{}", size(&v));
            assert!(v["cut"].as_str().unwrap().contains("cut at 32768 bytes"));
        }
    }

    #[test]
    fn an_id_over_the_bound_is_refused_not_cut() {
        let long = "i".repeat(MAX_ID_BYTES + 1);
        let mut t = task(TaskState::Completed, None, Some("ok".into()));
        t.id = long.clone();
        let e = Reply::Task(&t)
            .for_model("r", &Redactor::default())
            .unwrap_err();
        assert_eq!(e, "refused: its taskId is over 256 bytes (257 bytes)");
        let mut t = task(TaskState::Working, None, None);
        t.context_id = Some(long.clone());
        let e = Reply::Pending {
            task: &t,
            call: "c",
        }
        .for_model("r", &Redactor::default())
        .unwrap_err();
        assert!(e.contains("contextId is over 256 bytes"), "{e}");
        let m = Message {
            context_id: Some(long),
            parts: vec![Part::text("hi")],
            ..Default::default()
        };
        assert!(Reply::Message(&m)
            .for_model("r", &Redactor::default())
            .is_err());
        let fits = "i".repeat(MAX_ID_BYTES);
        t.context_id = Some(fits.clone());
        let v = Reply::Pending {
            task: &t,
            call: "c",
        }
        .for_model("r", &Redactor::default())
        .unwrap();
        assert_eq!(v["contextId"], fits.as_str());
        assert_eq!(v["status"], "pending");
    }

    #[test]
    fn errors_are_bounded_and_masked() {
        let masks = Redactor::new(["Bearer s3cr3t-t0k3n"]);
        let long = format!("refused: s3cr3t-t0k3n {}", "x".repeat(5000));
        let e = masked(Err(long), &masks).unwrap_err();
        assert!(e.len() <= MAX_ERROR_BYTES + 16, "{}", e.len());
        assert!(e.starts_with("refused: ***") && e.ends_with("(cut)"), "{e}");
        let v = masked(Ok(json!({"answer": "token s3cr3t-t0k3n"})), &masks).unwrap();
        assert_eq!(v["answer"], "token ***");
    }

    #[test]
    fn no_start_of_a_secret_is_left_at_the_cut() {
        let masks = Redactor::new(["Bearer s3cr3t-t0k3n"]);
        // The secret straddles the bound: masked whole before the text is cut.
        let text = format!("{}s3cr3t-t0k3n", "x".repeat(MAX_TEXT_BYTES - 6));
        let v = Reply::Task(&task(TaskState::Completed, None, Some(text)))
            .for_model("r", &masks)
            .unwrap();
        let answer = v["answer"].as_str().unwrap();
        assert!(
            answer.ends_with("***") && !answer.contains("s3cr3t"),
            "{}",
            &answer[answer.len() - 20..]
        );
    }
}
