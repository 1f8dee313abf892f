//! The demo's scripted approver: a connection on the ui socket, like the console's, that
//! subscribes to proposals and decides them. Every decision it makes is said on screen.

use super::Ev;
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::ui::{Choice, Decision, Proposal, UiRequest};
use ipc_schema::{Body, Envelope};
use std::io::Write;
use std::path::Path;
use std::sync::mpsc::Sender;

pub struct Approver {
    writer: Box<dyn Write + Send>,
    next_id: u64,
    /// The request id the broker sends events on.
    pub subscription: u64,
}

impl Approver {
    /// Connects to the ui socket at `path` and subscribes; frames arrive as [`Ev::Ui`].
    pub fn connect(path: &Path, tx: Sender<Ev>) -> Result<Approver, String> {
        let (mut rd, writer) = gatehouse_client::Client::connect(path)
            .map_err(|e| format!("cannot reach the ui socket: {e}"))?
            .into_parts();
        std::thread::Builder::new()
            .name("demo-ui-reader".into())
            .spawn(move || loop {
                let ev = match read_frame(&mut rd, MAX_FRAME) {
                    Ok(Some(env)) => Ev::Ui(Box::new(env)),
                    Ok(None) => Ev::UiClosed("the broker closed the ui connection".into()),
                    Err(e) => Ev::UiClosed(format!("ui connection: {e}")),
                };
                let last = matches!(ev, Ev::UiClosed(_));
                if tx.send(ev).is_err() || last {
                    return;
                }
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        let mut a = Approver {
            writer: Box::new(writer),
            next_id: 1,
            subscription: 0,
        };
        a.subscription = a.send(Body::Ui(UiRequest::Subscribe))?;
        Ok(a)
    }

    pub fn send(&mut self, body: Body) -> Result<u64, String> {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(&mut self.writer, &Envelope::new(id, body))
            .map_err(|e| e.to_string())
            .and_then(|_| self.writer.flush().map_err(|e| e.to_string()))
            .map_err(|e| format!("ui connection: {e}"))?;
        Ok(id)
    }

    /// Decides `p` with `choice`, bound to the digest the broker showed.
    pub fn decide(&mut self, p: &Proposal, choice: Choice) -> Result<u64, String> {
        self.send(Body::Ui(UiRequest::Decide(Decision {
            proposal: p.id,
            digest: p.digest,
            choice,
        })))
    }
}
