//! The helper's end of the broker channel: frames read into and written from zeroized buffers
//! (a request may carry a value in, a reply a header out), one request at a time.

use crate::service::Service;
use ipc_schema::codec::{self, FrameError, HEADER_LEN, MAX_FRAME};
use ipc_schema::route::broker_may_send;
use ipc_schema::{Body, Envelope, Kind, Role};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use zeroize::Zeroizing;

/// Why the helper stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("broker channel: {0}")]
    Frame(#[from] FrameError),
    #[error("the broker sent a {0:?} message, which the secrets-helper may not receive")]
    Forbidden(Kind),
    #[error(
        "the credential store's connection broke; stopping so that the broker restarts the helper"
    )]
    StoreBroken,
}

pub struct Channel {
    sock: UnixStream,
}

impl Channel {
    pub fn new(sock: UnixStream) -> Channel {
        Channel { sock }
    }

    pub fn send(&mut self, id: u64, body: Body) -> Result<(), ServeError> {
        // Sized so that an attached header never makes the buffer grow (a reallocation would
        // leave a copy behind); larger replies (MAC batches, lists) hold nothing secret.
        let mut buf = Zeroizing::new(Vec::with_capacity(64 * 1024));
        codec::encode_into(&Envelope::new(id, body), &mut buf).map_err(FrameError::from)?;
        self.sock.write_all(&buf).map_err(FrameError::from)?;
        Ok(())
    }

    /// The next frame; `None` when the broker closed the channel between frames.
    pub fn recv(&mut self) -> Result<Option<Envelope>, ServeError> {
        let mut header = [0u8; HEADER_LEN];
        match self.sock.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(FrameError::from(e).into()),
        }
        let len = codec::parse_header(header, MAX_FRAME).map_err(FrameError::from)?;
        let mut payload = Zeroizing::new(vec![0u8; len]);
        self.sock
            .read_exact(&mut payload)
            .map_err(FrameError::from)?;
        Ok(Some(
            codec::decode_payload(&payload).map_err(FrameError::from)?,
        ))
    }
}

/// Answers requests until the broker closes the channel. A message the route table does not
/// allow toward this helper ends it: the broker is the only peer, so it is confused.
pub fn serve(mut chan: Channel, mut service: Service) -> Result<(), ServeError> {
    while let Some(env) = chan.recv()? {
        let kind = env.body.kind();
        if !broker_may_send(Role::Secrets, kind) {
            return Err(ServeError::Forbidden(kind));
        }
        let (reply, stop) = match env.body {
            Body::Secrets(req) => {
                let a = service.handle(req);
                (Body::SecretsReply(a.reply), a.stop)
            }
            // The route table allows only Ping besides Secrets.
            _ => (Body::Pong, false),
        };
        chan.send(env.id, reply)?;
        if stop {
            return Err(ServeError::StoreBroken);
        }
    }
    Ok(())
}
