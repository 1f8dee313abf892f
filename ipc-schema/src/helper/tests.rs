//! The happy paths in process (the fatal ones end the process: the helpers' integration tests
//! drive those against the real binaries).

use super::*;
use crate::codec::{encode, read_frame};
use crate::exec::{CommandSpec, ExecRequest, Limits, NetworkMode};
use crate::fs::FsRequest;
use crate::route::{BROKER_TO_EXEC, BROKER_TO_FS};
use std::os::unix::net::UnixStream;

fn status(id: u64) -> Vec<u8> {
    encode(&Envelope::new(id, Body::Fs(FsRequest::Status))).unwrap()
}

fn serve_pipelined(wipe: bool) {
    let (broker, helper) = UnixStream::pair().unwrap();
    let server = std::thread::spawn(move || {
        let mut chan =
            HelperChannel::hello(Role::Fs, helper, LockdownReport::unconfined("fs", "t"));
        if wipe {
            chan = chan.wiping();
        }
        let mut seen = Vec::new();
        chan.serve(&BROKER_TO_FS, |req| {
            seen.push(req.id);
            Answer::reply(Body::Error(ErrorReply::new(ErrorCode::Invalid, "x")))
        });
        seen
    });
    let mut r = &broker;
    let hello = read_frame(&mut r, MAX_FRAME).unwrap().unwrap();
    assert!(matches!(
        hello.body,
        Body::Hello(Hello { role: Role::Fs, .. })
    ));
    assert_eq!(hello.id, 0);
    // Many requests in one write, and a ping the channel answers itself.
    let mut batch = Vec::new();
    for id in 1..=200 {
        batch.extend(status(id));
    }
    batch.extend(encode(&Envelope::new(201, Body::Ping { target: None })).unwrap());
    (&broker).write_all(&batch).unwrap();
    for id in 1..=201 {
        let env = read_frame(&mut r, MAX_FRAME).unwrap().unwrap();
        assert_eq!(env.id, id);
        let want = if id == 201 {
            Body::Pong
        } else {
            Body::Error(ErrorReply::new(ErrorCode::Invalid, "x"))
        };
        assert_eq!(env.body, want);
    }
    broker.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(server.join().unwrap(), (1..=200).collect::<Vec<u64>>());
}

#[test]
fn serves_pipelined_requests_in_order_and_answers_pings() {
    serve_pipelined(false);
}

#[test]
fn serves_the_same_with_wiping_buffers() {
    serve_pipelined(true);
}

#[test]
fn a_frame_larger_than_the_buffer_is_read_whole() {
    let (a, b) = UnixStream::pair().unwrap();
    let path = vec![b'x'; 300 * 1024];
    let big = Body::Fs(FsRequest::Stat {
        path: crate::fs::FsPath::Absolute(path.clone()),
    });
    let frame = encode(&Envelope::new(7, big.clone())).unwrap();
    let writer = std::thread::spawn(move || (&a).write_all(&frame).unwrap());
    let mut inbox = Inbox::new(Role::Fs, &BROKER_TO_FS, true);
    let req = loop {
        if let Some(r) = inbox.next() {
            break r;
        }
        assert!(inbox.fill_fd(b.as_fd()).unwrap() > 0);
    };
    writer.join().unwrap();
    assert_eq!((req.id, req.body), (7, big));
    assert!(inbox.buf.filled().is_empty());
    // Wiping: nothing of the frame is left in the buffer.
    assert!(inbox.buf.data.iter().all(|b| *b == 0));
}

#[test]
fn a_proxied_start_takes_the_descriptor_that_came_with_it() {
    let (a, b) = UnixStream::pair().unwrap();
    let (connector, _other) = UnixStream::pair().unwrap();
    let spec = CommandSpec {
        argv: vec!["true".into()],
        cwd: "/w".into(),
        grants: vec![],
        env: vec![],
        network: NetworkMode::Proxy { token: "t".into() },
        limits: Limits::default(),
        hide: Default::default(),
        user: None,
        slot: None,
    };
    let frame = encode(&Envelope::new(
        3,
        Body::Exec(ExecRequest::Start(Box::new(spec))),
    ))
    .unwrap();
    crate::fdpass::send_frame_with_fd(&a, &frame, connector.as_fd()).unwrap();
    let mut inbox = Inbox::new(Role::Exec, &BROKER_TO_EXEC, false);
    assert!(inbox.next().is_none());
    while inbox.fill_fd(b.as_fd()).unwrap() > 0 && inbox.buf.filled().len() < frame.len() {}
    let req = inbox.next().unwrap();
    assert!(req.flags.contains(Flags::FD));
    assert!(req.fd.is_some());
    assert!(inbox.fds.is_empty());
}
