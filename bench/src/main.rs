//! gatehouse benchmarks. Each prints its figures next to a floor measured in the same run, and
//! the ratio between them; nothing here asserts a timing.
//!
//! `cargo run --release -p bench -- <name>`; `--help` lists the names.

#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
mod audit;
#[cfg(target_os = "linux")]
mod exec;
#[cfg(target_os = "linux")]
mod fs;
#[cfg(target_os = "linux")]
mod ipc;
#[cfg(target_os = "linux")]
mod mcp;
#[cfg(target_os = "linux")]
mod net;
#[cfg(target_os = "linux")]
mod run;
#[cfg(target_os = "linux")]
mod servers;
#[cfg(target_os = "linux")]
mod stats;

#[cfg(target_os = "linux")]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or("--help");
    let rest = &args[args.len().min(1)..];
    match name {
        "audit" => audit::run(rest),
        "exec" => exec::run(rest),
        "fs" => fs::run(rest),
        "ipc" => ipc::run(rest),
        "mcp" => mcp::run(rest),
        "net" => net::run(rest),
        "run" => run::run(rest),
        "servers" => servers::run(rest),
        _ => {
            eprintln!("usage: bench <audit|exec|fs|ipc|mcp|net|run|servers> [options]");
            std::process::exit(if name == "--help" { 0 } else { 2 });
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    use ipc_schema::platform::{refuse, Missing};
    refuse(
        "bench",
        &[Missing::HelperProcesses, Missing::CommandSandbox],
    )
}
