//! The data plane's records: the JSON it stores, as the current release writes it.
//!
//! `tests/fixtures/records/` holds one record of each kind as written before the data plane
//! had record types of its own (when they were built from the CRD structs); the tests read
//! them back and write them again byte for byte, so a renamed field fails them.

#[cfg(test)]
mod tests;
