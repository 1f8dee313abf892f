//! The policy table: rule combinations and their exact outcomes.

use super::compile::compile;
use super::doc::PolicyDoc;
use super::eval::standing;
use super::eval::{evaluate, PathTarget, Target};
use super::protected::Protected;
use super::*;
use ipc_schema::fs::Access;
use ipc_schema::tool::{Action, ProfileName, ToolName};

/// A filesystem root of this OS, as a TOML literal string.
const FS_ROOT: &str = if cfg!(windows) { r"'C:\'" } else { "'/'" };

/// `rel` ('/'-separated) beneath `root`, as the bytes of a path of this OS: joined component by
/// component, since in a Windows verbatim path (`\\?\C:\...`, what canonicalize gives) a `/`
/// is part of a name.
fn under(root: &std::path::Path, rel: &str) -> Vec<u8> {
    rel.split('/')
        .fold(root.to_path_buf(), |p, c| p.join(c))
        .into_os_string()
        .into_encoded_bytes()
}
fn policy(root: &Path, extra: &str) -> compile::Policy {
    let text = format!(
        r#"
revision = 3
[tools]
read_file = "allow"
write_file = "ask"
delete_path = "deny"
[[grant]]
root = '{}'
capabilities = ["read", "write", "edit"]
exclude = ["secret/**", "**/*.key"]
{extra}
"#,
        root.display()
    );
    let all = compile(
        &PolicyDoc::parse(&text).expect("parses"),
        &Protected::new(&[]),
    )
    .expect("valid");
    all.default_profile().as_ref().clone()
}

fn path(root: &Path, rel: &str, access: Access) -> Target {
    Target::Paths(vec![PathTarget {
        abs: under(root, rel),
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
    assert_eq!(
        v.rule,
        "/etc/passwd is outside the grants of profile default"
    );
    // A move is judged on both ends: the destination is protected.
    let mv = Target::Paths(vec![
        PathTarget {
            abs: under(&root, "a"),
            access: Delete,
            is_dir: false,
        },
        PathTarget {
            abs: under(&root, ".ssh/a"),
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
    let url = |h: &str| Target::Url {
        host: ipc_schema::host::Host::parse(h).unwrap(),
    };
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
    assert!(
        v.rule.contains("outside the grants of profile default"),
        "{v:?}"
    );
}

#[test]
fn invalid_documents_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let missing = dir.path().join("nonexistent").display().to_string();
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
            &format!("[[grant]]\nroot = '{missing}'\ncapabilities = [\"read\"]"),
            "the root cannot be used",
        ),
        (
            &format!("[[grant]]\nroot = {FS_ROOT}\ncapabilities = [\"read\"]"),
            "needs confirm_broad_root = true",
        ),
        (
            &format!("[[grant]]\nroot = '{root}'\ncapabilities = []"),
            "no capabilities",
        ),
        (
            &format!("[[grant]]\nroot = '{root}'\ncapabilities = [\"read\"]\nexclude = [\"a[\"]"),
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
    let ok = format!(
        "[[grant]]\nroot = {FS_ROOT}\ncapabilities = [\"read\"]\nconfirm_broad_root = true"
    );
    assert!(compile(&PolicyDoc::parse(&ok).unwrap(), &prot).is_ok());
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
    assert_eq!(st.fs_grants().len(), 1);
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

    let doc = format!("# mine\nrevision = 0\n[tools]\nread_file = \"deny\"\n[[grant]]\nroot = '{}'\ncapabilities = [\"read\"]\n", root.display());
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

/// Two directories and a document with a default profile and two named ones.
fn two_profiles() -> (tempfile::TempDir, PathBuf, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (a, b) = (base.join("alpha"), base.join("beta"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let text = format!(
        r#"
revision = 5
[tools]
read_file = "allow"
[[grant]]
root = '{a}'
capabilities = ["read"]

[profile.research]
network = ["docs.rs", "*.crates.io"]
[profile.research.tools]
read_file = "allow"
write_file = "deny"
fetch_url = "ask"
[profile.research.limits]
requests_per_minute = 5
concurrent_requests = 2
[[profile.research.grant]]
root = '{b}'
capabilities = ["read"]

[profile.build-2]
[[profile.build-2.grant]]
root = '{a}'
capabilities = ["read", "write"]
exclude = ["target/**"]
"#,
        a = a.display(),
        b = b.display()
    );
    (dir, a, b, text)
}

fn read_of(p: &Path) -> Target {
    Target::Paths(vec![PathTarget {
        abs: p.join("x.txt").into_os_string().into_encoded_bytes(),
        access: Access::Read,
        is_dir: false,
    }])
}

#[test]
fn each_profile_is_judged_by_its_own_grants_tools_limits_and_network() {
    let (_d, a, b, text) = two_profiles();
    let all = compile(&PolicyDoc::parse(&text).unwrap(), &Protected::new(&[])).unwrap();
    let prot = Protected::new(&[]);
    let name = |n: &str| ProfileName::parse(n).unwrap();
    assert_eq!(all.names(), "default, build-2, research");
    let def = all.get(&name("default")).unwrap();
    let research = all.get(&name("research")).unwrap();
    let build = all.get(&name("build-2")).unwrap();

    // Positive controls: each reads its own grant.
    assert_eq!(
        evaluate(def, &prot, ToolName::ReadFile, &read_of(&a)).action,
        Action::Allow
    );
    assert_eq!(
        evaluate(research, &prot, ToolName::ReadFile, &read_of(&b)).action,
        Action::Allow
    );
    // And nothing of another profile's.
    let v = evaluate(def, &prot, ToolName::ReadFile, &read_of(&b));
    assert_eq!(v.action, Action::Deny);
    assert_eq!(
        v.rule,
        format!(
            "{} is outside the grants of profile default",
            b.join("x.txt").display()
        )
    );
    let v = evaluate(research, &prot, ToolName::ReadFile, &read_of(&a));
    assert_eq!(
        (v.action, v.rule),
        (
            Action::Deny,
            format!(
                "{} is outside the grants of profile research",
                a.join("x.txt").display()
            )
        )
    );
    // Grant ids are unique across profiles.
    assert_eq!(def.grants[0].id.0, "g1");
    assert_eq!(research.grants[0].id.0, "research.g1");
    assert_eq!(build.grants[0].id.0, "build-2.g1");
    // Nothing is inherited from the top level: build-2 names no tools, so read_file asks.
    assert_eq!(
        evaluate(build, &prot, ToolName::ReadFile, &read_of(&a)).action,
        Action::Ask
    );
    // Limits and tool standing per profile.
    assert_eq!(
        (research.requests_per_minute, research.concurrent_requests),
        (5, 2)
    );
    assert_eq!(
        (def.requests_per_minute, def.concurrent_requests),
        (600, 16)
    );
    assert_eq!(standing(research, ToolName::WriteFile).action, Action::Deny);
    assert_eq!(standing(def, ToolName::WriteFile).action, Action::Ask);

    // The network allowlist refuses an off-list host whatever the rules say, naming the
    // profile; an on-list host goes on to the tool's default.
    let url = |h: &str| Target::Url {
        host: ipc_schema::host::Host::parse(h).unwrap(),
    };
    let v = evaluate(research, &prot, ToolName::FetchUrl, &url("example.org"));
    assert_eq!(
        (v.action, v.rule.as_str()),
        (
            Action::Deny,
            "example.org is not in the network allowlist of profile research (policy revision 5)"
        )
    );
    for on in ["docs.rs", "DOCS.RS.", "static.crates.io"] {
        let v = evaluate(research, &prot, ToolName::FetchUrl, &url(on));
        assert_eq!(v.action, Action::Ask, "{on}: {v:?}");
    }
    // `*.crates.io` is not the apex, nor a look-alike.
    for off in ["crates.io", "evilcrates.io", "docs.rs.evil.example"] {
        let v = evaluate(research, &prot, ToolName::HttpRequest, &url(off));
        assert_eq!(v.action, Action::Deny, "{off}: {v:?}");
    }
    // No list: no such restriction.
    assert_eq!(
        evaluate(def, &prot, ToolName::FetchUrl, &url("example.org")).action,
        Action::Ask
    );
    // Before resolution, on the URL as the net-helper will parse it; and where redirects went.
    assert_eq!(
        eval::url_off_network(research, "https://Docs.RS./crate"),
        None
    );
    assert!(eval::url_off_network(research, "https://a.example/").is_some());
    assert_eq!(eval::url_off_network(def, "https://a.example/"), None);
    assert_eq!(eval::url_off_network(research, "not a url"), None);
    assert_eq!(
        eval::hops_off_network(
            research,
            ["https://docs.rs/a", "https://static.crates.io/b"]
        ),
        None
    );
    let why = eval::hops_off_network(research, ["https://docs.rs/a", "https://evil.example/"])
        .expect("refused");
    assert!(
        why.contains("evil.example is not in the network allowlist of profile research"),
        "{why}"
    );
}

#[test]
fn the_fs_helper_gets_the_union_of_every_profiles_grants_merged_per_root() {
    let (_d, a, b, text) = two_profiles();
    let all = compile(&PolicyDoc::parse(&text).unwrap(), &Protected::new(&[])).unwrap();
    let u = all.fs_grants();
    assert_eq!(u.len(), 2, "{u:?}");
    // alpha: default (read) and build-2 (read, write, exclude target/**): one grant.
    assert_eq!(u[0].id.0, "g1");
    assert_eq!(u[0].root, a);
    assert!(u[0].caps.read && u[0].caps.write && !u[0].caps.edit && !u[0].caps.delete);
    assert!(
        u[0].exclude.is_empty(),
        "an exclude stays only if every grant of the root has it"
    );
    assert_eq!(u[1].id.0, "research.g1");
    assert_eq!(u[1].root, b);
    // Without named profiles, the fs-helper's grants are the default profile's, unchanged.
    let one = compile(
        &PolicyDoc::parse(&format!(
            "[[grant]]\nroot = '{}'\ncapabilities = [\"read\"]\nexclude = [\"s/**\"]\ninclude = [\"**/*.rs\"]\n",
            a.display()
        ))
        .unwrap(),
        &Protected::new(&[]),
    )
    .unwrap()
    .fs_grants();
    assert_eq!(one.len(), 1);
    assert_eq!(
        (one[0].include.clone(), one[0].exclude.clone()),
        (vec!["**/*.rs".to_string()], vec!["s/**".to_string()])
    );
}

#[test]
fn profile_names_and_contents_are_validated_naming_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let prot = Protected::new(&[]);
    let cases: &[(String, &str)] = &[
        (
            "[profile.Big]\n".into(),
            "[profile.Big]: profile name \"Big\" may hold only a-z, 0-9, _ and -",
        ),
        (
            "[profile.\"a.b\"]\n".into(),
            "may hold only a-z, 0-9, _ and -",
        ),
        ("[profile.\"\"]\n".into(), "must be 1 to 32 characters long"),
        (
            format!("[profile.{}]\n", "x".repeat(33)),
            "must be 1 to 32 characters long",
        ),
        (
            "[profile.-x]\n".into(),
            "must start with a letter or a digit",
        ),
        (
            "[profile.default]\n".into(),
            "is the name of the document's top level",
        ),
        (
            "[profile.a]\nrevision = 2\n".into(),
            "unknown field `revision`",
        ),
        ("[profile.a.profile.b]\n".into(), "unknown field `profile`"),
        (
            "[profile.a]\n[profile.a.tools]\nread_fil = \"allow\"\n".into(),
            "[profile.a] [tools]: unknown tool \"read_fil\"",
        ),
        (
            "[[profile.ok.grant]]\nroot = \"relative\"\ncapabilities = [\"read\"]\n".into(),
            "[profile.ok] grant 1 (relative): the root must be an absolute path",
        ),
        (
            "[profile.n]\nnetwork = [\"https://docs.rs\"]\n".into(),
            "[profile.n] network: bad host \"https://docs.rs\"",
        ),
        (
            "[profile.l.limits]\nrequests_per_minute = 0\nconcurrent_requests = 1\n".into(),
            "[profile.l] [limits]",
        ),
        (
            format!("[[profile.c.grant]]\nroot = '{root}'\ncapabilities = []\n"),
            "[profile.c] grant 1",
        ),
        ("network = [\"*.\"]\n".into(), "network: bad host \"*.\""),
    ];
    for (text, want) in cases {
        let r = PolicyDoc::parse(text).and_then(|d| compile(&d, &prot).map(|_| ()));
        let e = r.expect_err(text);
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
    }
    // Names at the edges that are fine; an empty network list reaches no host at all.
    let ok = format!(
        "[profile.{}]\n[profile.a_1-b]\nnetwork = []\n",
        "z".repeat(32)
    );
    let all = compile(&PolicyDoc::parse(&ok).unwrap(), &prot).expect("valid");
    let p = all.get(&ProfileName::parse("a_1-b").unwrap()).unwrap();
    assert_eq!(
        evaluate(
            p,
            &prot,
            ToolName::FetchUrl,
            &Target::Url {
                host: ipc_schema::host::Host::parse("docs.rs").unwrap()
            }
        )
        .action,
        Action::Deny
    );
}

#[test]
fn a_multi_profile_document_round_trips_and_applies_or_is_refused_whole() {
    let (dir, _a, _b, text) = two_profiles();
    let doc = PolicyDoc::parse(&text).unwrap();
    assert_eq!(
        PolicyDoc::parse(&doc.to_toml()).unwrap(),
        doc,
        "to_toml round-trips"
    );
    let research = doc.profile("research").unwrap();
    assert_eq!(
        research.network,
        Some(vec!["docs.rs".to_string(), "*.crates.io".to_string()])
    );
    assert_eq!(doc.profile("default").unwrap(), doc.default_profile());
    assert!(doc.profile("nope").is_none());

    let file = dir.path().join("policy.toml");
    let mut st = PolicyState::load(file.clone(), None, Protected::new(&[]));
    let text0 = text.replace("revision = 5", "revision = 0");
    assert_eq!(st.apply(&text0), Ok(1));
    let stored = std::fs::read_to_string(&file).unwrap();
    let name = |n: &str| ProfileName::parse(n).unwrap();
    assert!(st.profile(&name("research")).is_ok());
    let e = st.profile(&name("nope")).unwrap_err();
    assert!(
        e.starts_with("there is no profile nope in the policy (revision 1; its profiles: default, build-2, research)"),
        "{e}"
    );
    // Stale: refused whole, the file untouched.
    assert_eq!(
        st.apply(&text0),
        Err(ApplyError::Stale {
            given: 0,
            current: 1
        })
    );
    // One bad profile refuses the whole document, the others with it.
    let bad = text.replace("revision = 5", "revision = 1").replace(
        "[profile.build-2]\n",
        "[profile.build-2]\nnetwork = [\"bad host\"]\n",
    );
    let e = st.apply(&bad).unwrap_err();
    assert!(
        e.to_string()
            .contains("[profile.build-2] network: bad host"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), stored, "unchanged");
    assert_eq!(st.revision, 1);
    assert!(
        st.profile(&name("build-2")).is_ok(),
        "the profiles in force stay"
    );
}

#[test]
fn remembered_decisions_and_session_allows_stand_beside_the_document() {
    use super::eval::with_standing_decisions as standing_over;
    use ipc_schema::tool::{ProposalId, Verdict};
    use ipc_schema::ui::{Remembered, RememberedAction};
    let p = |s| ProfileName::parse(s).unwrap();
    let v = |action| Verdict {
        action,
        rule: "tools.write_file default (policy revision 3)".into(),
    };
    let row = |id, action, profile| Remembered {
        id,
        tool: ToolName::WriteFile.into(),
        target: "/p/a".into(),
        action,
        created_unix_ms: 0,
        origin: ProposalId(id + 10),
        profile: p(profile),
    };
    let allow = [row(1, RememberedAction::Allow, "research")];
    let deny = [row(2, RememberedAction::Deny, "research")];
    let w = &ipc_schema::tool::ToolId::Builtin(ToolName::WriteFile);
    // A remembered allow turns an Ask into an Allow in its own profile only.
    let got = standing_over(v(Action::Ask), &allow, &p("research"), w, "/p/a", false);
    assert_eq!(got.action, Action::Allow);
    assert_eq!(
        got.rule,
        "remembered decision 1 (always allow, from proposal #11)"
    );
    let got = standing_over(v(Action::Ask), &allow, &p("default"), w, "/p/a", false);
    assert_eq!(got.action, Action::Ask);
    // ... and never overrides a Deny, nor does a session allow.
    let got = standing_over(v(Action::Deny), &allow, &p("research"), w, "/p/a", true);
    assert_eq!(got.action, Action::Deny);
    // A remembered deny applies in every profile, over an Allow too.
    let got = standing_over(v(Action::Allow), &deny, &p("default"), w, "/p/a", true);
    assert_eq!(got.action, Action::Deny);
    // Other targets are untouched; a session allow names the rule it allowed over.
    let got = standing_over(v(Action::Ask), &deny, &p("default"), w, "/p/b", true);
    assert_eq!(
        got.rule,
        "allowed for this session (tools.write_file default (policy revision 3))"
    );
}

#[test]
fn a_profile_names_the_mode_of_its_sessions_and_a_bad_mode_is_refused() {
    use ipc_schema::mode::SessionMode;
    let text = r#"
mode = "unattended"
[profile.bg]
mode = "full-access"
[profile.plain]
"#;
    let doc = PolicyDoc::parse(text).expect("parses");
    let all = compile(&doc, &Protected::new(&[])).expect("valid");
    let mode = |n: &str| all.get(&ProfileName::parse(n).unwrap()).unwrap().mode;
    assert_eq!(mode("default"), SessionMode::Unattended);
    assert_eq!(mode("bg"), SessionMode::FullAccess);
    assert_eq!(mode("plain"), SessionMode::Ask, "no mode: ask");
    // Written back as it was read.
    let again = PolicyDoc::parse(&doc.to_toml()).expect("round trips");
    assert_eq!(again, doc);
    let bad = PolicyDoc::parse("[profile.x]\nmode = \"yolo\"\n").unwrap_err();
    assert!(bad.contains("yolo"), "{bad}");
    assert!(bad.contains("full-access"), "names the modes: {bad}");
}

#[test]
fn grants_too_large_for_the_file_helpers_configuration_refuse_the_document() {
    let d = tempfile::tempdir().unwrap();
    let doc = |globs: usize| {
        let exclude: Vec<String> = (0..globs)
            .map(|i| format!("\"generated/{i:060}/**\""))
            .collect();
        format!(
            "[[grant]]\nroot = '{}'\ncapabilities = [\"read\"]\nexclude = [{}]\n",
            d.path().display(),
            exclude.join(", ")
        )
    };
    // 500 globs of 75 bytes: under the limit (the positive control).
    let fits = compile(&PolicyDoc::parse(&doc(500)).unwrap(), &Protected::new(&[])).unwrap();
    assert_eq!(fits.fs_grants()[0].exclude.len(), 500);
    // 1,000 of them: over it, refused whole with the count.
    let e = compile(&PolicyDoc::parse(&doc(1000)).unwrap(), &Protected::new(&[])).unwrap_err();
    assert!(
        e.contains("the grants' roots and globs take") && e.contains("at most 49152"),
        "{e}"
    );
}
