//! `bench exec`: the cost of running `/bin/true` in the exec sandbox, against a bare spawn of
//! `/bin/true` measured in the same run, and against bubblewrap as the reference people know.
//!
//! Rows: bare `posix_spawn` (the floor); the sandbox as the exec-helper pays it per command
//! (in-process `prepare` + `spawn` + wait, no network, and with the proxy bridge), in each
//! confinement tier (namespaces, and landlock: no namespaces); a small build (`cc` of a hello
//! world) bare and in each tier, against its own bare floor; the same as
//! `gatehouse sandbox -- /bin/true` (a process, no network); `bwrap --unshare-all
//! --die-with-parent --ro-bind / / true`; and, to show where the time goes, `unshare` creating
//! the same six namespaces and nothing else, and the planning step alone.
//!
//! Run as root, it first becomes nobody (a sandbox never runs as root), so every row runs as
//! the same unprivileged user. `cargo build --release --workspace && cargo run --release -p
//! bench -- exec [--bin-dir target/release] [--iterations N]`.

use crate::stats::{us, Samples};
use ipc_schema::exec::{GrantAccess, Limits, PathGrant};
use sandbox::linux::command::{self, identity, ConfinementTier, Network, SandboxSpec, Watch};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn run(args: &[String]) {
    let mut bin_dir = PathBuf::from("target/release");
    let mut n = 300usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bin-dir" => bin_dir = it.next().map(PathBuf::from).unwrap_or(bin_dir),
            "--iterations" => n = it.next().and_then(|v| v.parse().ok()).unwrap_or(n),
            other => {
                eprintln!("bench exec: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let gatehouse = std::fs::canonicalize(bin_dir.join("gatehouse")).unwrap_or_else(|_| {
        eprintln!(
            "bench exec: {}/gatehouse is missing (cargo build --release)",
            bin_dir.display()
        );
        std::process::exit(2)
    });

    let work = std::env::temp_dir().join(format!("gh-bench-exec-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let data = work.join("data");
    let root = work.join("root");
    std::fs::create_dir_all(&root).unwrap();
    if nix::unistd::geteuid().is_root() {
        for p in [&work, &root] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        identity::become_user(65534, 65534).expect("become nobody");
    }
    let home = identity::home_of(nix::unistd::geteuid().as_raw());

    let bare = sample(n, || {
        let st = Command::new("/bin/true").status().unwrap();
        assert!(st.success());
    });
    let ns = ConfinementTier::Namespaces;
    let flat = ConfinementTier::Landlock;
    let truth = ["/bin/true".to_string()];
    let mut phases: [Vec<Duration>; 5] = Default::default();
    let lib_none = sample(n, || {
        let p = run_in_sandbox(&root, &home, false, ns, &truth);
        for (v, d) in phases.iter_mut().zip(p) {
            v.push(d);
        }
    });
    let phases = phases.map(Samples::new);
    let lib_proxy = sample(n, || {
        run_in_sandbox(&root, &home, true, ns, &truth);
    });
    let flat_none = sample(n, || {
        run_in_sandbox(&root, &home, false, flat, &truth);
    });
    let flat_proxy = sample(n, || {
        run_in_sandbox(&root, &home, true, flat, &truth);
    });
    // A small build: one C file compiled and linked (cc runs cpp, cc1, as and ld).
    let build = which("cc").map(|cc| {
        std::fs::write(
            root.join("hello.c"),
            "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
        )
        .unwrap();
        let argv = [
            cc.display().to_string(),
            "-O1".into(),
            "-o".into(),
            "hello".into(),
            "hello.c".into(),
        ];
        let m = n.min(40);
        let bare = sample(m, || {
            let st = Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(&root)
                .stdin(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
        });
        let in_ns = sample(m, || {
            run_in_sandbox(&root, &home, false, ns, &argv);
        });
        let in_flat = sample(m, || {
            run_in_sandbox(&root, &home, false, flat, &argv);
        });
        (m, bare, in_ns, in_flat)
    });
    // A project tree as the walk of writable grants meets it: 10,000 files in 1,000
    // directories, ten nested repositories (git dirs masked, their parents pinned), editor
    // settings (read-only binds). Walked before the command and again after it.
    let tree = work.join("tree");
    for d in 0..1000 {
        let dir = tree.join(format!("d{}/e{}", d / 10, d % 10));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..10 {
            std::fs::write(dir.join(format!("f{f}.rs")), "x").unwrap();
        }
        if d % 100 == 0 {
            let g = dir.join(".git");
            for sub in ["hooks", "objects", "refs"] {
                std::fs::create_dir_all(g.join(sub)).unwrap();
            }
            std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
            std::fs::write(g.join("config"), "[core]\n\tbare = false\n").unwrap();
            std::fs::create_dir_all(dir.join(".vscode")).unwrap();
        }
    }
    let lib_tree = sample(n, || {
        run_in_sandbox(&tree, &home, false, ns, &truth);
    });
    let plan_tree = sample(n, || {
        command::prepare(spec(&tree, &home, Network::None, ns, &truth)).unwrap();
    });
    let plan_only = sample(n, || {
        command::prepare(spec(&root, &home, Network::None, ns, &truth)).unwrap();
    });
    let cli = sample(n, || {
        let st = Command::new(&gatehouse)
            .arg("--data-dir")
            .arg(&data)
            .args(["sandbox", "--", "/bin/true"])
            .current_dir(&root)
            .stdin(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "gatehouse sandbox failed: {st:?}");
    });
    let cli_domain = sample(n.min(100), || {
        let st = Command::new(&gatehouse)
            .arg("--data-dir")
            .arg(&data)
            .args([
                "sandbox",
                "--allow-domain",
                "example.com",
                "--",
                "/bin/true",
            ])
            .current_dir(&root)
            .stdin(Stdio::null())
            .status()
            .unwrap();
        assert!(
            st.success(),
            "gatehouse sandbox --allow-domain failed: {st:?}"
        );
    });
    let bwrap = which("bwrap").map(|b| {
        sample(n, || {
            let st = Command::new(&b)
                .args([
                    "--unshare-all",
                    "--die-with-parent",
                    "--ro-bind",
                    "/",
                    "/",
                    "true",
                ])
                .stdin(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success(), "bwrap failed: {st:?}");
        })
    });
    let unshare = which("unshare").map(|u| {
        sample(n, || {
            let st = Command::new(&u)
                .args([
                    "--user",
                    "--map-root-user",
                    "--mount",
                    "--pid",
                    "--net",
                    "--ipc",
                    "--uts",
                    "--fork",
                    "/bin/true",
                ])
                .stdin(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success(), "unshare failed: {st:?}");
        })
    });
    // `gatehouse sandbox` started a broker for `data` on its first run (each run after asked
    // that broker's exec-helper); it goes with the directory.
    let _ = Command::new(&gatehouse)
        .arg("--data-dir")
        .arg(&data)
        .arg("stop")
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_dir_all(&work);

    let floor = us(bare.p50());
    println!("exec: /bin/true, {n} runs each (p50 / p99; ratio = p50 against the bare spawn)");
    let row = |name: &str, s: &Samples| print_row(name, s, floor);
    row("floor: bare posix_spawn", &bare);
    row(
        "sandbox, no network (as the exec-helper runs it)",
        &lib_none,
    );
    row(
        "sandbox, proxy bridge (as the exec-helper runs it)",
        &lib_proxy,
    );
    row(
        "landlock tier (no namespaces), no network (exec-helper path)",
        &flat_none,
    );
    row(
        "landlock tier (no namespaces), proxy bridge (exec-helper path)",
        &flat_proxy,
    );
    row(
        "sandbox, writable tree: 10k files, 10 repos (as run_command)",
        &lib_tree,
    );
    row(
        "  of which planning (the walk before, the mounts it needs)",
        &plan_tree,
    );
    row(
        "gatehouse sandbox -- /bin/true (through the broker's exec-helper)",
        &cli,
    );
    row(
        "gatehouse sandbox --allow-domain (+ a proxy session, the connector)",
        &cli_domain,
    );
    match &bwrap {
        Some(b) => row(
            "bwrap --unshare-all --die-with-parent --ro-bind / / true",
            b,
        ),
        None => println!("  bwrap: not installed (apt-get install bubblewrap)"),
    }
    match &build {
        Some((m, bare, in_ns, in_flat)) => {
            let floor = us(bare.p50());
            println!(
                "  small build: cc -O1 -o hello hello.c, {m} runs each (ratio = p50 against the bare build)"
            );
            print_row("floor: bare cc", bare, floor);
            print_row(
                "namespace tier, no network (exec-helper path)",
                in_ns,
                floor,
            );
            print_row(
                "landlock tier, no network (exec-helper path)",
                in_flat,
                floor,
            );
        }
        None => println!("  small build: cc is not installed"),
    }
    println!("  where the time goes (no network, exec-helper path):");
    row(
        "  planning (prepare: grants, masks, rules, filters)",
        &plan_only,
    );
    row(
        "  clone: creating the six namespaces (in the caller)",
        &phases[1],
    );
    row(
        "  init: identity map, mounts, pivot, Landlock rules",
        &phases[2],
    );
    row(
        "  the command: limits, seccomp, exec /bin/true, exit",
        &phases[3],
    );
    row("  teardown: exit reported -> namespaces gone", &phases[4]);
    if let Some(u) = &unshare {
        row("  unshare: the same six namespaces, nothing else", u);
    }
    if let Some(b) = &bwrap {
        println!(
            "  targets: no-network sandbox <= 3x bare: {:.2}x (exec-helper path), {:.2}x (gatehouse sandbox); <= 0.5x bwrap: {:.2}x, {:.2}x",
            us(lib_none.p50()) / floor,
            us(cli.p50()) / floor,
            us(lib_none.p50()) / us(b.p50()),
            us(cli.p50()) / us(b.p50()),
        );
    }
}

fn spec(
    root: &Path,
    home: &Path,
    network: Network,
    tier: ConfinementTier,
    argv: &[String],
) -> SandboxSpec {
    // What run_command hides by default: files that may hold secrets.
    let sensitive = root.file_name().is_some_and(|n| n == "tree");
    SandboxSpec {
        hide: command::Hide {
            exclude: vec![],
            sensitive,
        },
        argv: argv.to_vec(),
        cwd: root.to_path_buf(),
        grants: vec![PathGrant {
            path: root.to_path_buf(),
            access: GrantAccess::ReadWrite,
        }],
        env: vec![],
        home: home.to_path_buf(),
        state_home: None,
        network,
        limits: Limits::default(),
        long_run: false,
        protect: vec![],
        allow_degraded: false,
        tier,
    }
}

/// One command through the sandbox the way the exec-helper runs it: plan, spawn, watch to the
/// end. Returns the time of each phase: planning, clone, setup, command, teardown.
fn run_in_sandbox(
    root: &Path,
    home: &Path,
    proxy: bool,
    tier: ConfinementTier,
    argv: &[String],
) -> [Duration; 5] {
    let (network, _keep) = if proxy {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (
            Network::Proxy {
                connector: b.into(),
                token: "bench".into(),
            },
            Some(a),
        )
    } else {
        (Network::None, None)
    };
    let t0 = Instant::now();
    let prepared = command::prepare(spec(root, home, network, tier, argv)).unwrap();
    let t1 = Instant::now();
    let sb = prepared.spawn().unwrap();
    let t2 = Instant::now();
    let mut w = Watch::new(sb, Limits::default()).unwrap();
    while !w.finished() {
        let set = w.poll_set();
        let mut fds: Vec<nix::poll::PollFd> = set
            .iter()
            .flatten()
            .map(|fd| nix::poll::PollFd::new(*fd, nix::poll::PollFlags::POLLIN))
            .collect();
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16));
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        let mut r = [false; 4];
        let mut j = 0;
        for (i, fd) in set.iter().enumerate() {
            if fd.is_some() {
                r[i] = ready[j];
                j += 1;
            }
        }
        w.service(r, &mut |_, _| {});
    }
    let end = w.end();
    assert_eq!(
        end.outcome,
        ipc_schema::exec::RunOutcome::Exited(0),
        "{end:?}"
    );
    // The watch started just after the clone returned.
    let [setup, cmd, teardown] = w.timeline();
    [
        t1 - t0,
        t2 - t1,
        setup.unwrap_or_default(),
        cmd.unwrap_or_default(),
        teardown.unwrap_or_default(),
    ]
}

/// One row: p50, p99, and the p50 as a ratio of `floor` (microseconds).
fn print_row(name: &str, s: &Samples, floor: f64) {
    println!(
        "  {name:<58} p50 {:8.1} us  p99 {:8.1} us  {:5.2}x",
        us(s.p50()),
        us(s.p99()),
        us(s.p50()) / floor
    );
}

fn sample(n: usize, mut f: impl FnMut()) -> Samples {
    for _ in 0..n.min(10) {
        f();
    }
    let mut v: Vec<Duration> = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    Samples::new(v)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file())
}
