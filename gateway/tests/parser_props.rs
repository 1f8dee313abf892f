//! Property tests of the stdin side: whatever bytes arrive, in whatever pieces, the line
//! splitter, the id sniffer and the JSON-RPC layer answer without panicking, and the pieces never
//! change the answer.

use gateway::jsonrpc::{parse_line, sniff_id, IdSniffer};
use gateway::lines::{LineEvent, LineSplitter};
use proptest::prelude::*;

fn split(input: &[u8], max: usize, cuts: &[usize]) -> Vec<LineEvent> {
    let mut s = LineSplitter::new(max);
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts {
        let c = c.min(input.len());
        if c > at {
            s.push(&input[at..c], &mut out);
            at = c;
        }
    }
    s.push(&input[at..], &mut out);
    s.finish(&mut out);
    out
}

/// JSON-ish bytes: brackets, quotes, escapes, digits and the words that matter.
fn jsonish() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![
            &b"{"[..],
            b"}",
            b"[",
            b"]",
            b"\"",
            b"\\",
            b":",
            b",",
            b" ",
            b"\n",
            b"1",
            b"-2.5e3",
            b"\"id\"",
            b"\"jsonrpc\"",
            b"\"2.0\"",
            b"\"method\"",
            b"\"tools/call\"",
            b"\"params\"",
            b"null",
            b"true",
            b"\xff",
            b"\"\\u0000\"",
        ]),
        0..80,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn any_bytes_get_an_answer_and_chunking_never_changes_it(
        input in prop_oneof![jsonish(), prop::collection::vec(any::<u8>(), 0..300)],
        max in 1usize..64,
        mut cuts in prop::collection::vec(0usize..400, 0..6),
    ) {
        cuts.sort();
        let whole = split(&input, max, &[]);
        prop_assert_eq!(&split(&input, max, &cuts), &whole);
        for ev in whole {
            if let LineEvent::Line(l) = ev {
                let _ = parse_line(&l);
                prop_assert!(l.len() <= max);
            }
        }
    }

    #[test]
    fn the_sniffer_finds_the_same_id_whatever_the_pieces(
        input in jsonish(),
        mut cuts in prop::collection::vec(0usize..400, 0..6),
    ) {
        cuts.sort();
        let mut s = IdSniffer::default();
        let mut at = 0;
        for c in cuts {
            let c = c.min(input.len());
            if c > at {
                s.feed(&input[at..c]);
                at = c;
            }
        }
        s.feed(&input[at..]);
        prop_assert_eq!(s.finish(), sniff_id(&input));
    }

    #[test]
    fn a_well_formed_request_s_id_is_what_the_sniffer_finds(id in 0u64..u64::MAX, pad in 0usize..50) {
        let line = format!(r#"{{"method":"tools/call","params":{{"x":"{}","id":7}},"jsonrpc":"2.0","id":{id}}}"#, "a".repeat(pad));
        prop_assert_eq!(sniff_id(line.as_bytes()), serde_json::json!(id));
        prop_assert!(parse_line(line.as_bytes()).is_ok());
    }
}
