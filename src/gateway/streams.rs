//! How many streams each caller holds open (SSE of a space, A2A `SendStreamingMessage` and
//! `SubscribeToTask`): at most `--max-streams-per-caller` at once, so one token cannot take
//! every connection the gateway serves with streams that never end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::auth::Entity;

/// The open streams of every caller.
#[derive(Clone)]
pub(super) struct Streams {
    open: Arc<Mutex<HashMap<String, u32>>>,
    max: u32,
}

/// One open stream of a caller: given back when dropped (the stream ended or its client
/// went away).
pub(super) struct Slot {
    open: Arc<Mutex<HashMap<String, u32>>>,
    caller: String,
}

/// A caller that holds as many streams as it may.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Full {
    /// How many it holds (the bound).
    pub max: u32,
}

impl Full {
    /// What the caller is told.
    pub fn message(&self) -> String {
        format!(
            "this caller already has {} streams open, as many as the gateway allows (--max-streams-per-caller); close one first",
            self.max
        )
    }
}

impl Streams {
    /// At most `max` open streams per caller.
    pub fn new(max: u32) -> Self {
        Self {
            open: Arc::default(),
            max,
        }
    }

    /// A slot for one more stream of `caller`, unless it holds `max` already.
    pub fn open(&self, caller: &Entity) -> Result<Slot, Full> {
        let key = format!("{}:{}", caller.kind.as_str(), caller.id);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(key.clone()).or_insert(0);
        if *n >= self.max {
            return Err(Full { max: self.max });
        }
        *n += 1;
        Ok(Slot {
            open: self.open.clone(),
            caller: key,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.caller) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::auth::EntityKind;

    fn who(kind: EntityKind, id: &str) -> Entity {
        Entity {
            kind,
            id: id.into(),
            name: id.into(),
            agents: Vec::new(),
            groups: Vec::new(),
        }
    }

    #[test]
    fn a_caller_holds_at_most_max_streams_and_gets_them_back() {
        let streams = Streams::new(2);
        let husam = who(EntityKind::Human, "husam");
        let a = streams.open(&husam).unwrap();
        let _b = streams.open(&husam).unwrap();
        assert_eq!(streams.open(&husam).err(), Some(Full { max: 2 }));
        // Another caller (even a service of the same id) has its own.
        let _c = streams.open(&who(EntityKind::Service, "husam")).unwrap();
        drop(a);
        let _d = streams.open(&husam).unwrap();
        assert!(streams.open(&husam).is_err());
    }
}
