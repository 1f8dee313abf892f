//! Shared plumbing for the integration tests.
