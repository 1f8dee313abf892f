//! A tool call's JSON arguments to its typed [`ToolCall`], refusing anything the schema does not
//! allow: unknown arguments, wrong types, numbers out of range, NUL bytes where the value becomes
//! a path, a URL, a program argument or a header, and values over the size limits. The broker
//! and the helpers check again; this layer exists so that the agent gets a precise error.

use ipc_schema::fs::{CheckpointId, CreateMode, Edit, FsPath, GrepLimits, WalkLimits, WRITE_MAX};
use ipc_schema::tool::{
    DeletePath, EditFile, FetchUrl, Grep, HttpMethod, HttpRequest, ListDir, MovePath, ReadFile,
    RunCommand, SearchFiles, ToolCall, ToolName, UndoChange, WriteFile,
};
use serde_json::{Map, Value};

/// The longest path, in bytes.
pub const MAX_PATH: usize = 4096;
/// The longest glob or regular expression.
pub const MAX_PATTERN: usize = 4096;
/// The longest checkpoint id or credential name.
pub const MAX_NAME: usize = 128;
pub const MAX_URL: usize = 8192;
/// Program arguments: how many, each (Linux's MAX_ARG_STRLEN), all together.
pub const MAX_ARGV: usize = 1024;
pub const MAX_ARG: usize = 128 * 1024;
pub const MAX_ARGV_TOTAL: usize = 256 * 1024;
pub const MAX_HEADERS: usize = 64;
pub const MAX_HEADER_NAME: usize = 256;
pub const MAX_HEADER_VALUE: usize = 8192;

/// Why a call's arguments were refused; shown to the agent as a tool error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid arguments for {tool}: {problem}")]
pub struct ArgError {
    pub tool: ToolName,
    pub problem: String,
}

/// Where relative paths start: the directory `gatehouse mcp` was started in (raw bytes), if
/// it could be read.
#[derive(Debug, Clone, Default)]
pub struct PathBase(pub Option<Vec<u8>>);

struct Args<'a> {
    tool: ToolName,
    map: &'a Map<String, Value>,
    base: &'a PathBase,
}

/// What a string argument may contain.
#[derive(Clone, Copy, PartialEq)]
enum Nul {
    /// File content and bodies are data: any character.
    Allowed,
    /// Becomes a path, URL, argument, header or name: no NUL.
    Refused,
}

impl<'a> Args<'a> {
    fn err(&self, problem: impl Into<String>) -> ArgError {
        ArgError {
            tool: self.tool,
            problem: problem.into(),
        }
    }

    fn opt_str(&self, key: &str, max: usize, nul: Nul) -> Result<Option<&'a str>, ArgError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => {
                if nul == Nul::Refused && s.contains('\0') {
                    return Err(self.err(format!("`{key}` contains a NUL byte")));
                }
                if s.len() > max {
                    return Err(self.err(format!(
                        "`{key}` is {} bytes long; the limit is {max}",
                        s.len()
                    )));
                }
                Ok(Some(s))
            }
            Some(other) => Err(self.err(format!("`{key}` must be a string, not {}", kind(other)))),
        }
    }

    fn str(&self, key: &str, max: usize, nul: Nul) -> Result<&'a str, ArgError> {
        self.opt_str(key, max, nul)?
            .ok_or_else(|| self.err(format!("`{key}` is required")))
    }

    fn nonempty(&self, key: &str, max: usize) -> Result<&'a str, ArgError> {
        let s = self.str(key, max, Nul::Refused)?;
        if s.is_empty() {
            return Err(self.err(format!("`{key}` must not be empty")));
        }
        Ok(s)
    }

    fn path_from(&self, key: &str, s: &str) -> Result<FsPath, ArgError> {
        if s.is_empty() {
            return Err(self.err(format!("`{key}` must not be empty")));
        }
        // Absolute: rooted (`/...`), or on Windows with a drive (`C:\...`, `\\?\C:\...`); a
        // rooted Windows path without a drive goes on as written, and the fs-helper refuses it.
        let absolute = s.starts_with('/')
            || (cfg!(windows) && (s.starts_with('\\') || std::path::Path::new(s).is_absolute()));
        if absolute {
            return Ok(FsPath::Absolute(s.as_bytes().to_vec()));
        }
        let Some(base) = &self.base.0 else {
            return Err(self.err(format!(
                "`{key}` is relative, and the directory gatehouse mcp was started in is unknown: give an absolute path"
            )));
        };
        let mut p = base.clone();
        if !p
            .last()
            .is_some_and(|&b| ipc_schema::os_path::is_separator(b))
        {
            // The separator the base already uses (`\` in a Windows directory, else `/`).
            p.push(match cfg!(windows) && p.contains(&b'\\') {
                true => b'\\',
                false => b'/',
            });
        }
        p.extend_from_slice(s.as_bytes());
        if p.len() > MAX_PATH {
            return Err(self.err(format!(
                "`{key}` is {} bytes long once made absolute; the limit is {MAX_PATH}",
                p.len()
            )));
        }
        Ok(FsPath::Absolute(p))
    }

    fn path(&self, key: &str) -> Result<FsPath, ArgError> {
        let s = self.str(key, MAX_PATH, Nul::Refused)?;
        self.path_from(key, s)
    }

    fn opt_u64(&self, key: &str, max: u64) -> Result<u64, ArgError> {
        match self.map.get(key) {
            None => Ok(0),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if v <= max => Ok(v),
                _ => Err(self.err(format!(
                    "`{key}` must be a whole number from 0 to {max}, not {n}"
                ))),
            },
            Some(other) => Err(self.err(format!(
                "`{key}` must be a whole number from 0 to {max}, not {}",
                kind(other)
            ))),
        }
    }

    fn opt_u32(&self, key: &str, max: u32) -> Result<u32, ArgError> {
        // The value is at most `max`, so it fits.
        self.opt_u64(key, max as u64).map(|v| v as u32)
    }

    fn opt_bool(&self, key: &str) -> Result<bool, ArgError> {
        match self.map.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.err(format!(
                "`{key}` must be true or false, not {}",
                kind(other)
            ))),
        }
    }

    fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The argument names `tool` takes (its schema's properties; a test keeps the two equal).
fn known_keys(tool: ToolName) -> &'static [&'static str] {
    match tool {
        ToolName::ReadFile => &["length", "offset", "path"],
        ToolName::ListDir => &["limit", "offset", "path"],
        ToolName::SearchFiles => &[
            "glob",
            "include_skipped_dirs",
            "max_depth",
            "max_entries",
            "path",
        ],
        ToolName::Grep => &[
            "case_insensitive",
            "glob",
            "include_skipped_dirs",
            "max_matches",
            "path",
            "regex",
        ],
        ToolName::WriteFile => &["content", "create", "create_parents", "path"],
        ToolName::EditFile => &[
            "new_text",
            "old_text",
            "path",
            "replace_all",
            "unified_diff",
        ],
        ToolName::DeletePath => &["path", "recursive"],
        ToolName::MovePath => &["from", "overwrite", "to"],
        ToolName::UndoChange => &["checkpoint"],
        ToolName::FetchUrl => &["url"],
        ToolName::HttpRequest => &["body", "credential", "headers", "method", "url"],
        ToolName::RunCommand => &["argv", "cwd", "timeout_secs"],
    }
}

/// Turns `tool`'s JSON arguments into its typed call.
pub fn parse(
    tool: ToolName,
    args: &Map<String, Value>,
    base: &PathBase,
) -> Result<ToolCall, ArgError> {
    let a = Args {
        tool,
        map: args,
        base,
    };
    let known = known_keys(tool);
    if let Some(k) = args.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(a.err(format!(
            "unknown argument `{k}` ({tool} takes: {})",
            known.join(", ")
        )));
    }
    Ok(match tool {
        ToolName::ReadFile => ToolCall::ReadFile(ReadFile {
            path: a.path("path")?,
            offset: a.opt_u64("offset", u64::MAX)?,
            length: a.opt_u32("length", ipc_schema::fs::READ_CHUNK_MAX)?,
        }),
        ToolName::ListDir => ToolCall::ListDir(ListDir {
            path: a.path("path")?,
            offset: a.opt_u32("offset", u32::MAX)?,
            limit: a.opt_u32("limit", u32::MAX)?,
        }),
        ToolName::SearchFiles => ToolCall::SearchFiles(SearchFiles {
            path: a.path("path")?,
            glob: a.nonempty("glob", MAX_PATTERN)?.to_string(),
            limits: walk_limits(&a)?,
        }),
        ToolName::Grep => ToolCall::Grep(Grep {
            path: a.path("path")?,
            regex: a.nonempty("regex", MAX_PATTERN)?.to_string(),
            glob: match a.opt_str("glob", MAX_PATTERN, Nul::Refused)? {
                Some("") => return Err(a.err("`glob` must not be empty")),
                g => g.map(str::to_string),
            },
            case_insensitive: a.opt_bool("case_insensitive")?,
            limits: walk_limits(&a)?,
            grep: GrepLimits {
                max_matches: a.opt_u32("max_matches", u32::MAX)?,
                ..GrepLimits::default()
            },
        }),
        ToolName::WriteFile => ToolCall::WriteFile(WriteFile {
            path: a.path("path")?,
            content: a.str("content", WRITE_MAX as usize, Nul::Allowed)?.as_bytes().to_vec(),
            create: match a.opt_str("create", 32, Nul::Refused)? {
                None | Some("either") => CreateMode::Either,
                Some("must_not_exist") => CreateMode::MustNotExist,
                Some("must_exist") => CreateMode::MustExist,
                Some(other) => {
                    return Err(a.err(format!(
                        "`create` must be \"either\", \"must_not_exist\" or \"must_exist\", not {other:?}"
                    )))
                }
            },
            create_parents: a.opt_bool("create_parents")?,
        }),
        ToolName::EditFile => ToolCall::EditFile(EditFile {
            path: a.path("path")?,
            edit: edit(&a)?,
        }),
        ToolName::DeletePath => ToolCall::DeletePath(DeletePath {
            path: a.path("path")?,
            recursive: a.opt_bool("recursive")?,
        }),
        ToolName::MovePath => ToolCall::MovePath(MovePath {
            from: a.path("from")?,
            to: a.path("to")?,
            overwrite: a.opt_bool("overwrite")?,
        }),
        ToolName::UndoChange => {
            let id = a.nonempty("checkpoint", MAX_NAME)?;
            if !id.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(a.err("`checkpoint` must be printable ASCII without spaces"));
            }
            ToolCall::UndoChange(UndoChange {
                checkpoint: CheckpointId(id.to_string()),
            })
        }
        ToolName::FetchUrl => ToolCall::FetchUrl(FetchUrl {
            url: a.nonempty("url", MAX_URL)?.to_string(),
        }),
        ToolName::HttpRequest => ToolCall::HttpRequest(http_request(&a)?),
        ToolName::RunCommand => ToolCall::RunCommand(run_command(&a)?),
    })
}

fn walk_limits(a: &Args) -> Result<WalkLimits, ArgError> {
    Ok(WalkLimits {
        max_depth: if a.has("max_depth") {
            a.opt_u32("max_depth", u32::MAX)?
        } else {
            0
        },
        max_entries: if a.has("max_entries") {
            a.opt_u32("max_entries", u32::MAX)?
        } else {
            0
        },
        max_millis: 0,
        include_skipped_dirs: a.opt_bool("include_skipped_dirs")?,
    })
}

fn edit(a: &Args) -> Result<Edit, ArgError> {
    let max = WRITE_MAX as usize;
    let old = a.opt_str("old_text", max, Nul::Allowed)?;
    let new = a.opt_str("new_text", max, Nul::Allowed)?;
    let diff = a.opt_str("unified_diff", max, Nul::Allowed)?;
    match (old, new, diff) {
        (Some(old), Some(new), None) => {
            if old.is_empty() {
                return Err(a.err("`old_text` must not be empty"));
            }
            Ok(Edit::Replace {
                old: old.to_string(),
                new: new.to_string(),
                replace_all: a.opt_bool("replace_all")?,
            })
        }
        (None, None, Some(d)) if !a.has("replace_all") => {
            if d.is_empty() {
                return Err(a.err("`unified_diff` must not be empty"));
            }
            Ok(Edit::UnifiedDiff(d.to_string()))
        }
        _ => Err(a.err(
            "give either `old_text` and `new_text` (and optionally `replace_all`), or `unified_diff` alone",
        )),
    }
}

fn http_request(a: &Args) -> Result<HttpRequest, ArgError> {
    let method = match a.str("method", 16, Nul::Refused)? {
        "GET" => HttpMethod::Get,
        "HEAD" => HttpMethod::Head,
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "PATCH" => HttpMethod::Patch,
        "DELETE" => HttpMethod::Delete,
        other => {
            return Err(a.err(format!(
                "`method` must be one of GET, HEAD, POST, PUT, PATCH, DELETE, not {other:?}"
            )))
        }
    };
    let mut headers = Vec::new();
    match a.map.get("headers") {
        None => {}
        Some(Value::Object(h)) => {
            if h.len() > MAX_HEADERS {
                return Err(a.err(format!("{} headers; the limit is {MAX_HEADERS}", h.len())));
            }
            for (name, value) in h {
                let Value::String(value) = value else {
                    return Err(a.err(format!(
                        "header `{name}` must be a string, not {}",
                        kind(value)
                    )));
                };
                let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
                if name.is_empty() || name.len() > MAX_HEADER_NAME || !name.bytes().all(token) {
                    return Err(a.err(format!("{name:?} is not a valid header name")));
                }
                if value.len() > MAX_HEADER_VALUE
                    || value.bytes().any(|c| c == 0 || c == b'\r' || c == b'\n')
                {
                    return Err(a.err(format!(
                        "header `{name}`: values may not contain NUL, CR or LF, and are at most {MAX_HEADER_VALUE} bytes"
                    )));
                }
                headers.push((name.clone(), value.clone()));
            }
        }
        Some(other) => {
            return Err(a.err(format!("`headers` must be an object, not {}", kind(other))))
        }
    }
    Ok(HttpRequest {
        method,
        url: a.nonempty("url", MAX_URL)?.to_string(),
        headers,
        body: a
            .opt_str("body", WRITE_MAX as usize, Nul::Allowed)?
            .unwrap_or("")
            .as_bytes()
            .to_vec(),
        credential: match a.opt_str("credential", MAX_NAME, Nul::Refused)? {
            Some("") => return Err(a.err("`credential` must not be empty")),
            Some(c) => Some(
                ipc_schema::secrets::CredentialName::parse(c)
                    .map_err(|e| a.err(format!("`credential`: {e}")))?,
            ),
            None => None,
        },
    })
}

fn run_command(a: &Args) -> Result<RunCommand, ArgError> {
    let Some(items) = a.map.get("argv") else {
        return Err(a.err("`argv` is required"));
    };
    let Value::Array(items) = items else {
        return Err(a.err(format!(
            "`argv` must be an array of strings, not {}",
            kind(items)
        )));
    };
    if items.is_empty() || items.len() > MAX_ARGV {
        return Err(a.err(format!(
            "`argv` must have 1 to {MAX_ARGV} elements, not {}",
            items.len()
        )));
    }
    let mut argv = Vec::with_capacity(items.len());
    let mut total = 0;
    for (i, item) in items.iter().enumerate() {
        let Value::String(s) = item else {
            return Err(a.err(format!("`argv[{i}]` must be a string, not {}", kind(item))));
        };
        if s.contains('\0') {
            return Err(a.err(format!("`argv[{i}]` contains a NUL byte")));
        }
        if s.len() > MAX_ARG {
            return Err(a.err(format!(
                "`argv[{i}]` is {} bytes long; the limit is {MAX_ARG}",
                s.len()
            )));
        }
        total += s.len();
        argv.push(s.clone());
    }
    if argv[0].is_empty() {
        return Err(a.err("`argv[0]` (the program) must not be empty"));
    }
    if total > MAX_ARGV_TOTAL {
        return Err(a.err(format!(
            "`argv` is {total} bytes in all; the limit is {MAX_ARGV_TOTAL}"
        )));
    }
    let cwd = match a.opt_str("cwd", MAX_PATH, Nul::Refused)? {
        Some(c) => a.path_from("cwd", c)?,
        None => match &a.base.0 {
            Some(b) => FsPath::Absolute(b.clone()),
            None => {
                return Err(a.err(
                    "`cwd` is required: the directory gatehouse mcp was started in is unknown",
                ))
            }
        },
    };
    Ok(RunCommand {
        argv,
        cwd,
        timeout_secs: a.opt_u32("timeout_secs", 600)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> PathBase {
        PathBase(Some(b"/work/p".to_vec()))
    }

    fn call(tool: ToolName, v: Value) -> Result<ToolCall, ArgError> {
        parse(tool, v.as_object().unwrap(), &base())
    }

    fn problem(tool: ToolName, v: Value) -> String {
        let e = call(tool, v).unwrap_err();
        assert_eq!(e.tool, tool);
        e.to_string()
    }

    /// On Windows a drive path, verbatim or not, is absolute, and a relative one is joined
    /// with `\` (before, `C:\...` was joined to the base like a relative path).
    #[cfg(windows)]
    #[test]
    fn windows_paths_are_absolute_by_their_drive() {
        let base = PathBase(Some(br"C:\work\p".to_vec()));
        let read = |p: &str| {
            parse(
                ToolName::ReadFile,
                json!({"path": p}).as_object().unwrap(),
                &base,
            )
        };
        for abs in [r"C:\x\a.rs", r"\\?\C:\x\a.rs", "D:/x/a.rs"] {
            match read(abs).unwrap() {
                ToolCall::ReadFile(r) => {
                    assert_eq!(r.path, FsPath::Absolute(abs.as_bytes().to_vec()))
                }
                other => panic!("{other:?}"),
            }
        }
        match read(r"src\a.rs").unwrap() {
            ToolCall::ReadFile(r) => {
                assert_eq!(r.path, FsPath::Absolute(br"C:\work\p\src\a.rs".to_vec()))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn well_formed_arguments_become_typed_calls() {
        assert_eq!(
            call(
                ToolName::ReadFile,
                json!({"path": "src/a.rs", "offset": 10})
            )
            .unwrap(),
            ToolCall::ReadFile(ReadFile {
                path: FsPath::Absolute(b"/work/p/src/a.rs".to_vec()),
                offset: 10,
                length: 0
            })
        );
        assert_eq!(
            call(
                ToolName::EditFile,
                json!({"path": "/x", "old_text": "a", "new_text": ""})
            )
            .unwrap(),
            ToolCall::EditFile(EditFile {
                path: FsPath::Absolute(b"/x".to_vec()),
                edit: Edit::Replace {
                    old: "a".into(),
                    new: "".into(),
                    replace_all: false
                }
            })
        );
        match call(ToolName::RunCommand, json!({"argv": ["ls", "-l"]})).unwrap() {
            ToolCall::RunCommand(r) => {
                assert_eq!(r.cwd, FsPath::Absolute(b"/work/p".to_vec()));
                assert_eq!(r.argv, ["ls", "-l"]);
            }
            other => panic!("{other:?}"),
        }
        match call(ToolName::HttpRequest, json!({"method": "POST", "url": "https://a.example/", "headers": {"X-A": "1"}, "body": "b"})).unwrap() {
            ToolCall::HttpRequest(h) => {
                assert_eq!(h.headers, [("X-A".to_string(), "1".to_string())]);
                assert_eq!(h.body, b"b");
            }
            other => panic!("{other:?}"),
        }
        // File content is data: a NUL byte is allowed there.
        assert!(call(
            ToolName::WriteFile,
            json!({"path": "/x", "content": "a\u{0}b"})
        )
        .is_ok());
    }

    #[test]
    fn nul_bytes_wrong_types_and_unknown_arguments_are_refused_with_a_clear_error() {
        for (tool, args, expect) in [
            (
                ToolName::ReadFile,
                json!({"path": "/etc/x\u{0}.txt"}),
                "`path` contains a NUL byte",
            ),
            (
                ToolName::ReadFile,
                json!({"path": 5}),
                "`path` must be a string, not a number",
            ),
            (ToolName::ReadFile, json!({}), "`path` is required"),
            (
                ToolName::ReadFile,
                json!({"path": "/a", "offset": -1}),
                "`offset` must be a whole number",
            ),
            (
                ToolName::ReadFile,
                json!({"path": "/a", "offset": 1.5}),
                "`offset` must be a whole number",
            ),
            (
                ToolName::ReadFile,
                json!({"path": "/a", "length": 600000}),
                "from 0 to 524288",
            ),
            (
                ToolName::ReadFile,
                json!({"path": "/a", "mode": "x"}),
                "unknown argument `mode`",
            ),
            (
                ToolName::ReadFile,
                json!({"path": ""}),
                "`path` must not be empty",
            ),
            (
                ToolName::WriteFile,
                json!({"path": "/a", "content": ["x"]}),
                "`content` must be a string, not an array",
            ),
            (
                ToolName::WriteFile,
                json!({"path": "/a", "content": "x", "create": "maybe"}),
                "`create` must be",
            ),
            (
                ToolName::DeletePath,
                json!({"path": "/a", "recursive": "yes"}),
                "`recursive` must be true or false, not a string",
            ),
            (
                ToolName::EditFile,
                json!({"path": "/a", "old_text": "x"}),
                "give either",
            ),
            (
                ToolName::EditFile,
                json!({"path": "/a", "old_text": "x", "new_text": "y", "unified_diff": "d"}),
                "give either",
            ),
            (
                ToolName::RunCommand,
                json!({"argv": []}),
                "1 to 1024 elements",
            ),
            (
                ToolName::RunCommand,
                json!({"argv": ["ls", 3]}),
                "`argv[1]` must be a string",
            ),
            (
                ToolName::RunCommand,
                json!({"argv": ["ls\u{0}"]}),
                "`argv[0]` contains a NUL byte",
            ),
            (
                ToolName::RunCommand,
                json!({"argv": ["ls"], "timeout_secs": 601}),
                "from 0 to 600",
            ),
            (
                ToolName::HttpRequest,
                json!({"method": "get", "url": "https://a/"}),
                "`method` must be one of",
            ),
            (
                ToolName::HttpRequest,
                json!({"method": "GET", "url": "https://a/", "headers": {"X": "a\r\nB: c"}}),
                "may not contain NUL, CR or LF",
            ),
            (
                ToolName::HttpRequest,
                json!({"method": "GET", "url": "https://a/", "headers": {"X Y": "a"}}),
                "not a valid header name",
            ),
            (
                ToolName::FetchUrl,
                json!({"url": "https://a/\u{0}"}),
                "`url` contains a NUL byte",
            ),
            (
                ToolName::UndoChange,
                json!({"checkpoint": "a b"}),
                "printable ASCII",
            ),
        ] {
            let p = problem(tool, args.clone());
            assert!(p.contains(expect), "{tool} {args}: {p}");
            assert!(
                p.starts_with(&format!("invalid arguments for {tool}: ")),
                "{p}"
            );
        }
    }

    #[test]
    fn the_known_arguments_are_exactly_the_schema_properties() {
        for tool in ToolName::ALL {
            let schema = crate::catalog::schema(tool);
            let props: Vec<&str> = schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(known_keys(tool), props.as_slice(), "{tool}");
        }
    }

    #[test]
    fn huge_strings_are_refused_before_they_are_copied() {
        let p = problem(
            ToolName::ReadFile,
            json!({"path": format!("/{}", "a".repeat(MAX_PATH))}),
        );
        assert!(
            p.contains("`path` is 4097 bytes long; the limit is 4096"),
            "{p}"
        );
        let p = problem(
            ToolName::WriteFile,
            json!({"path": "/a", "content": "x".repeat(WRITE_MAX as usize + 1)}),
        );
        assert!(p.contains(&format!("the limit is {WRITE_MAX}")), "{p}");
        let p = problem(
            ToolName::ReadFile,
            json!({"path": "a".repeat(MAX_PATH - 2)}),
        );
        assert!(p.contains("once made absolute"), "{p}");
        let e = parse(
            ToolName::ReadFile,
            json!({"path": "rel"}).as_object().unwrap(),
            &PathBase(None),
        )
        .unwrap_err();
        assert!(e.problem.contains("give an absolute path"), "{e}");
    }
}
