//! What the broker grants (`--config`, the same [`FsHelperConfig`] as on Linux), checked again
//! and each root opened before lockdown.

use crate::names::{plain_name, WinPath};
use ipc_schema::fs::{FsHelperConfig, GrantConfig};
use ipc_schema::grant_glob::Scope;
use ipc_schema::protected::Protector;
use sandbox::helper_args::HelperArgs;
use sandbox::windows::beneath;
use std::fs::File;
use std::os::windows::fs::MetadataExt;
use std::path::Path;

/// One grant: its checks (the shared [`Scope`]), its root as parsed, and the root's handle,
/// held since before lockdown and never shared for deleting (so the root cannot be renamed).
pub struct Grant {
    pub scope: Scope,
    pub root: WinPath,
    pub handle: File,
}

/// The helper's state.
pub struct Fs {
    pub grants: Vec<Grant>,
    pub protector: Protector,
    pub store: crate::store::Store,
}

fn checked_root(p: &[u8], what: &str) -> Result<WinPath, String> {
    let shown = String::from_utf8_lossy(p);
    let text = std::str::from_utf8(p).map_err(|_| format!("{what} {shown:?} is not Unicode"))?;
    let parsed = WinPath::parse(text)
        .ok_or_else(|| format!("{what} {shown:?} is not an absolute path on a drive (C:\\...)"))?;
    if parsed.verbatim() != text && format!(r"{}\{}", parsed.drive, parsed.comps.join(r"\")) != text
    {
        return Err(format!(
            "{what} {shown:?} is not canonical (no `.`, `..`, `\\\\`, `/` or trailing `\\`)"
        ));
    }
    for c in &parsed.comps {
        plain_name(c).map_err(|e| format!("{what} {shown:?}: {e}"))?;
    }
    Ok(parsed)
}

/// Opens a grant root: a directory, no reparse point anywhere on the way (what the system
/// says its path is must be the path named).
fn open_root(root: &WinPath, what: &str) -> Result<File, String> {
    let shown = root.verbatim();
    let f =
        beneath::open_dir_path(Path::new(&shown)).map_err(|e| format!("{what} {shown}: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("{what} {shown}: {e}"))?;
    if meta.file_attributes() & beneath::REPARSE_POINT != 0 {
        return Err(format!(
            "{what} {shown} is a link or junction; name the real directory"
        ));
    }
    if !meta.is_dir() {
        return Err(format!("{what} {shown} is not a directory"));
    }
    let at = beneath::final_path(&f).map_err(|e| format!("{what} {shown}: {e}"))?;
    let at_parsed = at.to_str().and_then(WinPath::parse);
    let same = at_parsed
        .as_ref()
        .is_some_and(|a| a.under(root).is_some_and(|rest| rest.is_empty()));
    if !same {
        return Err(format!(
            "{what} {shown} passes through a link or junction (the system places it at {}); name the real directory",
            at.display()
        ));
    }
    Ok(f)
}

/// Decodes `--config`, checks it and opens every root.
pub fn open(args: &HelperArgs) -> Result<Fs, String> {
    let mut given = args.all("--config");
    let cfg: FsHelperConfig = match (given.next(), given.next()) {
        (Some(v), None) => {
            let v = v.to_str().ok_or("--config is not UTF-8")?;
            ipc_schema::codec::from_arg(v).map_err(|e| format!("--config: {e}"))?
        }
        (None, _) => return Err("--config is required".into()),
        _ => return Err("--config is given twice".into()),
    };
    let FsHelperConfig {
        grants: given,
        checkpoint_dir,
        protect,
    } = cfg;
    let checkpoints = checked_root(&checkpoint_dir, "the checkpoint dir")?;
    let store = crate::store::Store::new(open_root(&checkpoints, "the checkpoint dir")?);
    for p in &protect {
        checked_root(p, "a protected dir")?;
    }
    let mut dirs = protect;
    dirs.push(checkpoint_dir);
    let protector = Protector::new(dirs);
    let home = ipc_schema::protected::user_home();
    let mut grants: Vec<Grant> = Vec::new();
    for g in given {
        grants.push(open_grant(g, &grants, &protector, home.as_deref())?);
    }
    Ok(Fs {
        grants,
        protector,
        store,
    })
}

fn open_grant(
    g: GrantConfig,
    before: &[Grant],
    protector: &Protector,
    home: Option<&Path>,
) -> Result<Grant, String> {
    let id = &g.id.0;
    ipc_schema::grant_glob::check_config(&g)?;
    if before.iter().any(|o| o.scope.id == g.id) {
        return Err(format!("grant id {id} is given twice"));
    }
    let what = format!("grant {id}: the root");
    let root = checked_root(&g.root, &what)?;
    let path = root.verbatim();
    if !g.confirmed {
        if let Some(why) = ipc_schema::protected::implicit_root_refusal(Path::new(&path), home) {
            return Err(format!(
                "{what} {path}: {why}; such a grant needs the `confirmed` flag"
            ));
        }
    }
    if let Some(p) = protector.refuses(path.as_bytes(), false) {
        return Err(format!(
            "{what} {path} is protected ({}: {})",
            p.why, p.place
        ));
    }
    let handle = open_root(&root, &what)?;
    Ok(Grant {
        scope: Scope::new(g)?,
        root,
        handle,
    })
}
