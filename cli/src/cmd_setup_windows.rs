//! `gatehouse setup network-filters` (Windows): the Windows Filtering Platform filters that
//! refuse outbound network to every confined helper but net, and to commands
//! (`sandbox::wincfg::network_filters`; docs/windows.md says how they match). Installed once
//! for the machine, as an administrator; without `--yes` it only prints them.
//!
//! After installing, this process (the user's own, unrestricted token) tries the loopback: if
//! the filters refused it, they would cut every program's network, so they are removed at once
//! and the command fails. Whether they refuse the helpers is each helper's own try at its
//! start, which `gatehouse doctor` shows.

use crate::{Global, EXIT_FAILURE};
use sandbox::wincfg;
use sandbox::windows as w;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum SetupCmd {
    /// Print (and with --yes, as an administrator, install) the WFP filters that refuse outbound
    /// network to gatehouse's confined helpers and commands.
    NetworkFilters(FilterArgs),
}

#[derive(clap::Args)]
pub struct FilterArgs {
    /// Install the filters (persistent; needs an elevated prompt). Without it, nothing changes:
    /// the filters are printed.
    #[arg(long, conflicts_with_all = ["remove", "status"])]
    yes: bool,
    /// Remove gatehouse's filters, sublayer and provider (needs an elevated prompt).
    #[arg(long, conflicts_with = "status")]
    remove: bool,
    /// Show which of the filters this machine holds.
    #[arg(long)]
    status: bool,
}

const ACCESS_DENIED: u32 = 5;

fn why(e: &w::WinError) -> String {
    if e.code() == Some(ACCESS_DENIED) {
        format!("{e}: run it from an elevated (administrator) prompt")
    } else {
        e.to_string()
    }
}

pub fn run(g: &Global, cmd: SetupCmd) -> ExitCode {
    let SetupCmd::NetworkFilters(a) = cmd;
    let fail = |e: &str| {
        eprintln!("gatehouse setup network-filters: {e}");
        ExitCode::from(EXIT_FAILURE)
    };
    let set = wincfg::network_filters();
    if a.status {
        return match w::network_filters_installed(&set) {
            Ok(present) => {
                let all = present.iter().all(|(_, p)| *p);
                if g.json {
                    let v: Vec<_> = present
                        .iter()
                        .map(|(n, p)| serde_json::json!({ "filter": n, "installed": p }))
                        .collect();
                    println!("{}", serde_json::json!({ "filters": v, "complete": all }));
                } else {
                    for (n, p) in &present {
                        println!("{} {n}", if *p { "installed" } else { "missing  " });
                    }
                }
                if all {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_FAILURE)
                }
            }
            Err(e) => fail(&why(&e)),
        };
    }
    if a.remove {
        return match w::remove_network_filters(&set) {
            Ok(()) => {
                println!("removed gatehouse's WFP filters, sublayer and provider");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&why(&e)),
        };
    }
    if !a.yes {
        if g.json {
            println!(
                "{}",
                serde_json::json!({ "filters": set.render(), "installed": false })
            );
        } else {
            println!("# would install (run with --yes from an elevated prompt):");
            print!("{}", set.render());
        }
        return ExitCode::SUCCESS;
    }
    if let Err(e) = w::install_network_filters(&set) {
        return fail(&why(&e));
    }
    // This process is unconfined: the filters must leave it alone.
    let refused: Vec<String> = w::loopback_tries()
        .into_iter()
        .filter(|t| t.refused)
        .map(|t| t.what)
        .collect();
    if !refused.is_empty() {
        let undone = match w::remove_network_filters(&set) {
            Ok(()) => "removed them again".to_string(),
            Err(e) => format!(
                "and removing them failed ({}): run `gatehouse setup network-filters --remove` now",
                why(&e)
            ),
        };
        return fail(&format!(
            "the filters refused this unconfined process ({}), so they would cut every program's network: {undone}",
            refused.join(", ")
        ));
    }
    match w::network_filters_installed(&set) {
        Ok(present) if present.iter().all(|(_, p)| *p) => {
            println!(
                "installed {} WFP filters; each helper tries the network when it starts, and `gatehouse doctor` shows whether they hold",
                present.len()
            );
            ExitCode::SUCCESS
        }
        Ok(present) => fail(&format!(
            "installed, but the engine does not hold {}",
            present
                .iter()
                .filter(|(_, p)| !p)
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Err(e) => fail(&format!(
            "installed, but reading them back failed: {}",
            why(&e)
        )),
    }
}
