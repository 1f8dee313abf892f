//! A tool call's arguments in two forms: canonical JSON (the ledger key and what a proposal
//! shows) and a redacted summary (what the audit log keeps: no file content, no secrets).
//! What it will change, in one line, is [`crate::effect`].

use ipc_schema::fs::{Edit, FsPath};
use ipc_schema::tool::ToolCall;
use policy::eval::shown;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn path_json(p: &FsPath) -> Value {
    match p {
        FsPath::InGrant { grant, path } => json!({"grant": grant.0, "path": shown(path)}),
        FsPath::Absolute(p) => json!(shown(p)),
    }
}

/// A path in the canonical form: UTF-8 as a string (`{"path": "/tmp/x"}`), anything else as
/// its bytes in hex (`{"bytes": "2f74ff"}`). The two keys never stand for the same path, so
/// the form stays unambiguous (unlike `shown`, where `\x41` typed by an agent and the byte 0x41
/// would collide) and a card stays readable.
fn path_key(p: &FsPath) -> Value {
    let (grant, bytes) = match p {
        FsPath::InGrant { grant, path } => (Some(&grant.0), path),
        FsPath::Absolute(p) => (None, p),
    };
    let mut v = match std::str::from_utf8(bytes) {
        Ok(s) => json!({ "path": s }),
        Err(_) => json!({ "bytes": hex::encode(bytes) }),
    };
    if let Some(g) = grant {
        v["grant"] = json!(g);
    }
    v
}

/// Canonical JSON of the call's arguments as given (keys sorted; contents as length and
/// SHA-256). The ledger key is computed over this.
pub fn canonical(call: &ToolCall) -> String {
    let v = match call {
        ToolCall::OpenSession { .. }
        | ToolCall::DescribeAgent(_)
        | ToolCall::Withdraw(_)
        | ToolCall::ListServerTools => json!({}),
        ToolCall::Server(c) => {
            json!({"server": c.server.as_str(), "tool": c.tool.as_str(), "arguments": c.arguments.value()})
        }
        ToolCall::ReadFile(a) => {
            json!({"path": path_key(&a.path), "offset": a.offset, "length": a.length})
        }
        ToolCall::ListDir(a) => {
            json!({"path": path_key(&a.path), "offset": a.offset, "limit": a.limit})
        }
        ToolCall::SearchFiles(a) => {
            json!({"path": path_key(&a.path), "glob": a.glob, "limits": serde_json::to_value(a.limits).unwrap_or_default()})
        }
        ToolCall::Grep(a) => {
            json!({"path": path_key(&a.path), "regex": a.regex, "glob": a.glob, "case_insensitive": a.case_insensitive,
            "limits": serde_json::to_value(a.limits).unwrap_or_default(), "grep": serde_json::to_value(a.grep).unwrap_or_default()})
        }
        ToolCall::WriteFile(a) => {
            json!({"path": path_key(&a.path), "content_len": a.content.len(), "content_sha256": sha(&a.content),
            "create": format!("{:?}", a.create), "create_parents": a.create_parents})
        }
        ToolCall::EditFile(a) => {
            json!({"path": path_key(&a.path), "edit": edit_json(&a.edit, true)})
        }
        ToolCall::DeletePath(a) => json!({"path": path_key(&a.path), "recursive": a.recursive}),
        ToolCall::MovePath(a) => {
            json!({"from": path_key(&a.from), "to": path_key(&a.to), "overwrite": a.overwrite})
        }
        ToolCall::UndoChange(a) => json!({"checkpoint": a.checkpoint.0}),
        ToolCall::FetchUrl(a) => json!({"url": a.url}),
        ToolCall::HttpRequest(a) => json!({"method": format!("{:?}", a.method), "url": a.url,
            "headers": a.headers.iter().map(|(k, v)| json!([k, sha(v.as_bytes())])).collect::<Vec<_>>(),
            "body_len": a.body.len(), "body_sha256": sha(&a.body), "credential": a.credential}),
        ToolCall::RunCommand(a) => {
            json!({"argv": a.argv, "cwd": path_key(&a.cwd), "timeout_secs": a.timeout_secs})
        }
    };
    v.to_string()
}

fn edit_json(e: &Edit, keyed: bool) -> Value {
    match e {
        Edit::Replace {
            old,
            new,
            replace_all,
        } if keyed => json!({"replace": {"old_sha256": sha(old.as_bytes()), "old_len": old.len(),
            "new_sha256": sha(new.as_bytes()), "new_len": new.len(), "replace_all": replace_all}}),
        Edit::Replace {
            old,
            new,
            replace_all,
        } => {
            json!({"replace": {"old_len": old.len(), "new_len": new.len(), "replace_all": replace_all}})
        }
        Edit::UnifiedDiff(d) if keyed => {
            json!({"unified_diff_sha256": sha(d.as_bytes()), "unified_diff_len": d.len()})
        }
        Edit::UnifiedDiff(d) => json!({"unified_diff_len": d.len()}),
    }
}

/// Words that mark an argument as likely to carry a secret.
const SECRETISH: &[&str] = &[
    "token",
    "secret",
    "passw",
    "apikey",
    "api_key",
    "api-key",
    "authorization",
    "bearer",
    "credential",
    "private",
];

/// An argv element, or `<redacted N chars>` if it looks like it could carry a secret: it names
/// one (`--token=...`, `PASSWORD=...`), follows a flag that does, or is a long unbroken token.
fn redact_arg(prev: Option<&str>, a: &str) -> String {
    let lower = a.to_ascii_lowercase();
    let prev_secret = prev.is_some_and(|p| {
        let p = p.to_ascii_lowercase();
        p.starts_with('-') && SECRETISH.iter().any(|w| p.contains(w))
    });
    // `Authorization: Bearer x`, `PASSWORD=x`, `--api-key=x`; a bare flag (`--token`) stays.
    let names_secret =
        SECRETISH.iter().any(|w| lower.contains(w)) && (!a.starts_with('-') || a.contains('='));
    let long_token = a.len() >= 24
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=_-".contains(&b));
    if prev_secret || names_secret || long_token || lower.starts_with("bearer ") {
        format!("<redacted {} chars>", a.chars().count())
    } else {
        a.to_string()
    }
}

/// A URL without userinfo, query and fragment (where tokens travel).
pub fn redact_url(u: &str) -> String {
    let cut = u.find(['?', '#']).unwrap_or(u.len());
    let (base, rest) = u.split_at(cut);
    let base = match (base.find("://"), base.find('@')) {
        (Some(s), Some(at)) if at > s => {
            format!("{}<redacted>@{}", &base[..s + 3], &base[at + 1..])
        }
        _ => base.to_string(),
    };
    if rest.is_empty() {
        base
    } else {
        format!("{base}?<redacted {} chars>", rest.len())
    }
}

/// The audit log's form: no file content, no secret-looking values.
pub fn redacted(call: &ToolCall) -> String {
    let v = match call {
        ToolCall::OpenSession { .. }
        | ToolCall::DescribeAgent(_)
        | ToolCall::Withdraw(_)
        | ToolCall::ListServerTools => json!({}),
        // A third-party tool's arguments may hold anything (a message, a token): the audit log
        // keeps their names and a digest, never their values.
        ToolCall::Server(c) => {
            let names: Vec<String> = c
                .arguments
                .value()
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            json!({"server": c.server.as_str(), "tool": c.tool.as_str(), "argument_names": names,
            "arguments_len": c.arguments.as_str().len(), "arguments_sha256": sha(c.arguments.as_str().as_bytes())})
        }
        ToolCall::ReadFile(a) => {
            json!({"path": path_json(&a.path), "offset": a.offset, "length": a.length})
        }
        ToolCall::ListDir(a) => {
            json!({"path": path_json(&a.path), "offset": a.offset, "limit": a.limit})
        }
        ToolCall::SearchFiles(a) => json!({"path": path_json(&a.path), "glob": a.glob}),
        ToolCall::Grep(a) => {
            json!({"path": path_json(&a.path), "regex_len": a.regex.len(), "glob": a.glob})
        }
        ToolCall::WriteFile(a) => {
            json!({"path": path_json(&a.path), "content_len": a.content.len(), "create": format!("{:?}", a.create)})
        }
        ToolCall::EditFile(a) => {
            json!({"path": path_json(&a.path), "edit": edit_json(&a.edit, false)})
        }
        ToolCall::DeletePath(a) => json!({"path": path_json(&a.path), "recursive": a.recursive}),
        ToolCall::MovePath(a) => {
            json!({"from": path_json(&a.from), "to": path_json(&a.to), "overwrite": a.overwrite})
        }
        ToolCall::UndoChange(a) => json!({"checkpoint": a.checkpoint.0}),
        ToolCall::FetchUrl(a) => json!({"url": redact_url(&a.url)}),
        ToolCall::HttpRequest(a) => {
            json!({"method": format!("{:?}", a.method), "url": redact_url(&a.url),
            "header_names": a.headers.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), "body_len": a.body.len(), "credential": a.credential})
        }
        ToolCall::RunCommand(a) => {
            let argv: Vec<String> = a
                .argv
                .iter()
                .enumerate()
                .map(|(i, x)| redact_arg(i.checked_sub(1).map(|j| a.argv[j].as_str()), x))
                .collect();
            json!({"argv": argv, "cwd": path_json(&a.cwd), "timeout_secs": a.timeout_secs})
        }
    };
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::fs::CreateMode;
    use ipc_schema::tool::{RunCommand, WriteFile};

    #[test]
    fn contents_never_reach_the_summary_and_keys_are_stable() {
        let w = ToolCall::WriteFile(WriteFile {
            path: FsPath::Absolute(b"/p/a.txt".to_vec()),
            content: b"hunter2 is my password".to_vec(),
            create: CreateMode::Either,
            create_parents: false,
        });
        let s = redacted(&w);
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("\"content_len\":22"), "{s}");
        let c = canonical(&w);
        assert!(!c.contains("hunter2"), "{c}");
        assert_eq!(c, canonical(&w.clone()));
        // Keys sorted.
        assert!(
            c.find("\"content_len\"").unwrap() < c.find("\"path\"").unwrap(),
            "{c}"
        );
    }

    #[test]
    fn paths_are_strings_when_utf8_and_hex_bytes_only_otherwise() {
        let del = |p: FsPath| {
            canonical(&ToolCall::DeletePath(ipc_schema::tool::DeletePath {
                path: p,
                recursive: false,
            }))
        };
        assert_eq!(
            del(FsPath::Absolute(b"/tmp/x".to_vec())),
            r#"{"path":{"path":"/tmp/x"},"recursive":false}"#
        );
        assert_eq!(
            del(FsPath::InGrant {
                grant: ipc_schema::fs::GrantId("g1".into()),
                path: b"src/a.rs".to_vec(),
            }),
            r#"{"path":{"grant":"g1","path":"src/a.rs"},"recursive":false}"#
        );
        assert_eq!(
            del(FsPath::Absolute(b"/tmp/\xff".to_vec())),
            r#"{"path":{"bytes":"2f746d702fff"},"recursive":false}"#
        );
        // The text `\xff` typed by an agent is another path than the byte 0xff.
        assert_ne!(
            del(FsPath::Absolute(b"/tmp/\\xff".to_vec())),
            del(FsPath::Absolute(b"/tmp/\xff".to_vec()))
        );
    }

    #[test]
    fn secret_looking_arguments_are_redacted() {
        let r = ToolCall::RunCommand(RunCommand {
            argv: [
                "curl",
                "-H",
                "Authorization: Bearer abc",
                "--token",
                "s3cr3t",
                "API_KEY=xyz",
                "ghp_0123456789abcdefghijklmnop",
                "https://x.org/a?key=1",
                "ls",
            ]
            .map(String::from)
            .to_vec(),
            cwd: FsPath::Absolute(b"/p".to_vec()),
            timeout_secs: 0,
        });
        let s = redacted(&r);
        for secret in ["s3cr3t", "xyz", "ghp_0123", "Bearer abc"] {
            assert!(!s.contains(secret), "{secret} in {s}");
        }
        assert!(s.contains("\"curl\"") && s.contains("\"ls\""), "{s}");
        assert_eq!(
            redact_url("https://u:p@x.org/a?tok=1#f"),
            "https://<redacted>@x.org/a?<redacted 8 chars>"
        );
    }
}
