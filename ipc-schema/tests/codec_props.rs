//! Property tests for the frame codec: round trips, and hostile input that must neither panic
//! nor make the decoder allocate past the frame limit.

use ipc_schema::codec::{decode_from_slice, encode, read_frame, MAX_FRAME};
use ipc_schema::status::{Hello, LandlockStatus, LockdownReport};
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply, Role};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Records the largest single allocation made by this thread while armed.
struct PeakAlloc;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the thread-local may be gone during thread teardown.
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = PEAK.try_with(|p| p.set(p.get().max(size)));
        }
    });
}

// SAFETY: every method forwards to the system allocator unchanged; `note` only reads and
// writes plain thread-local cells and never allocates.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: PeakAlloc = PeakAlloc;

/// Runs `f` and returns the largest single allocation it made.
fn peak_of(f: impl FnOnce()) -> usize {
    PEAK.with(|p| p.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    PEAK.with(|p| p.get())
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::Ui),
        Just(Role::Gateway),
        Just(Role::Fs),
        Just(Role::Net),
        Just(Role::Exec),
        Just(Role::Secrets),
    ]
}

fn report() -> impl Strategy<Value = LockdownReport> {
    (
        "[a-z]{0,8}",
        any::<[bool; 8]>(),
        any::<u32>(),
        any::<u32>(),
        prop_oneof![
            Just(LandlockStatus::FullyEnforced),
            Just(LandlockStatus::PartiallyEnforced),
            Just(LandlockStatus::NotEnforced)
        ],
        any::<u32>(),
        proptest::collection::vec(".{0,12}", 0..4),
        proptest::collection::vec(".{0,40}", 0..3),
    )
        .prop_map(
            |(profile, b, abi, min, landlock, n, namespaces, degraded)| LockdownReport {
                profile,
                stray_fds_closed: b[0],
                env_cleared: b[1],
                core_dumps_off: b[2],
                dumpable_off: b[3],
                no_new_privs: b[4],
                capabilities_dropped: b[5],
                landlock_abi: abi,
                landlock_min_abi: min,
                landlock,
                seccomp_filter: b[6],
                seccomp_allowed_syscalls: n,
                namespaces,
                exec_tier: if b[7] {
                    Some(ipc_schema::tier::ConfinementTier::Landlock)
                } else {
                    None
                },
                exec_tier_why: None,
                windows: b[6].then(|| {
                    Box::new(ipc_schema::status::WindowsConfinement {
                        restricted_token: b[0],
                        write_restricted: b[1].then_some(b[5]),
                        restricting_sids: vec!["S-1-5-12".into()],
                        privileges: degraded.clone(),
                        in_job: b[2],
                        job_active_processes: n,
                        job_ui_restrictions: b[3].then_some(abi),
                        ..Default::default()
                    })
                }),
                degraded,
            },
        )
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        proptest::option::of(role()).prop_map(|target| Body::Ping { target }),
        Just(Body::Pong),
        Just(Body::Doctor),
        (role(), any::<u32>(), report()).prop_map(|(role, pid, lockdown)| Body::Hello(Hello {
            role,
            pid,
            lockdown
        })),
        (
            prop_oneof![
                Just(ErrorCode::HelperUnavailable),
                Just(ErrorCode::HelperCrashed),
                Just(ErrorCode::Refused),
                Just(ErrorCode::Invalid),
                Just(ErrorCode::Limit),
                Just(ErrorCode::Internal)
            ],
            ".{0,200}"
        )
            .prop_map(|(code, message)| Body::Error(ErrorReply { code, message })),
    ]
}

proptest! {
    #[test]
    fn every_message_round_trips(id in any::<u64>(), body in body()) {
        let env = Envelope::new(id, body);
        let frame = encode(&env).unwrap();
        let (back, used) = decode_from_slice(&frame, MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(used, frame.len());
        prop_assert_eq!(&back, &env);
        let streamed = read_frame(&mut &frame[..], MAX_FRAME).unwrap().unwrap();
        prop_assert_eq!(streamed, env);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = decode_from_slice(&bytes, MAX_FRAME);
        let _ = read_frame(&mut &bytes[..], MAX_FRAME);
    }

    #[test]
    fn random_payload_behind_a_valid_header_never_panics(
        payload in proptest::collection::vec(any::<u8>(), 1..2048)
    ) {
        let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&payload);
        let _ = decode_from_slice(&frame, MAX_FRAME);
        let _ = read_frame(&mut &frame[..], MAX_FRAME);
    }

    #[test]
    fn every_truncation_of_a_valid_frame_is_refused(
        id in any::<u64>(),
        body in body(),
        cut in any::<prop::sample::Index>(),
    ) {
        let frame = encode(&Envelope::new(id, body)).unwrap();
        let cut = cut.index(frame.len());
        // A prefix is "need more" (slice) or a truncation error (stream), never a message.
        prop_assert!(decode_from_slice(&frame[..cut], MAX_FRAME).unwrap().is_none());
        if cut > 0 {
            prop_assert!(read_frame(&mut &frame[..cut], MAX_FRAME).is_err());
        }
    }

    #[test]
    fn bit_flips_never_panic(
        id in any::<u64>(),
        body in body(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut frame = encode(&Envelope::new(id, body)).unwrap();
        let i = at.index(frame.len());
        frame[i] ^= 1 << bit;
        let _ = decode_from_slice(&frame, usize::MAX);
    }
}

#[test]
fn hostile_lengths_do_not_allocate_past_the_limit() {
    // Headers claiming huge frames, and payloads whose inner length fields claim huge strings
    // and vectors: the decoder allocates at most the frame it was given.
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for claimed in [u32::MAX, (MAX_FRAME as u32) + 1, 1 << 30] {
        let mut v = claimed.to_le_bytes().to_vec();
        v.extend_from_slice(&[0xffu8; 64]);
        cases.push(v);
    }
    // version 1, id 1, variant Error (3), code 0, then a string length varint of ~2^62.
    let mut payload = vec![1u8, 1, 3, 0];
    payload.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]);
    payload.extend_from_slice(b"short");
    // variant Hello (2), role 0, pid 1, then a profile string claiming 2^40 bytes.
    let mut hello = vec![1u8, 1, 2, 0, 1];
    hello.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x20]);
    for p in [payload, hello] {
        let mut v = (p.len() as u32).to_le_bytes().to_vec();
        v.extend_from_slice(&p);
        cases.push(v);
    }
    for case in &cases {
        let peak = peak_of(|| {
            let r = read_frame(&mut &case[..], MAX_FRAME);
            assert!(r.is_err(), "decoded hostile input {case:?}");
        });
        // Error messages are allocated too; nothing near the claimed sizes is.
        assert!(
            peak <= 4096,
            "allocated {peak} bytes for a {}-byte input",
            case.len()
        );
    }
    // A frame at the limit is allocated once, at its size.
    let big = Envelope::new(
        1,
        Body::Error(ErrorReply::new(
            ErrorCode::Internal,
            "x".repeat(MAX_FRAME - 16),
        )),
    );
    let frame = encode(&big).unwrap();
    let peak = peak_of(|| {
        read_frame(&mut &frame[..], MAX_FRAME).unwrap().unwrap();
    });
    assert!(peak <= MAX_FRAME, "allocated {peak}");
}
