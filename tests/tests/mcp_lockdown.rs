// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! What the kernel enforces on a running `gatehouse mcp`: no filesystem, no new sockets, no
//! exec. Each denial is the exact errno or the exact kill, beside a positive control: the same
//! probe in a test build started with `--test-skip-lockdown` succeeds.

#![forbid(unsafe_code)]

mod mcp_support;

use mcp_support::*;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn probe(m: &mut Mcp, params: Value) -> Value {
    m.request("gatehouse.test/probe", params)["result"].clone()
}

fn proc_status(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap()
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
        .unwrap_or_else(|| panic!("no {name} in /proc status"))
        .trim()
}

#[test]
fn the_running_gateway_has_seccomp_no_new_privs_and_no_capabilities() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-06-18"); // served, so the lockdown is done
    let st = proc_status(m.pid());
    assert_eq!(field(&st, "Seccomp"), "2", "{st}");
    assert_eq!(field(&st, "NoNewPrivs"), "1", "{st}");
    for caps in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(field(&st, caps), "0000000000000000", "{caps}");
    }
    let fds = std::fs::read_dir(format!("/proc/{}/fd", m.pid()));
    if nix::unistd::geteuid().is_root() {
        // Root may look inside a process that is not dumpable: only stdio and the broker
        // connection are open.
        assert_eq!(
            fds.unwrap().count(),
            4,
            "stdio and the broker connection only"
        );
    } else {
        // Anyone else, the same user included, is kept out by PR_SET_DUMPABLE 0.
        assert_eq!(fds.unwrap_err().raw_os_error(), Some(libc::EACCES));
    }

    // The control: without lockdown, none of the above, and the same user may look inside.
    let mut c = inst.mcp(&["--test-skip-lockdown"]);
    c.initialize("2025-06-18");
    let control = proc_status(c.pid());
    let me = proc_status(std::process::id());
    for f in ["Seccomp", "Seccomp_filters", "NoNewPrivs"] {
        assert_eq!(
            field(&control, f),
            field(&me, f),
            "{f}: the control has what the test has"
        );
    }
    let filters = |s: &str| field(s, "Seccomp_filters").parse::<u32>().unwrap();
    assert!(
        filters(&st) > filters(&control),
        "the lockdown added a seccomp filter"
    );
    assert!(std::fs::read_dir(format!("/proc/{}/fd", c.pid())).is_ok());
    assert!(c.stderr().contains("WITHOUT lockdown"), "{}", c.stderr());
}

#[test]
fn opening_a_file_is_refused_with_eacces() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let target = inst.file("hello.txt").display().to_string();

    let mut control = inst.mcp(&["--test-skip-lockdown"]);
    assert_eq!(
        probe(&mut control, json!({"op": "open", "path": target}))["ok"],
        true
    );

    let mut m = inst.mcp(&[]);
    let r = probe(&mut m, json!({"op": "open", "path": target}));
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["errno"], libc::EACCES, "{r}");
    // The gateway lives on after a refused syscall.
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

/// A probe the seccomp filter answers by killing the process: stdout closes and the status is
/// the signal SIGSYS.
fn killed_by_sigsys(inst: &Instance, params: Value) {
    let mut control = inst.mcp(&["--test-skip-lockdown"]);
    let r = probe(&mut control, params.clone());
    assert_eq!(r["ok"], true, "control {params}: {r}");

    let mut m = inst.mcp(&[]);
    m.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "gatehouse.test/probe", "params": params}));
    assert!(
        m.stdout_closed(),
        "{params}: the gateway answered instead of dying"
    );
    let st = m.wait();
    assert_eq!(st.signal(), Some(libc::SIGSYS), "{params}: {st}");
}

#[test]
fn a_new_unix_socket_is_killed() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let path = inst.tmp.path().join("listener.sock");
    let _l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    killed_by_sigsys(&inst, json!({"op": "connect_unix", "path": path}));
}

#[test]
fn a_new_tcp_socket_is_killed() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    killed_by_sigsys(
        &inst,
        json!({"op": "connect_tcp", "addr": l.local_addr().unwrap().to_string()}),
    );
}

#[test]
fn running_a_program_is_killed() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    killed_by_sigsys(&inst, json!({"op": "exec", "path": "/bin/true"}));
}

#[test]
fn release_builds_have_neither_the_switch_nor_the_probe() {
    let release = gatehouse_tests::release_dir().join("gatehouse");
    let out = Command::new(&release)
        .args(["mcp", "--test-skip-lockdown"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--test-skip-lockdown'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The release gateway (starting its own release broker) does not know the probe method.
    let inst = Instance::new(None);
    let mut m = inst.mcp_with(&release, &[], &[]);
    let r = m.request(
        "gatehouse.test/probe",
        json!({"op": "open", "path": "/etc/hostname"}),
    );
    assert_eq!(r["error"]["code"], -32601, "{r}");
    m.close();
    assert!(m.wait().success());
    let stop = Command::new(&release)
        .arg("--data-dir")
        .arg(&inst.data)
        .arg("stop")
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    // The test build does have both, so the checks above are not vacuous.
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let mut t = inst.mcp(&["--test-skip-lockdown"]);
    assert_eq!(
        probe(
            &mut t,
            json!({"op": "open", "path": inst.file("hello.txt")})
        )["ok"],
        true
    );
}
