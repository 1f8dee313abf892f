//! Feeds arbitrary bytes to both frame decoders. Any panic, or a decoded message that does not
//! re-encode to the same bytes, is a bug.
#![no_main]

use ipc_schema::codec::{decode_from_slice, encode, read_frame, MAX_FRAME};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((env, used))) = decode_from_slice(data, MAX_FRAME) {
        let again = encode(&env).expect("a decoded message re-encodes");
        let (back, _) = decode_from_slice(&again, MAX_FRAME).unwrap().unwrap();
        assert_eq!(back, env);
        assert!(used <= data.len());
    }
    let mut rd = data;
    while let Ok(Some(_)) = read_frame(&mut rd, MAX_FRAME) {}
});
