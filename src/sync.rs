//! Locks shared by the roles' in-memory state.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The guard of `m`. A poisoned lock only means a panic elsewhere while it was held; every
/// state kept behind one here changes in single map or field operations, so it stays usable.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
