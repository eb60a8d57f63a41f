//! The client's reply decoder against redis-rs's parser, on generated frames.

/// Generated RESP2/RESP3 frames, valid for redis-rs's parser unless nested too deep.
mod frames {
    use proptest::prelude::*;

    fn bulk(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut frame = format!("{}{}\r\n", kind as char, payload.len()).into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        frame
    }

    fn aggregate(kind: u8, n: usize, items: Vec<Vec<u8>>) -> Vec<u8> {
        let mut frame = format!("{}{n}\r\n", kind as char).into_bytes();
        frame.extend(items.into_iter().flatten());
        frame
    }

    /// Every leaf type, with payloads that contain CRLFs and bytes that are no UTF-8.
    pub fn leaf() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"+OK\r\n".to_vec()),
            "[a-zA-Z0-9 :]{0,20}".prop_map(|s| format!("+{s}\r\n").into_bytes()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| bulk(b'$', &b)),
            Just(b"$-1\r\n".to_vec()),
            Just(b"_\r\n".to_vec()),
            Just(b"*-1\r\n".to_vec()),
            "[A-Z]{1,8}( [a-z ]{0,20})?".prop_map(|s| format!("-{s}\r\n").into_bytes()),
            "[A-Z]{1,8} [a-z\r\n]{0,20}".prop_map(|s| bulk(b'!', s.as_bytes())),
            any::<f64>().prop_map(|x| format!(",{x}\r\n").into_bytes()),
            any::<bool>().prop_map(|b| format!("#{}\r\n", if b { 't' } else { 'f' }).into_bytes()),
            "-?[0-9]{1,40}".prop_map(|n| format!("({n}\r\n").into_bytes()),
            ("txt|mkd", "[a-z :\r\n]{0,20}")
                .prop_map(|(format, text)| bulk(b'=', format!("{format}:{text}").as_bytes())),
        ]
    }

    fn push_kind() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(bulk(b'$', b"invalidate")),
            Just(bulk(b'$', b"message")),
            Just(bulk(b'$', b"subscribe")),
            Just(bulk(b'$', b"unsubscribe")),
            Just(b"+smessage\r\n".to_vec()),
            "[a-z]{1,12}".prop_map(|k| bulk(b'$', k.as_bytes())),
        ]
    }

    /// Frames of every aggregate type nested in each other, pushes and attributes among them.
    pub fn frame() -> impl Strategy<Value = Vec<u8>> {
        leaf().prop_recursive(6, 96, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(|items| aggregate(
                    b'*',
                    items.len(),
                    items
                )),
                proptest::collection::vec(inner.clone(), 0..6).prop_map(|items| aggregate(
                    b'~',
                    items.len(),
                    items
                )),
                proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(|pairs| {
                    let n = pairs.len();
                    aggregate(
                        b'%',
                        n,
                        pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                    )
                }),
                (
                    proptest::collection::vec((inner.clone(), inner.clone()), 0..3),
                    inner.clone()
                )
                    .prop_map(|(pairs, data)| {
                        let n = pairs.len();
                        let mut items: Vec<Vec<u8>> =
                            pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
                        items.push(data);
                        aggregate(b'|', n, items)
                    }),
                (push_kind(), proptest::collection::vec(inner, 0..6)).prop_map(|(kind, data)| {
                    let mut items = vec![kind];
                    items.extend(data);
                    aggregate(b'>', items.len(), items)
                }),
                Just(b">0\r\n".to_vec()),
            ]
        })
    }

    /// A large aggregate: thousands of small elements.
    pub fn large() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(leaf(), 500..2000)
            .prop_map(|items| aggregate(b'*', items.len(), items))
    }

    /// Arrays, maps, attributes and pushes of one element nested `depth` deep around a leaf:
    /// beyond 99, redis-rs refuses them, and so must the decoder.
    pub fn deep() -> impl Strategy<Value = Vec<u8>> {
        (
            90..115usize,
            prop_oneof![
                Just(&b"*1\r\n"[..]),
                Just(&b"%1\r\n+k\r\n"[..]),
                Just(&b"|1\r\n+k\r\n+v\r\n"[..]),
                Just(&b">2\r\n+m\r\n"[..])
            ],
            leaf(),
        )
            .prop_map(|(depth, open, leaf)| [open.repeat(depth), leaf].concat())
    }
}

/// Checks the decoder on `frames` fed as one stream cut at `cuts`: each frame decodes to the
/// value redis-rs made of it (`theirs`, in the same order), with its length; from the first
/// frame redis-rs refused on, the decoder has stopped with an error.
fn decodes_as_redis_rs(
    frames: &[Vec<u8>],
    theirs: &[Result<String, String>],
    cuts: &[usize],
) -> Result<(), String> {
    let stream = frames.concat();
    let ours = distlock::__fuzz::decode_stream(&stream, cuts);
    for (i, (frame, theirs)) in frames.iter().zip(theirs).enumerate() {
        match (ours.get(i), theirs) {
            (Some(Ok((value, len))), Ok(theirs)) => {
                if format!("{value:?}") != *theirs || *len != frame.len() {
                    return Err(format!(
                        "frame {i} {:?} cut at {cuts:?}: ours {value:?} ({len} bytes), \
                         redis-rs {theirs} ({} bytes)",
                        String::from_utf8_lossy(frame),
                        frame.len()
                    ));
                }
            }
            (Some(Err(_)), Err(_)) => return Ok(()),
            (ours, theirs) => {
                return Err(format!(
                    "frame {i} {:?} cut at {cuts:?}: ours {ours:?}, redis-rs {theirs:?}",
                    String::from_utf8_lossy(frame)
                ))
            }
        }
    }
    match ours.get(frames.len()) {
        None => Ok(()),
        Some(extra) => Err(format!("a frame more than was sent: {extra:?}")),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The client's reply decoder against redis-rs's parser, on streams of generated frames
    /// (pushes, attributes, every type nested in every other, large aggregates, values nested
    /// up to and beyond redis-rs's depth bound) fed in two pieces cut at every point, and in
    /// many pieces cut at random points.
    #[test]
    fn the_decoder_agrees_with_redis_rs_at_every_split(
        frames in proptest::collection::vec(
            proptest::prop_oneof![
                6 => frames::frame(),
                1 => frames::large(),
                1 => frames::deep(),
            ],
            1..5,
        ),
        random_cuts in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..20),
    ) {
        let theirs: Vec<Result<String, String>> = frames
            .iter()
            .map(|f| redis::parse_redis_value(f).map(|v| format!("{v:?}")).map_err(|e| e.to_string()))
            .collect();
        let len: usize = frames.iter().map(Vec::len).sum();
        // Every cut of a short stream; of a long one (a large aggregate), 300 spread over it.
        let step = (len / 300).max(1);
        for cut in (0..=len).step_by(step) {
            decodes_as_redis_rs(&frames, &theirs, &[cut])
                .map_err(proptest::test_runner::TestCaseError::fail)?;
        }
        let mut cuts: Vec<usize> = random_cuts.iter().map(|i| i.index(len + 1)).collect();
        cuts.sort_unstable();
        decodes_as_redis_rs(&frames, &theirs, &cuts)
            .map_err(proptest::test_runner::TestCaseError::fail)?;
    }
}

/// Frames beyond the decoder's size bound are refused as soon as their header says so, before
/// their bytes are buffered; bytes that are no frame are refused; neither crashes.
#[test]
fn frames_beyond_the_bounds_are_errors() {
    for stream in [
        &b"$600000000\r\n"[..],
        b"*400000000\r\n:1\r\n",
        b"%9223372036854775807\r\n",
        b"$99999999999999999999\r\n",
        b"?\r\n",
        b"$3\r\nabcd\r\n",
    ] {
        let decoded = distlock::__fuzz::decode_stream(stream, &[]);
        assert!(
            matches!(decoded.as_slice(), [Err(_)]),
            "{:?}: {decoded:?}",
            String::from_utf8_lossy(stream)
        );
    }
    let mut deep = b"*1\r\n".repeat(200_000);
    deep.extend_from_slice(b":1\r\n");
    let decoded = distlock::__fuzz::decode_stream(&deep, &[7, 100, 4000]);
    assert!(matches!(decoded.as_slice(), [Err(_)]), "{decoded:?}");
}
