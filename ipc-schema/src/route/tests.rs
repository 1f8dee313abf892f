//! The route tables' tests: the old body-level rules still hold, every kind has a row
//! somewhere, and the flags are enforced.

use super::*;
use crate::exec::{AgentRun, CommandSpec, Limits, NetworkMode, ServerRun, UserCommand};
use crate::secrets::CredentialName;

#[test]
fn gateway_never_carries_decisions_policy_or_helper_messages() {
    for kind in [
        Kind::Ui,
        Kind::Doctor,
        Kind::Hello,
        Kind::Fs,
        Kind::FsReply,
        Kind::Net,
        Kind::NetReply,
        Kind::Exec,
        Kind::ExecReply,
        Kind::Secrets,
        Kind::SecretsReply,
        Kind::UiReply,
        Kind::ToolReply,
    ] {
        assert!(!may_send_to_broker(Role::Gateway, kind), "{kind:?}");
    }
    assert!(may_send_to_broker(Role::Gateway, Kind::ToolCall));
}

#[test]
fn helpers_send_only_their_own_replies() {
    for helper in Role::HELPERS {
        for kind in [Kind::Ui, Kind::ToolCall, Kind::Doctor, Kind::Ping] {
            assert!(!may_send_to_broker(helper, kind), "{helper} {kind:?}");
        }
    }
    assert!(!may_send_to_broker(Role::Fs, Kind::NetReply));
    assert!(!may_send_to_broker(Role::Net, Kind::SecretsReply));
    assert!(!may_send_to_broker(Role::Exec, Kind::FsReply));
    assert!(!may_send_to_broker(Role::Secrets, Kind::ExecReply));
}

#[test]
fn broker_sends_helpers_only_their_requests() {
    assert!(broker_may_send(Role::Fs, Kind::Fs));
    assert!(!broker_may_send(Role::Fs, Kind::Net));
    assert!(!broker_may_send(Role::Net, Kind::Secrets));
    assert!(!broker_may_send(Role::Gateway, Kind::UiReply));
    assert!(!broker_may_send(Role::Gateway, Kind::DoctorReport));
}

#[test]
fn every_role_has_a_row_in_both_tables() {
    for role in [
        Role::Ui,
        Role::Gateway,
        Role::Fs,
        Role::Net,
        Role::Exec,
        Role::Secrets,
        Role::Servers,
        Role::Notifier,
    ] {
        assert!(!kinds_to_broker(role).is_empty(), "{role}");
        assert!(
            !Channel::from_broker(role).table().routes.is_empty(),
            "{role}"
        );
    }
}

/// Every request-level kind, listed by hand. The match below names every variant, so a new
/// variant does not compile until it is listed here, and the test after it then fails until a
/// table has a row for it.
fn every_kind() -> Vec<RequestKind> {
    fn named(k: RequestKind) {
        match k {
            K::Ping | K::Pong | K::Hello | K::Error | K::Doctor | K::DoctorReport => {}
            K::UiReply | K::ToolReply | K::FsReply | K::NetReply | K::ExecReply => {}
            K::SecretsReply | K::ServersReply | K::NotifyReply => {}
            K::Notify(NotifyKind::Watch) => {}
            K::Servers(V::Attach | V::ListTools | V::CallTool | V::Watch | V::Detach) => {}
            K::Ui(
                U::ListPending
                | U::Subscribe
                | U::Decide
                | U::ListUncertain
                | U::ListSessions
                | U::PolicyShow
                | U::PolicyApply
                | U::PolicyForget
                | U::AuditTail
                | U::CredentialChanged
                | U::LaunchCommand
                | U::StopCommand
                | U::ServerTools
                | U::ApproveServerTools
                | U::SetSessionMode
                | U::StopBroker,
            ) => {}
            K::Tool(
                T::OpenSession
                | T::DescribeAgent
                | T::ReadFile
                | T::ListDir
                | T::SearchFiles
                | T::Grep
                | T::WriteFile
                | T::EditFile
                | T::DeletePath
                | T::MovePath
                | T::UndoChange
                | T::FetchUrl
                | T::HttpRequest
                | T::RunCommand
                | T::ListServerTools
                | T::Server
                | T::Withdraw,
            ) => {}
            K::Fs(
                F::Status
                | F::Resolve
                | F::ReadFile
                | F::ListDir
                | F::Stat
                | F::SearchFiles
                | F::Grep
                | F::WriteFile
                | F::EditFile
                | F::DeletePath
                | F::MovePath
                | F::Undo
                | F::ListCheckpoints
                | F::TestProbe,
            ) => {}
            K::Net(
                N::Check
                | N::Fetch
                | N::FetchPart
                | N::ProxyOpen
                | N::ProxyClose
                | N::ProxyConnection
                | N::Http
                | N::Mcp,
            ) => {}
            K::Exec(X::Start | X::StartConnected | X::Poll | X::Stop) => {}
            K::Secrets(
                S::Status
                | S::List
                | S::Has
                | S::Set
                | S::Delete
                | S::Attach
                | S::ServerEnv
                | S::AuditKey
                | S::AuditMac,
            ) => {}
        }
    }
    let mut all = vec![
        K::Ping,
        K::Pong,
        K::Hello,
        K::Error,
        K::Doctor,
        K::DoctorReport,
        K::UiReply,
        K::ToolReply,
        K::FsReply,
        K::NetReply,
        K::ExecReply,
        K::SecretsReply,
        K::ServersReply,
        K::NotifyReply,
        K::Notify(NotifyKind::Watch),
    ];
    all.extend(
        [
            U::ListPending,
            U::Subscribe,
            U::Decide,
            U::ListUncertain,
            U::ListSessions,
            U::PolicyShow,
            U::PolicyApply,
            U::PolicyForget,
            U::AuditTail,
            U::CredentialChanged,
            U::LaunchCommand,
            U::StopCommand,
            U::ServerTools,
            U::ApproveServerTools,
            U::SetSessionMode,
            U::StopBroker,
        ]
        .map(K::Ui),
    );
    all.extend(
        [
            T::OpenSession,
            T::DescribeAgent,
            T::ReadFile,
            T::ListDir,
            T::SearchFiles,
            T::Grep,
            T::WriteFile,
            T::EditFile,
            T::DeletePath,
            T::MovePath,
            T::UndoChange,
            T::FetchUrl,
            T::HttpRequest,
            T::RunCommand,
            T::ListServerTools,
            T::Server,
            T::Withdraw,
        ]
        .map(K::Tool),
    );
    all.extend(
        [
            F::Status,
            F::Resolve,
            F::ReadFile,
            F::ListDir,
            F::Stat,
            F::SearchFiles,
            F::Grep,
            F::WriteFile,
            F::EditFile,
            F::DeletePath,
            F::MovePath,
            F::Undo,
            F::ListCheckpoints,
            F::TestProbe,
        ]
        .map(K::Fs),
    );
    all.extend(
        [
            N::Check,
            N::Fetch,
            N::FetchPart,
            N::ProxyOpen,
            N::ProxyClose,
            N::ProxyConnection,
            N::Http,
            N::Mcp,
        ]
        .map(K::Net),
    );
    all.extend([X::Start, X::StartConnected, X::Poll, X::Stop].map(K::Exec));
    all.extend([V::Attach, V::ListTools, V::CallTool, V::Watch, V::Detach].map(K::Servers));
    all.extend(
        [
            S::Status,
            S::List,
            S::Has,
            S::Set,
            S::Delete,
            S::Attach,
            S::ServerEnv,
            S::AuditKey,
            S::AuditMac,
        ]
        .map(K::Secrets),
    );
    all.iter().copied().for_each(named);
    all
}

#[test]
fn every_kind_has_a_row_somewhere_and_tables_are_well_formed() {
    for kind in every_kind() {
        assert!(
            Channel::ALL
                .iter()
                .any(|c| c.table().lookup(kind).is_some()),
            "{kind:?} is in no table"
        );
    }
    for c in Channel::ALL {
        let t = c.table();
        assert_eq!(t.channel, c, "{c:?}'s table names another channel");
        assert!(t.routes.len() <= 64, "{c:?}: RouteState has 64 bits");
        for (i, r) in t.routes.iter().enumerate() {
            assert!(
                !t.routes[..i].iter().any(|o| o.kind == r.kind),
                "{c:?} lists {:?} twice",
                r.kind
            );
        }
    }
}

#[test]
fn the_broker_may_not_set_or_delete_credentials() {
    let name = CredentialName::parse("api").unwrap();
    let delete = Body::Secrets(SecretsRequest::Delete { name: name.clone() });
    for body in [delete.clone(), Body::Secrets(SecretsRequest::List)] {
        let e = check(Channel::BrokerToSecrets, &mut RouteState::default(), &body).unwrap_err();
        assert!(matches!(e, RouteError::NotPermitted { .. }), "{e}");
    }
    assert!(BROKER_TO_SECRETS.lookup(K::Secrets(S::Set)).is_none());
    // The CLI's own helper serves them, as effects; and it makes no request headers.
    assert_eq!(
        check(Channel::SecretsPrivate, &mut RouteState::default(), &delete),
        Ok(EFFECT)
    );
    assert!(SECRETS_PRIVATE.lookup(K::Secrets(S::Set)).is_some());
    let attach = Body::Secrets(SecretsRequest::Attach {
        name,
        host: "example.com".into(),
    });
    assert!(check(
        Channel::BrokerToSecrets,
        &mut RouteState::default(),
        &attach
    )
    .is_ok());
    assert!(check(Channel::SecretsPrivate, &mut RouteState::default(), &attach).is_err());
    // The body-level view cannot tell: it still says the broker may send secrets messages.
    assert!(broker_may_send(Role::Secrets, Kind::Secrets));
}

#[test]
fn hello_comes_first_and_once() {
    let hello = Body::Hello(crate::status::Hello {
        role: Role::Fs,
        pid: 1,
        lockdown: crate::status::LockdownReport::unconfined("fs", "test"),
    });
    let mut st = RouteState::default();
    assert_eq!(
        check(Channel::FsToBroker, &mut st, &Body::Pong),
        Err(RouteError::FirstExpected {
            channel: Channel::FsToBroker,
            kind: K::Pong,
            first: K::Hello
        })
    );
    let mut st = RouteState::default();
    assert_eq!(check(Channel::FsToBroker, &mut st, &hello), Ok(HELLO));
    assert_eq!(check(Channel::FsToBroker, &mut st, &Body::Pong), Ok(NONE));
    assert_eq!(
        check(Channel::FsToBroker, &mut st, &hello),
        Err(RouteError::NotFirst {
            channel: Channel::FsToBroker,
            kind: K::Hello
        })
    );
}

#[test]
fn a_session_is_opened_once_and_its_client_named_once() {
    let open = Body::ToolCall(ToolCall::OpenSession {
        resume: None,
        profile: None,
    });
    let describe = Body::ToolCall(ToolCall::DescribeAgent(crate::tool::AgentInfo::capped(
        "a", "1",
    )));
    let read = Body::ToolCall(ToolCall::Withdraw(crate::tool::ProposalId(1)));
    // Another call may come first (the broker gives the connection a session of the default
    // profile); an OpenSession after it passes the table once (the broker answers it with an
    // error).
    let mut st = RouteState::default();
    assert_eq!(check(Channel::GatewayToBroker, &mut st, &read), Ok(NONE));
    assert_eq!(check(Channel::GatewayToBroker, &mut st, &open), Ok(ONCE));
    let mut st = RouteState::default();
    assert_eq!(check(Channel::GatewayToBroker, &mut st, &open), Ok(ONCE));
    assert_eq!(
        check(Channel::GatewayToBroker, &mut st, &describe),
        Ok(ONCE)
    );
    assert_eq!(
        check(Channel::GatewayToBroker, &mut st, &describe),
        Err(RouteError::Again {
            channel: Channel::GatewayToBroker,
            kind: K::Tool(T::DescribeAgent)
        })
    );
    assert_eq!(
        check(Channel::GatewayToBroker, &mut st, &open),
        Err(RouteError::Again {
            channel: Channel::GatewayToBroker,
            kind: K::Tool(T::OpenSession)
        })
    );
    // Pings come as often as they like.
    assert_eq!(
        check(
            Channel::GatewayToBroker,
            &mut st,
            &Body::Ping { target: None }
        ),
        Ok(NONE)
    );
    assert_eq!(
        check(
            Channel::GatewayToBroker,
            &mut st,
            &Body::Ping { target: None }
        ),
        Ok(NONE)
    );
    // The agent's channel never carries a decision.
    let ui = Body::Ui(UiRequest::ListPending);
    assert!(matches!(
        check(Channel::GatewayToBroker, &mut st, &ui),
        Err(RouteError::NotPermitted { .. })
    ));
}

#[test]
fn a_start_brings_its_connector_only_with_the_proxy_network_an_agent_or_a_server() {
    let spec = |network, agent: Option<AgentRun>| CommandSpec {
        argv: vec!["true".into()],
        cwd: "/w".into(),
        grants: vec![],
        env: vec![],
        network,
        limits: Limits::default(),
        hide: Default::default(),
        user: Some(Box::new(UserCommand {
            agent,
            ..Default::default()
        })),
        slot: None,
    };
    let agent = AgentRun {
        state_home: "/agents/a".into(),
        tmp_files: vec![],
        vars: vec![],
        gateway_socket: "/tmp/g.sock".into(),
    };
    let start = |s| Body::Exec(ExecRequest::Start(Box::new(s)));
    let plain = start(spec(NetworkMode::None, None));
    let proxied = start(spec(NetworkMode::Proxy { token: "t".into() }, None));
    let agent = start(spec(NetworkMode::None, Some(agent)));
    // A third-party MCP server's stdio socket goes out over the connector too.
    let mut server = spec(NetworkMode::None, None);
    server.user = Some(Box::new(UserCommand {
        long_run: true,
        server: Some(ServerRun {
            state_home: "/agents/s".into(),
            run_name: None,
        }),
        ..Default::default()
    }));
    let server = start(server);
    assert_eq!(kind_of(&plain), K::Exec(X::Start));
    assert_eq!(kind_of(&proxied), K::Exec(X::StartConnected));
    // On Windows an agent reaches its gateway on a pipe of its run: no connector.
    let agent_start = if cfg!(unix) {
        X::StartConnected
    } else {
        X::Start
    };
    assert_eq!(kind_of(&agent), K::Exec(agent_start));
    assert_eq!(kind_of(&server), K::Exec(X::StartConnected));
    let mut st = RouteState::default();
    assert!(!check(Channel::BrokerToExec, &mut st, &plain)
        .unwrap()
        .contains(FD));
    let connected = [&proxied, &server]
        .into_iter()
        .chain(cfg!(unix).then_some(&agent));
    for connected in connected {
        let f = check(Channel::BrokerToExec, &mut st, connected).unwrap();
        assert!(f.contains(FD) && !f.contains(NEEDS_FD) && f.contains(EFFECT));
    }
    let conn = Body::Net(NetRequest::ProxyConnection {
        session: "s".into(),
    });
    assert!(check(Channel::BrokerToNet, &mut st, &conn)
        .unwrap()
        .contains(NEEDS_FD));
}

#[test]
fn body_level_kinds_agree_with_request_kinds() {
    for kind in every_kind() {
        let channels: Vec<Channel> = Channel::ALL
            .into_iter()
            .filter(|c| c.table().lookup(kind).is_some())
            .collect();
        for c in channels {
            assert!(c.table().admits_body_kind(kind.body_kind()));
        }
    }
    assert_eq!(
        kind_of(&Body::Ui(UiRequest::PolicyApply {
            document: String::new()
        })),
        K::Ui(U::PolicyApply)
    );
}

#[test]
fn only_the_human_channel_may_launch_a_command() {
    use crate::exec::{Hide, Limits};
    use crate::ui::{CommandLaunch, LaunchRequest};
    let launch = Body::Ui(UiRequest::Launch(LaunchRequest::Command(Box::new(
        CommandLaunch {
            argv: vec!["true".into()],
            cwd: "/work".into(),
            grants: vec![],
            work_root: true,
            env: vec![],
            pass_env: vec![],
            domains: vec![],
            limits: Limits::default(),
            hide: Hide::default(),
            long_run: true,
            agent: Some(crate::ui::AgentLaunch {
                profile: None,
                state_home: "/tmp/s".into(),
                mcp_config: String::new(),
                mode: Some(crate::mode::SessionMode::FullAccess),
                run_name: None,
            }),
        },
    ))));
    let stop = Body::Ui(UiRequest::Launch(LaunchRequest::StopCommand));
    for body in [&launch, &stop] {
        let mut ui = RouteState::default();
        assert!(check(Channel::UiToBroker, &mut ui, body).is_ok());
        let mut gw = RouteState::default();
        assert!(matches!(
            check(Channel::GatewayToBroker, &mut gw, body),
            Err(RouteError::NotPermitted { .. })
        ));
        // And the body-level check the broker's fronts apply (a peer that fails it is killed).
        assert!(!may_send_to_broker(Role::Gateway, body.kind()));
    }
    assert_eq!(kind_of(&launch), K::Ui(U::LaunchCommand));
    assert_eq!(kind_of(&stop), K::Ui(U::StopCommand));
}

/// A session's mode is the human's to set: the request that sets it, and a launch that names
/// one, pass on the ui channel and are fatal from the gateway (whose table has no row for
/// either, and whose one session request, `OpenSession`, has no mode to name).
#[test]
fn only_the_ui_channel_carries_a_session_mode() {
    use crate::mode::SessionMode;
    use crate::tool::SessionId;
    use crate::ui::{ModeSetter, UiRequest};
    for mode in SessionMode::ALL {
        let body = Body::Ui(UiRequest::SetSessionMode {
            session: SessionId("s".into()),
            mode,
            by: ModeSetter::Cli,
        });
        assert_eq!(kind_of(&body), K::Ui(U::SetSessionMode));
        let mut ui = RouteState::default();
        assert_eq!(
            check(Channel::UiToBroker, &mut ui, &body),
            Ok(Flags::EFFECT)
        );
        let mut gw = RouteState::default();
        assert!(matches!(
            check(Channel::GatewayToBroker, &mut gw, &body),
            Err(RouteError::NotPermitted {
                channel: Channel::GatewayToBroker,
                kind: K::Ui(U::SetSessionMode)
            })
        ));
        assert!(!may_send_to_broker(Role::Gateway, body.kind()));
    }
    // And no other channel to the broker carries it either.
    for role in [
        Role::Fs,
        Role::Net,
        Role::Exec,
        Role::Secrets,
        Role::Servers,
        Role::Notifier,
    ] {
        assert!(
            !kinds_to_broker(role).contains(&Kind::Ui),
            "{role} may send ui messages"
        );
    }
}

/// Only the human's channel may stop the broker; the agent's gateway that sends it is refused
/// (and so killed by the broker), the console's is admitted.
#[test]
fn only_the_ui_channel_stops_the_broker() {
    use crate::ui::UiRequest;
    let body = Body::Ui(UiRequest::StopBroker);
    assert_eq!(kind_of(&body), K::Ui(U::StopBroker));
    let mut ui = RouteState::default();
    assert_eq!(
        check(Channel::UiToBroker, &mut ui, &body),
        Ok(Flags::EFFECT)
    );
    for channel in [Channel::GatewayToBroker, Channel::NotifierToBroker] {
        let mut st = RouteState::default();
        assert!(
            matches!(
                check(channel, &mut st, &body),
                Err(RouteError::NotPermitted {
                    kind: K::Ui(U::StopBroker),
                    ..
                })
            ),
            "{channel:?}"
        );
    }
}

#[test]
fn the_notifier_may_watch_and_nothing_else() {
    use crate::notify::NotifyRequest;
    use crate::tool::ProposalId;
    use crate::ui::{Choice, Decision, ProposalDigest};
    let watch = Body::Notify(NotifyRequest::Watch);
    // The positive control: the same state machine admits a watch, once.
    let mut st = RouteState::default();
    assert!(check(
        Channel::NotifierToBroker,
        &mut st,
        &Body::Ping { target: None }
    )
    .is_ok());
    assert!(check(Channel::NotifierToBroker, &mut st, &watch).is_ok());
    assert_eq!(
        check(Channel::NotifierToBroker, &mut st, &watch),
        Err(RouteError::Again {
            channel: Channel::NotifierToBroker,
            kind: K::Notify(NotifyKind::Watch)
        })
    );
    // A decision, a policy change, a subscription to the console's stream, a tool call, a
    // doctor request: each refused, first or after a watch.
    let decide = Body::Ui(UiRequest::Decide(Decision {
        proposal: ProposalId(1),
        digest: ProposalDigest([0; 32]),
        choice: Choice::AllowOnce,
    }));
    let refused = [
        decide.clone(),
        Body::Ui(UiRequest::PolicyApply {
            document: String::new(),
        }),
        Body::Ui(UiRequest::PolicyForget { remembered: 1 }),
        Body::Ui(UiRequest::ListPending),
        Body::Ui(UiRequest::Subscribe),
        Body::ToolCall(crate::tool::ToolCall::ListServerTools),
        Body::Doctor,
    ];
    for body in &refused {
        for after_watch in [false, true] {
            let mut st = RouteState::default();
            if after_watch {
                check(Channel::NotifierToBroker, &mut st, &watch).unwrap();
            }
            assert_eq!(
                check(Channel::NotifierToBroker, &mut st, body),
                Err(RouteError::NotPermitted {
                    channel: Channel::NotifierToBroker,
                    kind: kind_of(body)
                }),
                "{body:?}"
            );
        }
        assert!(!may_send_to_broker(Role::Notifier, body.kind()), "{body:?}");
    }
    assert_eq!(kinds_to_broker(Role::Notifier), [Kind::Ping, Kind::Notify]);
    // And the ui channel still carries the decision (the table is the only difference).
    assert!(check(Channel::UiToBroker, &mut RouteState::default(), &decide).is_ok());
    // A watch is the notifier's alone: neither the console nor the agent sends one.
    for c in [Channel::UiToBroker, Channel::GatewayToBroker] {
        assert!(matches!(
            check(c, &mut RouteState::default(), &watch),
            Err(RouteError::NotPermitted { .. })
        ));
    }
    // The broker sends it only its own replies: no console event, no tool reply.
    assert!(broker_may_send(Role::Notifier, Kind::NotifyReply));
    assert!(!broker_may_send(Role::Notifier, Kind::UiReply));
    assert!(!broker_may_send(Role::Ui, Kind::NotifyReply));
}
