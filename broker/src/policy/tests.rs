//! The policy table: rule combinations and their exact outcomes.

use super::compile::compile;
use super::doc::PolicyDoc;
use super::eval::{evaluate, PathTarget, Target};
use super::protected::Protected;
use super::*;
use ipc_schema::fs::Access;
use ipc_schema::tool::{Action, ToolName};

fn policy(root: &Path, extra: &str) -> compile::Policy {
    let text = format!(
        r#"
revision = 3
[tools]
read_file = "allow"
write_file = "ask"
delete_path = "deny"
[[grant]]
root = "{}"
capabilities = ["read", "write", "edit"]
exclude = ["secret/**", "**/*.key"]
{extra}
"#,
        root.display()
    );
    compile(
        &PolicyDoc::parse(&text).expect("parses"),
        &Protected::new(&[]),
    )
    .expect("valid")
}

fn path(root: &Path, rel: &str, access: Access) -> Target {
    Target::Paths(vec![PathTarget {
        abs: format!("{}/{rel}", root.display()).into_bytes(),
        access,
        is_dir: false,
    }])
}

#[test]
fn rule_combinations_and_their_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let rules = r#"
[[rule]]
name = "src-writes"
tools = ["write_file", "edit_file"]
paths = ["**/src/**"]
action = "allow"
[[rule]]
name = "no-lockfiles"
tools = ["write_file"]
paths = ["**/*.lock"]
action = "deny"
[[rule]]
name = "ask-generated"
tools = ["*"]
paths = ["**/src/generated/**"]
action = "ask"
"#;
    let p = policy(&root, rules);
    let prot = Protected::new(&[]);
    use Access::*;
    use ToolName::*;
    // (tool, relative path, access, expected action, expected rule text fragment)
    let table: &[(ToolName, &str, Access, Action, &str)] = &[
        (
            ReadFile,
            "a.txt",
            Read,
            Action::Allow,
            "tools.read_file default (policy revision 3)",
        ),
        (
            WriteFile,
            "a.txt",
            Write,
            Action::Ask,
            "tools.write_file default",
        ),
        (
            WriteFile,
            "src/a.rs",
            Write,
            Action::Allow,
            "rule \"src-writes\"",
        ),
        // Most restrictive wins: src-writes allows, no-lockfiles denies.
        (
            WriteFile,
            "src/Cargo.lock",
            Write,
            Action::Deny,
            "rule \"no-lockfiles\"",
        ),
        // allow (src-writes) + ask (ask-generated): ask.
        (
            WriteFile,
            "src/generated/x.rs",
            Write,
            Action::Ask,
            "rule \"ask-generated\"",
        ),
        (
            EditFile,
            "src/generated/x.rs",
            Edit,
            Action::Ask,
            "rule \"ask-generated\"",
        ),
        (
            ReadFile,
            "src/generated/x.rs",
            Read,
            Action::Ask,
            "rule \"ask-generated\"",
        ),
        // No default and no rule: ask.
        (
            ListDir,
            "src",
            Read,
            Action::Ask,
            "no rule for list_dir: ask",
        ),
        // Tool default deny.
        (DeletePath, "a.txt", Delete, Action::Deny, "grant g1"),
        // Grant exclusions and missing capabilities refuse before any rule.
        (ReadFile, "secret/x", Read, Action::Deny, "excludes"),
        (WriteFile, "src/id.key", Write, Action::Deny, "excludes"),
        (
            MovePath,
            "b.txt",
            Delete,
            Action::Deny,
            "does not give delete",
        ),
        // Protected paths, in any case, whatever the rules say.
        (
            WriteFile,
            "src/.git/hooks/pre-commit",
            Write,
            Action::Deny,
            "protected path",
        ),
        (
            ReadFile,
            ".SSH/id_rsa",
            Read,
            Action::Deny,
            "protected path",
        ),
        (
            WriteFile,
            "src/.bashrc",
            Write,
            Action::Deny,
            "protected path",
        ),
    ];
    for (tool, rel, access, action, rule) in table {
        let v = evaluate(&p, &prot, *tool, &path(&root, rel, *access));
        assert_eq!(v.action, *action, "{tool} {rel}: {v:?}");
        assert!(
            v.rule.contains(rule),
            "{tool} {rel}: rule {:?} lacks {rule:?}",
            v.rule
        );
    }
    // Outside every grant.
    let v = evaluate(
        &p,
        &prot,
        ReadFile,
        &Target::Paths(vec![PathTarget {
            abs: b"/etc/passwd".to_vec(),
            access: Read,
            is_dir: false,
        }]),
    );
    assert_eq!(v.action, Action::Deny);
    assert_eq!(v.rule, "/etc/passwd is outside every grant");
    // A move is judged on both ends: the destination is protected.
    let mv = Target::Paths(vec![
        PathTarget {
            abs: format!("{}/a", root.display()).into_bytes(),
            access: Delete,
            is_dir: false,
        },
        PathTarget {
            abs: format!("{}/.ssh/a", root.display()).into_bytes(),
            access: Write,
            is_dir: false,
        },
    ]);
    assert_eq!(evaluate(&p, &prot, MovePath, &mv).action, Action::Deny);
}

#[test]
fn host_and_program_rules() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let p = policy(
        &root,
        r#"
[[rule]]
tools = ["fetch_url"]
hosts = ["docs.rs", "*.python.org"]
action = "allow"
[[rule]]
name = "no-evil"
tools = ["fetch_url", "http_request"]
hosts = ["*.evil.example"]
action = "deny"
[[rule]]
tools = ["run_command"]
programs = ["cargo"]
action = "allow"
"#,
    );
    let prot = Protected::new(&[]);
    let url = |h: &str| Target::Url { host: h.into() };
    assert_eq!(
        evaluate(&p, &prot, ToolName::FetchUrl, &url("docs.rs")).action,
        Action::Allow
    );
    assert_eq!(
        evaluate(&p, &prot, ToolName::FetchUrl, &url("DOCS.RS.")).action,
        Action::Allow
    );
    assert_eq!(
        evaluate(&p, &prot, ToolName::FetchUrl, &url("pypi.python.org")).action,
        Action::Allow
    );
    // `*.python.org` does not cover the apex, nor a look-alike suffix.
    assert_eq!(
        evaluate(&p, &prot, ToolName::FetchUrl, &url("python.org")).action,
        Action::Ask
    );
    assert_eq!(
        evaluate(&p, &prot, ToolName::FetchUrl, &url("notpython.org")).action,
        Action::Ask
    );
    let v = evaluate(&p, &prot, ToolName::HttpRequest, &url("a.evil.example"));
    assert_eq!(
        (v.action, v.rule.as_str()),
        (Action::Deny, "rule \"no-evil\" (policy revision 3)")
    );
    let cmd = |prog: &str, cwd: &Path| Target::Command {
        program: prog.into(),
        cwd: cwd.as_os_str().as_encoded_bytes().to_vec(),
    };
    assert_eq!(
        evaluate(
            &p,
            &prot,
            ToolName::RunCommand,
            &cmd("/usr/bin/cargo", &root)
        )
        .action,
        Action::Allow
    );
    assert_eq!(
        evaluate(&p, &prot, ToolName::RunCommand, &cmd("make", &root)).action,
        Action::Ask
    );
    let v = evaluate(
        &p,
        &prot,
        ToolName::RunCommand,
        &cmd("cargo", Path::new("/tmp")),
    );
    assert_eq!(v.action, Action::Deny, "{v:?}");
    assert!(v.rule.contains("outside every grant"), "{v:?}");
}

#[test]
fn invalid_documents_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let prot = Protected::new(&[]);
    let cases: &[(&str, &str)] = &[
        ("[tools]\nread_fil = \"allow\"", "unknown tool \"read_fil\""),
        ("[tools]\nread_file = \"maybe\"", "unknown variant `maybe`"),
        ("colour = 1", "unknown field `colour`"),
        (
            "[[grant]]\nroot = \"relative\"\ncapabilities = [\"read\"]",
            "must be an absolute path",
        ),
        (
            "[[grant]]\nroot = \"/nonexistent/x\"\ncapabilities = [\"read\"]",
            "the root cannot be used",
        ),
        (
            "[[grant]]\nroot = \"/\"\ncapabilities = [\"read\"]",
            "needs confirm_broad_root = true",
        ),
        (
            &format!("[[grant]]\nroot = \"{root}\"\ncapabilities = []"),
            "no capabilities",
        ),
        (
            &format!("[[grant]]\nroot = \"{root}\"\ncapabilities = [\"read\"]\nexclude = [\"a[\"]"),
            "bad glob",
        ),
        (
            "[[rule]]\ntools = []\naction = \"deny\"",
            "`tools` is empty",
        ),
        (
            "[[rule]]\ntools = [\"write_file\"]\nhosts = [\"x.org\"]\naction = \"deny\"",
            "`hosts` apply only",
        ),
        (
            "[[rule]]\ntools = [\"fetch_url\"]\npaths = [\"/x\"]\naction = \"deny\"",
            "`paths` apply only",
        ),
        (
            "[[rule]]\ntools = [\"read_file\"]\npaths = [\"src/**\"]\naction = \"deny\"",
            "must be absolute",
        ),
        (
            "[limits]\nrequests_per_minute = 0\nconcurrent_requests = 1",
            "at least 1",
        ),
    ];
    for (text, want) in cases {
        let r = PolicyDoc::parse(text).and_then(|d| compile(&d, &prot).map(|_| ()));
        let e = r.expect_err(text);
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
    }
    // A home-directory root is accepted once confirmed.
    let ok = "[[grant]]\nroot = \"/\"\ncapabilities = [\"read\"]\nconfirm_broad_root = true";
    assert!(compile(&PolicyDoc::parse(ok).unwrap(), &prot).is_ok());
}

#[test]
fn an_invalid_file_refuses_and_apply_is_revisioned() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let file = dir.path().join("policy.toml");
    // No file: the default profile, revision 0, one grant.
    let mut st = PolicyState::load(
        file.clone(),
        Some(root.display().to_string()),
        Protected::new(&[]),
    );
    assert_eq!(st.revision, 0);
    assert_eq!(st.grants().len(), 1);
    assert!(
        st.source.contains("built-in default profile"),
        "{}",
        st.source
    );

    // A broken file: every call refused with the reason.
    std::fs::write(&file, "revision = 4\n[tools\n").unwrap();
    let st2 = PolicyState::load(file.clone(), None, Protected::new(&[]));
    let e = st2.current.as_ref().expect_err("invalid");
    assert!(e.contains("does not parse"), "{e}");
    assert_eq!(st2.revision, 0, "an unparsable file has no revision");
    std::fs::remove_file(&file).unwrap();

    let doc = format!("# mine\nrevision = 0\n[tools]\nread_file = \"deny\"\n[[grant]]\nroot = \"{}\"\ncapabilities = [\"read\"]\n", root.display());
    assert_eq!(st.apply(&doc), Ok(1));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("# mine\nrevision = 1\n"),
        "comments kept: {text}"
    );
    assert_eq!(st.revision, 1);
    // The same document again is stale now, and refused whole.
    assert_eq!(
        st.apply(&doc),
        Err(ApplyError::Stale {
            given: 0,
            current: 1
        })
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "unchanged");
    // An invalid document with the right revision is refused whole too.
    let bad = "revision = 1\n[tools]\nnope = \"allow\"\n";
    assert!(matches!(st.apply(bad), Err(ApplyError::Invalid(_))));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "unchanged");
    // A document without a revision line gets one.
    assert_eq!(st.apply("revision = 1\n"), Ok(2));
    assert_eq!(with_revision("[tools]\n", 7), "revision = 7\n[tools]\n");
}
