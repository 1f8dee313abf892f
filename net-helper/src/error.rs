//! How a fetch (or a proxy target) fails: refused by a rule, or failed on the network.

use ipc_schema::net::{NetRefusal, NetReply, RefusalKind};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// A rule said no; `gatehouse fetch` exits with its refusal code.
    #[error("refused: {1}")]
    Refused(RefusalKind, String),
    /// The network failed.
    #[error("failed: {0}")]
    Failed(String),
}

impl FetchError {
    pub fn refused(kind: RefusalKind, reason: impl Into<String>) -> Self {
        FetchError::Refused(kind, reason.into())
    }

    pub fn failed(reason: impl Into<String>) -> Self {
        FetchError::Failed(reason.into())
    }

    pub fn reason(&self) -> &str {
        match self {
            FetchError::Refused(_, r) | FetchError::Failed(r) => r,
        }
    }

    /// The same error with `prefix: ` before its reason (which hop of a redirect chain).
    pub fn context(self, prefix: &str) -> Self {
        match self {
            FetchError::Refused(k, r) => FetchError::Refused(k, format!("{prefix}: {r}")),
            FetchError::Failed(r) => FetchError::Failed(format!("{prefix}: {r}")),
        }
    }

    pub fn into_reply(self) -> NetReply {
        match self {
            FetchError::Refused(kind, reason) => NetReply::Refused(NetRefusal { kind, reason }),
            FetchError::Failed(reason) => NetReply::Failed { reason },
        }
    }
}

/// A duration in milliseconds as a refusal says it: `20 s`, `1.5 s`, `250 ms`.
pub fn human_ms(ms: u64) -> String {
    if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// A duration as a refusal says it (see [`human_ms`]).
pub fn human_duration(d: std::time::Duration) -> String {
    human_ms(d.as_millis() as u64)
}

/// A byte count as a refusal says it: `1 MiB`, `512 KiB`, `1000 bytes`.
pub fn human_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_ms(20_000), "20 s");
        assert_eq!(human_ms(1500), "1.5 s");
        assert_eq!(human_ms(250), "250 ms");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(4 << 30), "4096 MiB");
        assert_eq!(human_bytes(512 * 1024), "512 KiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }
}
