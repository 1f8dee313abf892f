// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! "Always" decisions and session profiles: an "always allow" given to a session of one profile
//! turns that profile's later asks on the same target into allows, and no other profile's; an
//! "always deny" applies in every profile (the most restrictive answer wins).

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use ipc_schema::tool::{RefusalKind, ToolReply};
use ipc_schema::ui::{Choice, UiReply, UiRequest};
use ipc_schema::Body;

/// The project granted to the default profile and to `review`, writes asked in both.
fn policy() -> String {
    format!(
        "{}\n[profile.review.tools]\nwrite_file = \"ask\"\n[[profile.review.grant]]\nroot = \"{{ROOT}}\"\ncapabilities = [\"read\", \"write\"]\n",
        policy_with("write_file = \"ask\"", "")
    )
}

fn done(r: Option<ToolReply>) {
    match r {
        Some(ToolReply::Done(_)) => {}
        other => panic!("not done: {other:?}"),
    }
}

#[test]
fn an_always_allow_holds_in_its_own_profile_and_an_always_deny_in_every_profile() {
    let inst = Instance::new(Some(&policy()));
    let b = inst.start(&[]);
    let mut ui = b.ui();
    let (allowed, denied) = (inst.file("allowed.txt"), inst.file("denied.txt"));

    // A default-profile session: "always allow" for allowed.txt.
    let mut d1 = b.gateway();
    d1.open_session(None);
    let id = d1.send(write_call(&allowed, "one\n"));
    let p = ui.wait_pending(1).remove(0);
    assert!(matches!(
        ui.decide(&p, Choice::AlwaysAllow),
        Body::UiReply(_)
    ));
    done(d1.final_for(id));

    // Positive control: another default-profile session writes it without being asked.
    let mut d2 = b.gateway();
    d2.open_session(None);
    done(Some(d2.call(write_call(&allowed, "two\n"))));
    assert!(ui.pending().is_empty());
    assert_eq!(std::fs::read_to_string(&allowed).unwrap(), "two\n");

    // A `review` session is asked for the same write: the allow was given in another profile.
    let mut r = b.gateway();
    let info = r.open_session_in("review");
    assert_eq!(info.profile.to_string(), "review");
    let id = r.send(write_call(&allowed, "three\n"));
    let p = ui.wait_pending(1).remove(0);
    assert_eq!(p.session, info.session);
    assert!(matches!(ui.decide(&p, Choice::Deny), Body::UiReply(_)));
    match r.final_for(id) {
        Some(ToolReply::Refused(x)) => assert_eq!(x.kind, RefusalKind::HumanDenied),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&allowed).unwrap(), "two\n");

    // "Always deny" given in `review` refuses the default profile too, without asking.
    let id = r.send(write_call(&denied, "x\n"));
    let p = ui.wait_pending(1).remove(0);
    assert!(matches!(
        ui.decide(&p, Choice::AlwaysDeny),
        Body::UiReply(_)
    ));
    assert!(matches!(r.final_for(id), Some(ToolReply::Refused(_))));
    match d2.call(write_call(&denied, "y\n")) {
        ToolReply::Refused(x) => {
            assert_eq!(x.kind, RefusalKind::Denied);
            assert!(
                x.message.contains("always deny"),
                "refused by the remembered decision: {}",
                x.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(ui.pending().is_empty(), "the deny was not asked again");
    assert!(!denied.exists());

    // Both decisions are listed with the profile they were given in.
    match ui.request(UiRequest::PolicyShow) {
        Body::UiReply(UiReply::Policy(v)) => {
            let got: Vec<(&str, &str)> = v
                .remembered
                .iter()
                .map(|r| (r.action.as_str(), r.profile.as_str()))
                .collect();
            assert_eq!(got, vec![("allow", "default"), ("deny", "review")]);
        }
        other => panic!("{other:?}"),
    }
}
