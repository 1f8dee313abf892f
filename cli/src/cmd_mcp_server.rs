//! `gatehouse mcp-server list|add|remove|tools`: the third-party MCP servers of the policy.
//!
//! `add` and `remove` change the policy document and apply it as the next revision (the same
//! path as `gatehouse policy apply`: refused whole if stale or invalid). `add` resolves the
//! command's program to its canonical path, writes that, and prints it. `tools` shows what a
//! server lists now against what the human approved (its annotations as the server's claim), and
//! with `--approve` pins the definitions it showed (by their digests). Everything a server says
//! is printed inert.

use crate::cmd_policy::request;
use crate::{fail, Global};
use ipc_schema::inert::escaped;
use ipc_schema::servers::ServerName;
use ipc_schema::tool::ProfileName;
use ipc_schema::ui::{ServerToolView, UiReply, UiRequest};
use policy::doc::{McpServerDoc, PolicyDoc};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum McpServerCmd {
    /// The servers of a profile (default: the top level).
    List {
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
    },
    /// Add a stdio server: `gatehouse mcp-server add NAME [--grant DIR]... [--network HOST]...
    /// -- PROGRAM ARGS...`, or a remote one: `gatehouse mcp-server add NAME --url URL
    /// [--credential SECRET]`.
    Add {
        name: String,
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        /// A directory it may read and write (default: none).
        #[arg(long, value_name = "DIR")]
        grant: Vec<PathBuf>,
        /// A host it may reach through the egress proxy (default: none).
        #[arg(long, value_name = "HOST")]
        network: Vec<String>,
        /// One of its tools that only reads (skips the at-most-once ledger).
        #[arg(long, value_name = "TOOL")]
        read_only: Vec<String>,
        /// A remote server (Streamable HTTP, https), reached through the net-helper.
        #[arg(long, value_name = "URL", conflicts_with_all = ["grant", "network", "command"])]
        url: Option<String>,
        /// The gatehouse secret sent to the remote server's host (and only there).
        #[arg(long, value_name = "SECRET", requires = "url")]
        credential: Option<String>,
        #[arg(last = true, required_unless_present = "url")]
        command: Vec<String>,
    },
    /// Remove a server (its tools are no longer offered).
    Remove {
        name: String,
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
    },
    /// What the server lists now, against what was approved; `--approve TOOL` (or
    /// `--approve-all`) pins the definitions shown.
    Tools {
        name: String,
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
        #[arg(long, value_name = "TOOL")]
        approve: Vec<String>,
        #[arg(long)]
        approve_all: bool,
    },
}

fn profile_name(p: &Option<String>) -> Result<ProfileName, String> {
    match p {
        None => Ok(ProfileName::default_profile()),
        Some(p) => ProfileName::parse(p).map_err(|e| e.to_string()),
    }
}

fn document(g: &Global) -> Result<PolicyDoc, String> {
    match request(g, UiRequest::PolicyShow)? {
        UiReply::Policy(v) => PolicyDoc::parse(&v.document)
            .map_err(|e| format!("the policy in force does not parse: {e}")),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// The servers list of `profile` in `doc`.
fn servers<'a>(
    doc: &'a mut PolicyDoc,
    profile: &ProfileName,
) -> Result<&'a mut Vec<McpServerDoc>, String> {
    if profile.is_default() {
        return Ok(&mut doc.mcp_servers);
    }
    doc.profiles
        .get_mut(profile.as_str())
        .map(|p| &mut p.mcp_servers)
        .ok_or_else(|| format!("the policy has no profile {profile}"))
}

fn apply(g: &Global, doc: &PolicyDoc) -> Result<u64, String> {
    match request(
        g,
        UiRequest::PolicyApply {
            document: doc.to_toml(),
        },
    )? {
        UiReply::PolicyApplied { revision } => Ok(revision),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// `program` as the sandbox will run it: a path made canonical, or a name found on `PATH`.
fn resolve(program: &str) -> Result<PathBuf, String> {
    let found = if program.contains('/') {
        PathBuf::from(program)
    } else {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
            .ok_or_else(|| format!("{program} is not found on PATH"))?
    };
    std::fs::canonicalize(&found).map_err(|e| format!("{}: {e}", found.display()))
}

fn absolute(p: &Path) -> Result<String, String> {
    std::fs::canonicalize(p)
        .map(|c| c.to_string_lossy().into_owned())
        .map_err(|e| format!("{}: {e}", p.display()))
}

pub fn run(g: &Global, cmd: McpServerCmd) -> ExitCode {
    match body(g, cmd) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

fn body(g: &Global, cmd: McpServerCmd) -> Result<ExitCode, String> {
    match cmd {
        McpServerCmd::List { profile } => {
            let p = profile_name(&profile)?;
            let mut doc = document(g)?;
            let list = servers(&mut doc, &p)?.clone();
            if g.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&list).expect("serialisable")
                );
            } else if list.is_empty() {
                println!("profile {p} has no third-party MCP servers");
            }
            for s in list.iter().filter(|_| !g.json) {
                if let Some(url) = &s.url {
                    println!(
                        "{}: {} through the net-helper (credential: {})",
                        escaped(&s.name),
                        escaped(url),
                        escaped(s.credential.as_deref().unwrap_or("none")),
                    );
                    continue;
                }
                println!(
                    "{}: {} (grants: {}; network: {})",
                    escaped(&s.name),
                    escaped(&format!("{:?}", s.command.clone().unwrap_or_default())),
                    if s.grant.is_empty() {
                        "none".into()
                    } else {
                        escaped(&s.grant.join(", "))
                    },
                    if s.network.is_empty() {
                        "none".into()
                    } else {
                        escaped(&s.network.join(", "))
                    },
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        McpServerCmd::Add {
            name,
            profile,
            grant,
            network,
            read_only,
            url,
            credential,
            mut command,
        } => {
            let p = profile_name(&profile)?;
            ServerName::try_from(name.clone())?;
            if url.is_none() {
                let program = resolve(&command[0])?;
                command[0] = program.to_string_lossy().into_owned();
            }
            let grant = grant
                .iter()
                .map(|d| absolute(d))
                .collect::<Result<_, _>>()?;
            let mut doc = document(g)?;
            let list = servers(&mut doc, &p)?;
            if list.iter().any(|s| s.name == name) {
                return Err(format!("profile {p} already has a server {name}"));
            }
            let shown = match &url {
                Some(u) => format!("{u} through the net-helper"),
                None => format!("{command:?}"),
            };
            list.push(McpServerDoc {
                name: name.clone(),
                command: url.is_none().then(|| command.clone()),
                url,
                credential,
                grant,
                network,
                read_only,
                ..McpServerDoc::default()
            });
            let revision = apply(g, &doc)?;
            println!(
                "server {name} added to profile {p} (policy revision {revision}): {}",
                escaped(&shown)
            );
            println!(
                "its tools are held until you approve them: gatehouse mcp-server tools {name}"
            );
            Ok(ExitCode::SUCCESS)
        }
        McpServerCmd::Remove { name, profile } => {
            let p = profile_name(&profile)?;
            let mut doc = document(g)?;
            let list = servers(&mut doc, &p)?;
            let before = list.len();
            list.retain(|s| s.name != name);
            if list.len() == before {
                return Err(format!("profile {p} has no server {name}"));
            }
            let revision = apply(g, &doc)?;
            println!("server {name} removed from profile {p} (policy revision {revision})");
            Ok(ExitCode::SUCCESS)
        }
        McpServerCmd::Tools {
            name,
            profile,
            approve,
            approve_all,
        } => {
            let p = profile_name(&profile)?;
            let server = ServerName::try_from(name)?;
            let shown = match request(
                g,
                UiRequest::ServerTools {
                    profile: p.clone(),
                    server: server.clone(),
                },
            )? {
                UiReply::ServerTools(v) => v,
                other => return Err(format!("unexpected reply {other:?}")),
            };
            if !approve.is_empty() || approve_all {
                let mut tools = Vec::new();
                for t in &shown {
                    if approve_all && t.held.is_some()
                        || approve.iter().any(|a| a == t.def.name.as_str())
                    {
                        tools.push((t.def.name.clone(), t.digest));
                    }
                }
                for a in &approve {
                    if !shown.iter().any(|t| t.def.name.as_str() == a) {
                        return Err(format!("the server {server} does not list {}", escaped(a)));
                    }
                }
                let count = match request(
                    g,
                    UiRequest::ApproveServerTools {
                        profile: p.clone(),
                        server: server.clone(),
                        tools,
                    },
                )? {
                    UiReply::ServerToolsApproved { count } => count,
                    other => return Err(format!("unexpected reply {other:?}")),
                };
                if g.json {
                    println!("{}", serde_json::json!({ "approved": count }));
                } else {
                    println!("{count} tool definition(s) of {server} approved and pinned");
                }
                return Ok(ExitCode::SUCCESS);
            }
            if g.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&shown).expect("serialisable")
                );
            } else {
                print_tools(&server, &shown);
            }
            // Exit 3 when something is held, so a script can tell.
            Ok(if shown.iter().any(|t| t.held.is_some()) {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

fn print_tools(server: &ServerName, shown: &[ServerToolView]) {
    for t in shown {
        let name = ipc_schema::servers::offered_name(server, &t.def.name);
        let state = match &t.held {
            None => "pinned".to_string(),
            Some(why) => format!("HELD: {why}"),
        };
        println!("{} [{}] {}", escaped(&name), hex8(&t.digest), state);
        if let Some(d) = &t.def.description {
            println!("    description: {}", escaped(d));
        }
        println!("    input schema: {}", escaped(t.def.input_schema.as_str()));
        if let Some(a) = &t.def.annotations {
            println!(
                "    annotations (the server's claim, not checked): {}",
                escaped(a.as_str())
            );
        }
        if let Some(old) = &t.pinned {
            if old.description != t.def.description {
                println!(
                    "    approved description was: {}",
                    escaped(old.description.as_deref().unwrap_or(""))
                );
            }
            if old.input_schema != t.def.input_schema {
                println!(
                    "    approved input schema was: {}",
                    escaped(old.input_schema.as_str())
                );
            }
        }
    }
}

fn hex8(d: &[u8; 32]) -> String {
    d[..4].iter().map(|b| format!("{b:02x}")).collect()
}
