// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The refusal corpus: every URL in data/refusal-corpus.tsv must be refused, before any lookup,
//! with exactly the reason written beside it. Checked twice: through the library's own check
//! (the pure logic) and through the locked-down helper binary.

mod common;

use common::*;
use ipc_schema::net::{NetReply, NetRequest, RefusalKind};
use ipc_schema::Body;
use net_helper::addr::AddressPolicy;
use net_helper::resolve::NetResolver;
use net_helper::{fetch, tls, NetContext};
use std::time::Duration;

fn corpus() -> Vec<(String, String)> {
    let text = include_str!("data/refusal-corpus.tsv");
    let rows: Vec<(String, String)> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (u, r) = l.split_once('\t').expect("URL<TAB>reason");
            (u.replace("\\t", "\t").replace("\\\\", "\\"), r.to_string())
        })
        .collect();
    assert!(
        rows.len() >= 120,
        "the corpus must hold at least 120 URLs, has {}",
        rows.len()
    );
    rows
}

#[test]
fn every_corpus_url_is_refused_by_the_library_with_its_reason() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A name server nobody answers on: no corpus entry may need a lookup.
    let ctx = NetContext {
        resolver: NetResolver::new(
            &["127.0.0.1:9".parse().unwrap()],
            Duration::from_millis(200),
        ),
        policy: AddressPolicy::default(),
        tls: tls::client_config(&[]),
    };
    let mut wrong = Vec::new();
    for (url, want) in corpus() {
        let got = rt.block_on(fetch::check(&ctx, &url));
        match got {
            Err(net_helper::error::FetchError::Refused(kind, reason)) => {
                if reason != want {
                    wrong.push(format!("{url:?}\n   want: {want}\n    got: {reason}"));
                }
                assert!(
                    matches!(kind, RefusalKind::Url | RefusalKind::Address),
                    "{url}: {kind:?}"
                );
            }
            other => wrong.push(format!("{url:?}: not refused: {other:?}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_corpus_url_is_refused_by_the_helper_with_its_reason() {
    let dns = DnsServer::start(standard_zone());
    let mut h = NetHelper::spawn(&args(&dns));
    let rows = corpus();
    // All at once: the helper answers concurrently, each reply by its request's id.
    let ids: Vec<u64> = rows
        .iter()
        .map(|(u, _)| {
            h.send(Body::Net(NetRequest::Fetch(
                ipc_schema::net::FetchRequest::new(u.clone()),
            )))
        })
        .collect();
    let mut wrong = Vec::new();
    for ((url, want), id) in rows.iter().zip(ids) {
        match h.wait(id) {
            Body::NetReply(NetReply::Refused(r)) if &r.reason == want => {}
            other => wrong.push(format!("{url:?}: want {want:?}, got {other:?}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(
        dns.all_names().is_empty(),
        "the corpus caused lookups: {:?}",
        dns.all_names()
    );
}
