//! The Bedrock event-stream codec against the wire-formats.md §2.4 byte dump, arbitrary splits
//! and corruption.
#![allow(clippy::unwrap_used)]

use sidetrack_dialects::bedrock::eventstream::{
    event_frame, exception_frame, DecodeError, Frame, FrameDecoder,
};

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// The 144-byte throttlingException frame from wire-formats.md §2.4.
fn reference_exception_frame() -> Vec<u8> {
    let mut v = hex("00000090 00000061 8e91a9b7");
    v.push(0x0f);
    v.extend_from_slice(b":exception-type");
    v.extend_from_slice(&hex("07 0013"));
    v.extend_from_slice(b"throttlingException");
    v.push(0x0d);
    v.extend_from_slice(b":content-type");
    v.extend_from_slice(&hex("07 0010"));
    v.extend_from_slice(b"application/json");
    v.push(0x0d);
    v.extend_from_slice(b":message-type");
    v.extend_from_slice(&hex("07 0009"));
    v.extend_from_slice(b"exception");
    v.extend_from_slice(&hex(
        "7b226d657373616765223a22546f6f206d616e79207265717565737473227d",
    ));
    v.extend_from_slice(&hex("e67f8005"));
    v
}

#[test]
fn exception_frame_matches_the_reference_dump_byte_for_byte() {
    let want = reference_exception_frame();
    assert_eq!(want.len(), 144);
    let got = exception_frame("throttlingException", "Too many requests");
    assert_eq!(&got[..], &want[..]);
}

#[test]
fn reference_dump_decodes() {
    let mut d = FrameDecoder::new();
    let frames = d.push(&reference_exception_frame()).unwrap();
    assert_eq!(
        frames,
        vec![Frame {
            message_type: "exception".into(),
            event_type: None,
            exception_type: Some("throttlingException".into()),
            error_code: None,
            error_message: None,
            payload: bytes::Bytes::from_static(br#"{"message":"Too many requests"}"#),
        }]
    );
    assert_eq!(d.buffered_len(), 0);
}

fn three_frames() -> Vec<u8> {
    let mut all = Vec::new();
    all.extend_from_slice(&event_frame("messageStart", br#"{"role":"assistant"}"#));
    all.extend_from_slice(&event_frame(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":"Hi"},"p":"abcdefgh"}"#,
    ));
    all.extend_from_slice(&exception_frame("modelStreamErrorException", "boom"));
    all
}

#[test]
fn frames_split_at_every_byte_decode() {
    let all = three_frames();
    let mut whole = FrameDecoder::new();
    let expected = whole.push(&all).unwrap();
    assert_eq!(expected.len(), 3);
    assert_eq!(expected[0].event_type.as_deref(), Some("messageStart"));
    assert_eq!(expected[0].message_type, "event");
    assert_eq!(expected[1].payload.len(), 60);
    assert_eq!(
        expected[2].exception_type.as_deref(),
        Some("modelStreamErrorException")
    );

    // One byte at a time.
    let mut d = FrameDecoder::new();
    let mut got = Vec::new();
    for b in &all {
        got.extend(d.push(std::slice::from_ref(b)).unwrap());
    }
    assert_eq!(got, expected);

    // Every two-piece split.
    for cut in 0..=all.len() {
        let mut d = FrameDecoder::new();
        let mut got = d.push(&all[..cut]).unwrap();
        got.extend(d.push(&all[cut..]).unwrap());
        assert_eq!(got, expected, "split at {cut}");
        assert_eq!(d.buffered_len(), 0);
    }
}

#[test]
fn corrupting_any_crc_byte_is_an_error() {
    let frame = event_frame("chunk", br#"{"bytes":"e30="}"#).to_vec();
    // Prelude CRC (bytes 8..12) and message CRC (last 4 bytes), and a payload byte.
    let positions = [
        8,
        9,
        10,
        11,
        frame.len() - 4,
        frame.len() - 1,
        frame.len() - 6,
    ];
    for pos in positions {
        let mut bad = frame.clone();
        bad[pos] ^= 0x01;
        let mut d = FrameDecoder::new();
        let err: DecodeError = d.push(&bad).unwrap_err();
        assert!(err.to_string().contains("invalid event stream"), "{err}");
        // The stream stays failed.
        assert!(d.push(&frame).is_err());
    }
}

#[test]
fn frames_before_a_corrupt_one_are_still_returned() {
    let mut all = event_frame("messageStart", b"{}").to_vec();
    let mut bad = event_frame("messageStop", b"{}").to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    all.extend_from_slice(&bad);
    let mut d = FrameDecoder::new();
    let frames = d.push(&all).unwrap();
    assert_eq!(frames.len(), 1);
    assert!(d.error().is_some());
    assert!(d.push(b"").is_err());
}

#[test]
fn event_frame_headers_are_in_bedrock_order() {
    let f = event_frame("chunk", b"{}");
    let s = String::from_utf8_lossy(&f);
    let et = s.find(":event-type").unwrap();
    let ct = s.find(":content-type").unwrap();
    let mt = s.find(":message-type").unwrap();
    assert!(et < ct && ct < mt);
}
