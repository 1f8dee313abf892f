//! The ui front (arrives with its issue).
