//! One agent's place among its pool's cycles at once (`cyclesAtOnce`). A look and the work of
//! a cycle hold it; a cycle waiting on its model gives it to the next agent in line and takes
//! one again (first come, first served) when the answer is whole. A model, however slowly it
//! streams, thus holds back only its own agent: the pool's slots bound the work it does, not
//! the answers it waits for (each agent waits on one call at most, bounded by its
//! `spec.model.timeoutSeconds`).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus::{Histogram, IntGauge};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::sync::lock;

/// What an agent's slot is counted in: the agents waiting for one, how long they waited, and
/// the agents whose cycle waits on its model without one.
pub(crate) struct SlotGauges {
    pub(crate) waiting: IntGauge,
    pub(crate) wait: Histogram,
    pub(crate) awaiting_model: IntGauge,
}

/// An agent's slot of a pool, held or not (see the module's doc).
pub(crate) struct Slot {
    slots: Arc<Semaphore>,
    held: Mutex<Option<OwnedSemaphorePermit>>,
    gauges: SlotGauges,
}

impl Slot {
    /// A slot of `slots`, not held yet.
    pub(crate) fn new(slots: Arc<Semaphore>, gauges: SlotGauges) -> Self {
        Self {
            slots,
            held: Mutex::new(None),
            gauges,
        }
    }

    /// Holds a slot, waiting in line for one when none is free.
    pub(crate) async fn take(&self) {
        if lock(&self.held).is_some() {
            return;
        }
        let asked = Instant::now();
        self.gauges.waiting.inc();
        let permit = self.slots.clone().acquire_owned().await;
        self.gauges.waiting.dec();
        self.gauges.wait.observe(asked.elapsed().as_secs_f64());
        // The pool never closes its semaphore; a closed one would mean no bound to keep.
        *lock(&self.held) = permit.ok();
    }

    /// Gives the slot back (to the next agent in line), if held.
    pub(crate) fn give_back(&self) {
        lock(&self.held).take();
    }

    /// Runs `call` (a model call) without the slot, then takes one again.
    pub(crate) async fn outside<T>(&self, call: impl Future<Output = T>) -> T {
        self.give_back();
        self.gauges.awaiting_model.inc();
        let out = call.await;
        self.gauges.awaiting_model.dec();
        self.take().await;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauges() -> SlotGauges {
        SlotGauges {
            waiting: IntGauge::new("w", "w").unwrap(),
            wait: Histogram::with_opts(prometheus::HistogramOpts::new("h", "h")).unwrap(),
            awaiting_model: IntGauge::new("m", "m").unwrap(),
        }
    }

    #[tokio::test]
    async fn a_cycle_waiting_on_its_model_lets_the_next_agent_work() {
        let slots = Arc::new(Semaphore::new(1));
        let slow = Arc::new(Slot::new(slots.clone(), gauges()));
        let other = Slot::new(slots.clone(), gauges());
        slow.take().await;
        assert_eq!(slots.available_permits(), 0);
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let waiting = tokio::spawn({
            let slow = slow.clone();
            async move { slow.outside(answered).await }
        });
        // While the slow one waits on its model, the other takes the only slot and works.
        tokio::time::timeout(std::time::Duration::from_secs(5), other.take())
            .await
            .expect("the slot was given back while the model was awaited");
        assert_eq!(slow.gauges.awaiting_model.get(), 1);
        // The answer comes: the slow one waits in line for the slot again.
        answer.send(()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "it works on only with a slot");
        assert_eq!(slow.gauges.waiting.get(), 1);
        other.give_back();
        waiting.await.unwrap().unwrap();
        assert_eq!(slots.available_permits(), 0, "the slow one holds it again");
        assert_eq!(slow.gauges.awaiting_model.get(), 0);
    }
}
