//! The gateway front (arrives with its issue).
