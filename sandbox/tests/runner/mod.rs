//! A minimal test runner (this test target has `harness = false`, because its probes must run
//! on the main thread of a fresh process, which libtest does not offer).
//!
//! Understands what `cargo test` passes: name filters (substring, or exact with `--exact`),
//! `--skip NAME`, `--list`; other libtest flags are accepted and ignored. Tests run one after
//! the other; each is a plain function that panics on failure.

use std::process::ExitCode;
use std::sync::Mutex;

pub type Test = (&'static str, fn());

static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

pub fn run(tests: &[Test]) -> ExitCode {
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut exact = false;
    let mut list = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--exact" => exact = true,
            "--list" => list = true,
            "--skip" => skips.extend(args.next()),
            "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" => {
                args.next();
            }
            flag if flag.starts_with('-') => {}
            name => filters.push(name.to_string()),
        }
    }
    let selected: Vec<&Test> = tests
        .iter()
        .filter(|(name, _)| {
            let wanted = filters.is_empty()
                || filters.iter().any(|f| {
                    if exact {
                        name == f
                    } else {
                        name.contains(f.as_str())
                    }
                });
            wanted && !skips.iter().any(|s| name.contains(s.as_str()))
        })
        .collect();
    if list {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }

    std::panic::set_hook(Box::new(|info| {
        let msg = match info.payload().downcast_ref::<String>() {
            Some(s) => s.clone(),
            None => info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .unwrap_or_default(),
        };
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = format!("{msg}{at}");
    }));

    println!("\nrunning {} tests", selected.len());
    let mut failures = Vec::new();
    for (name, test) in &selected {
        let outcome = std::panic::catch_unwind(test);
        match outcome {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                let msg = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).clone();
                failures.push((*name, msg));
            }
        }
    }
    if !failures.is_empty() {
        println!("\nfailures:\n");
        for (name, msg) in &failures {
            println!("---- {name} ----\n{msg}\n");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; {} filtered out\n",
        if failures.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failures.len(),
        failures.len(),
        tests.len() - selected.len()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}
