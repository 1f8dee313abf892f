// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Approvals that find you: `gatehouse notify` on a private session bus (`dbus-run-session`)
//! with a notification server stub that records every call, and the `[notify] command` hook
//! receiving the card's summary on stdin. The notifier's channel cannot decide.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use gatehouse_tests::{bin, misbehaving_peer, Conn};
use ipc_schema::codec::encode;
use ipc_schema::ui::{Choice, Decision, UiReply, UiRequest};
use ipc_schema::{Body, Envelope};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zbus::zvariant::OwnedValue;

const PATH: &str = "/org/freedesktop/Notifications";
const IFACE: &str = "org.freedesktop.Notifications";

/// One call the stub received.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Notify {
        id: u32,
        app: String,
        summary: String,
        body: String,
        actions: Vec<String>,
    },
    Close(u32),
}

struct Stub {
    calls: Arc<Mutex<Vec<Call>>>,
    next: u32,
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Stub {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &mut self,
        app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        actions: Vec<String>,
        _hints: HashMap<String, OwnedValue>,
        _expire_timeout: i32,
    ) -> u32 {
        self.next += 1;
        self.calls.lock().unwrap().push(Call::Notify {
            id: self.next,
            app: app_name,
            summary,
            body,
            actions,
        });
        self.next
    }

    fn close_notification(&mut self, id: u32) {
        self.calls.lock().unwrap().push(Call::Close(id));
    }

    fn get_capabilities(&self) -> Vec<String> {
        vec!["actions".into(), "body".into()]
    }

    fn get_server_information(&self) -> (String, String, String, String) {
        (
            "stub".into(),
            "gatehouse-tests".into(),
            "1".into(),
            "1.2".into(),
        )
    }
}

/// A private session bus: `dbus-run-session` around a `sleep`, in its own process group
/// (killed whole on drop).
struct PrivateBus {
    child: Child,
    address: String,
}

impl PrivateBus {
    fn start() -> PrivateBus {
        let mut child = Command::new("dbus-run-session")
            .args([
                "--",
                "sh",
                "-c",
                "echo \"$DBUS_SESSION_BUS_ADDRESS\"; exec sleep 600",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("dbus-run-session (scripts/test-deps.sh installs it)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line.trim().to_string();
        assert!(address.starts_with("unix:"), "{address:?}");
        PrivateBus { child, address }
    }

    /// The stub, owning the notification service on this bus.
    fn serve_stub(&self) -> (zbus::blocking::Connection, Arc<Mutex<Vec<Call>>>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let conn = zbus::blocking::connection::Builder::address(self.address.as_str())
            .unwrap()
            .name(IFACE)
            .unwrap()
            .serve_at(
                PATH,
                Stub {
                    calls: calls.clone(),
                    next: 0,
                },
            )
            .unwrap()
            .build()
            .expect("the stub on the private bus");
        (conn, calls)
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// `gatehouse notify --json` and its report lines.
struct Notifier {
    child: Child,
    out: BufReader<ChildStdout>,
    /// Lines read while looking for another event (hooks and open commands report from their
    /// own threads, so their lines may come before or after the main loop's).
    backlog: Vec<serde_json::Value>,
}

impl Notifier {
    fn start(root: &Path, bus: &str) -> Notifier {
        let mut child = Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(root)
            .args(["notify", "--json"])
            .env("DBUS_SESSION_BUS_ADDRESS", bus)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gatehouse notify");
        let out = BufReader::new(child.stdout.take().unwrap());
        Notifier {
            child,
            out,
            backlog: Vec::new(),
        }
    }

    /// The first report line not yet taken whose `event` is `event` (others are kept for
    /// later calls).
    fn next(&mut self, event: &str) -> serde_json::Value {
        if let Some(i) = self.backlog.iter().position(|v| v["event"] == event) {
            return self.backlog.remove(i);
        }
        loop {
            let mut line = String::new();
            let n = self.out.read_line(&mut line).unwrap();
            assert!(
                n > 0,
                "the notifier ended before {event:?}; it said {:?}",
                self.backlog
            );
            let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
            if v["event"] == event {
                return v;
            }
            self.backlog.push(v);
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ui(b: &Broker) -> Ui {
    let c = Conn::connect(&b.ui_socket()).unwrap();
    c.set_timeout(Some(Duration::from_secs(30)));
    Ui(c)
}

fn write_config(inst: &Instance, text: &str) {
    std::fs::create_dir_all(inst.root().join("config")).unwrap();
    std::fs::write(inst.root().join("config/config.toml"), text).unwrap();
}

#[test]
fn a_card_waiting_with_no_console_reaches_the_desktop_and_the_hook_and_is_taken_back() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    let hook_out = inst.root().join("hook-stdin.json");
    let opened = inst.root().join("opened");
    // The hook and the open command are argv lists run directly; these two use sh to write
    // what they got where the test can read it.
    write_config(
        &inst,
        &format!(
            "[notify]\ncommand = [\"sh\", \"-c\", \"cat > '{}'\"]\nopen = [\"sh\", \"-c\", \"echo opened >> '{}'\"]\n",
            hook_out.display(),
            opened.display()
        ),
    );
    let b = inst.start(&[]);
    let bus = PrivateBus::start();
    let (stub_conn, calls) = bus.serve_stub();
    let mut n = Notifier::start(inst.root(), &bus.address);
    let w = n.next("watching");
    assert_eq!(w["desktop"], "stub 1 (gatehouse-tests)");
    assert_eq!(w["hook"], true);

    // A card waits, no console attached. The written content must reach neither the desktop
    // nor the hook.
    let target = inst.file("notes\u{202E}txt.md");
    let mut gw = b.gateway();
    gw.send(write_call(&target, "SECRET-CONTENT-4711"));
    let mut plain = ui(&b);
    let p = plain.wait_pending(1).remove(0);
    let shown = n.next("shown");
    assert_eq!(shown["proposal"], p.id.0);
    let first = shown["notification"].as_u64().unwrap() as u32;
    let call = calls.lock().unwrap()[0].clone();
    let Call::Notify {
        id,
        app,
        summary,
        body,
        actions,
    } = call
    else {
        panic!("{call:?}")
    };
    assert_eq!(id, first);
    assert_eq!(app, "gatehouse");
    assert_eq!(summary, "gatehouse: write_file waits for you");
    let shown_target = target
        .display()
        .to_string()
        .replace('\u{202E}', "\\u{202E}");
    assert_eq!(
        body,
        format!(
            "Session {} asks to run write_file on {shown_target} (card #{}). Decide on the console.",
            p.session, p.id.0
        )
    );
    assert!(!body.contains("SECRET-CONTENT"), "{body}");
    assert_eq!(
        actions,
        ["default", "Open the console", "open", "Open the console"]
    );

    // The hook got the summary as JSON on stdin.
    assert_eq!(n.next("hook")["ended"], "exited with status 0");
    let got = std::fs::read_to_string(&hook_out).unwrap();
    assert!(!got.contains("SECRET-CONTENT"), "{got}");
    let v: serde_json::Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "event": "waiting",
            "proposal": p.id.0,
            "session": p.session.0,
            "tool": "write_file",
            "target": shown_target,
            "expires_unix_ms": p.expires_unix_ms,
            "decide_with": "gatehouse ui",
        })
    );

    // The server says the user chose "open": the configured command runs.
    stub_conn
        .emit_signal(
            None::<zbus::names::BusName<'_>>,
            PATH,
            IFACE,
            "ActionInvoked",
            &(first, "open"),
        )
        .unwrap();
    let o = n.next("opened");
    assert_eq!(o["proposal"], p.id.0);
    assert_eq!(o["ended"], "exited with status 0");
    assert_eq!(std::fs::read_to_string(&opened).unwrap(), "opened\n");

    // A console attaches: the notification is taken back.
    let mut console = Conn::connect(&b.ui_socket()).unwrap();
    console.set_timeout(Some(Duration::from_secs(30)));
    assert_eq!(
        console.request(Body::Ui(UiRequest::Subscribe)),
        Body::UiReply(UiReply::Subscribed)
    );
    let c = n.next("closed");
    assert_eq!(c["why"], "console attached");
    assert_eq!(c["notification"], first);
    assert_eq!(calls.lock().unwrap()[1], Call::Close(first));

    // The console goes while the card still waits: it is shown again.
    drop(console);
    let again = n.next("shown");
    assert_eq!(again["proposal"], p.id.0);
    let second = again["notification"].as_u64().unwrap() as u32;
    assert_ne!(second, first);
    assert_eq!(n.next("hook")["ended"], "exited with status 0");

    // The decision comes from the ui channel, as always; the card closes and so does the
    // notification.
    assert!(matches!(
        plain.decide(&p, Choice::Deny),
        Body::UiReply(UiReply::Decided { .. })
    ));
    let c = n.next("closed");
    assert_eq!(c["why"], "closed");
    assert_eq!(c["notification"], second);
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(calls[3], Call::Close(second));
}

#[test]
fn the_notifier_channel_cannot_decide() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    gw.send(write_call(&inst.file("x.txt"), "x"));
    let mut plain = ui(&b);
    let p = plain.wait_pending(1).remove(0);
    // With the right digest, even: the notifier's table has no row for a decision.
    let forged = encode(&Envelope::new(
        1,
        Body::Ui(UiRequest::Decide(Decision {
            proposal: p.id,
            digest: p.digest,
            choice: Choice::AlwaysAllow,
        })),
    ))
    .unwrap();
    let st = misbehaving_peer(&inst.root().join("run/notify.sock"), &forged);
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    assert_eq!(
        plain.pending().len(),
        1,
        "the forged decision decided nothing"
    );
    assert!(
        b.log()
            .contains("sent a Ui message, which the notifier may not send"),
        "{}",
        b.log()
    );
    // The same decision from the console's channel is taken (the positive control).
    assert!(matches!(
        plain.decide(&p, Choice::Deny),
        Body::UiReply(UiReply::Decided { .. })
    ));
}

#[test]
fn no_session_bus_is_a_clear_refusal_and_a_hung_hook_holds_nothing_up() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    write_config(
        &inst,
        "[notify]\ncommand = [\"sleep\", \"600\"]\nhook_timeout_secs = 1\n",
    );
    let b = inst.start(&[]);
    let out = Command::new(bin("gatehouse"))
        .arg("--data-dir")
        .arg(inst.root())
        .arg("notify")
        .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("gatehouse notify: cannot reach the session bus: ")
            && err.contains("set `[notify] desktop = false`"),
        "{err}"
    );

    // Hook only: the hook hangs, the card is decided all the same, and the hook is killed.
    write_config(
        &inst,
        "[notify]\ndesktop = false\ncommand = [\"sleep\", \"600\"]\nhook_timeout_secs = 1\n",
    );
    let mut n = Notifier::start(inst.root(), "unix:path=/nonexistent/bus");
    assert_eq!(n.next("watching")["desktop"], serde_json::Value::Null);
    let mut gw = b.gateway();
    let id = gw.send(write_call(&inst.file("y.txt"), "y"));
    let mut plain = ui(&b);
    let p = plain.wait_pending(1).remove(0);
    assert!(matches!(
        plain.decide(&p, Choice::AllowOnce),
        Body::UiReply(UiReply::Decided { .. })
    ));
    assert!(matches!(
        gw.final_for(id),
        Some(ipc_schema::tool::ToolReply::Done(_))
    ));
    assert_eq!(
        n.next("hook")["ended"],
        "was still running at its timeout and was killed"
    );
    assert_eq!(n.next("closed")["why"], "closed");
}
