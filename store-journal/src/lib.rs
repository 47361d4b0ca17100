//! The journal store.
