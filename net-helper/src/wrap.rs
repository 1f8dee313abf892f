//! The outside-text wrapper (`ipc_schema::outside`), with the OS's random nonces.

use rand::RngCore;

/// The wrapped text and its nonce.
pub fn wrap(source: &str, body: &str) -> (String, String) {
    ipc_schema::outside::wrap(source, body, || {
        let mut raw = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut raw);
        raw
    })
}
