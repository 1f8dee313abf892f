//! gatehouse benchmarks. Each prints its figures next to a floor measured in the same run, and
//! the ratio between them; nothing here asserts a timing.
//!
//! `cargo run --release -p bench -- <name>`; `--help` lists the names.

#![forbid(unsafe_code)]

mod audit;
mod exec;
mod fs;
mod ipc;
mod mcp;
mod net;
mod run;
mod servers;
mod stats;

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
