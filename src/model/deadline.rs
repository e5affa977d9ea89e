//! The whole of a model call, bounded in time: however a server streams (one byte a second
//! passes every per-read timeout), the call ends by its deadline (`spec.model.timeoutSeconds`,
//! retries of transient failures included) and fails as [`Failure::TimedOut`], retried with
//! backoff like any transient failure.

use std::time::Duration;

use async_trait::async_trait;

use super::{Delta, Failure, Model, ModelError, Request, Turn};

/// A provider whose every call ends by `limit`.
pub struct Deadline {
    inner: Box<dyn Model>,
    limit: Duration,
}

impl Deadline {
    /// `inner`, its calls bounded by `limit`.
    pub fn new(inner: Box<dyn Model>, limit: Duration) -> Self {
        Self { inner, limit }
    }
}

#[async_trait]
impl Model for Deadline {
    async fn complete(
        &self,
        request: &Request,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, ModelError> {
        tokio::time::timeout(self.limit, self.inner.complete(request, on_delta))
            .await
            .unwrap_or_else(|_| {
                Err(ModelError::new(
                    Failure::TimedOut,
                    format!(
                        "no whole answer within {} s (spec.model.timeoutSeconds)",
                        self.limit.as_secs()
                    ),
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model that never finishes its answer (it streams a piece, then nothing more).
    struct Endless;

    #[async_trait]
    impl Model for Endless {
        async fn complete(
            &self,
            _: &Request,
            on_delta: &mut (dyn FnMut(Delta) + Send),
        ) -> Result<Turn, ModelError> {
            on_delta(Delta::Text("thinking".into()));
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_ends_fails_by_its_deadline_as_a_transient_failure() {
        let model = Deadline::new(Box::new(Endless), Duration::from_secs(300));
        let request = Request {
            system: String::new(),
            messages: Vec::new(),
            context: String::new(),
            tools: Vec::new(),
            tool_choice: Default::default(),
        };
        let mut pieces = 0;
        let err = model
            .complete(&request, &mut |_| pieces += 1)
            .await
            .unwrap_err();
        assert_eq!(pieces, 1, "what streamed before the deadline was passed on");
        assert_eq!(err.failure, Failure::TimedOut);
        assert!(err.is_transient());
        assert_eq!(
            err.to_string(),
            "the model did not answer in time: no whole answer within 300 s (spec.model.timeoutSeconds)"
        );
    }
}
