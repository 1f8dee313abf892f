//! How a fetch (or a proxy target) fails: refused by a rule, or failed on the network.

use ipc_schema::net::{NetRefusal, NetReply, RefusalKind};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// A rule said no; `gatehouse fetch` exits with its refusal code.
    #[error("refused: {1}")]
    Refused(RefusalKind, String),
    /// The network failed.
    #[error("failed: {0}")]
    Failed(String),
}

/// A [`FetchError::Refused`] of a [`RefusalKind`] (named by its variant), its reason as
/// `format!` writes it: `refused!(Limit, "over {max}")`.
macro_rules! refused {
    ($kind:ident, $($reason:tt)+) => {
        $crate::error::FetchError::Refused(ipc_schema::net::RefusalKind::$kind, format!($($reason)+))
    };
}

/// A [`FetchError::Failed`], its reason as `format!` writes it.
macro_rules! failed {
    ($($reason:tt)+) => {
        $crate::error::FetchError::Failed(format!($($reason)+))
    };
}
pub(crate) use {failed, refused};

impl FetchError {
    pub fn reason(&self) -> &str {
        let (FetchError::Refused(_, r) | FetchError::Failed(r)) = self;
        r
    }

    /// The same error with `prefix: ` before its reason (which hop of a redirect chain).
    pub fn context(mut self, prefix: &str) -> Self {
        let (FetchError::Refused(_, r) | FetchError::Failed(r)) = &mut self;
        *r = format!("{prefix}: {r}");
        self
    }

    pub fn into_reply(self) -> NetReply {
        match self {
            FetchError::Refused(kind, reason) => NetReply::Refused(NetRefusal { kind, reason }),
            FetchError::Failed(reason) => NetReply::Failed { reason },
        }
    }
}

/// A duration as a refusal says it: `20 s`, `1.5 s`, `250 ms` (an f64 prints without a
/// fraction when it has none).
pub fn human_duration(d: Duration) -> String {
    match d.as_millis() {
        ms if ms >= 1000 => format!("{} s", ms as f64 / 1000.0),
        ms => format!("{ms} ms"),
    }
}

/// A byte count as a refusal says it: `1 MiB`, `512 KiB`, `1000 bytes`.
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n.is_multiple_of(1 << 20) => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n.is_multiple_of(1 << 10) => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        let ms = Duration::from_millis;
        assert_eq!(human_duration(ms(20_000)), "20 s");
        assert_eq!(human_duration(ms(1500)), "1.5 s");
        assert_eq!(human_duration(ms(250)), "250 ms");
        assert_eq!(human_duration(ms(1001)), "1.001 s");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(4 << 30), "4096 MiB");
        assert_eq!(human_bytes(512 * 1024), "512 KiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }
}
