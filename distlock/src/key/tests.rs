//! The layout's promises (see the module doc of `key`), checked over every short name and
//! over adversarial ones.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

#[test]
fn slots_are_computed_like_redis_cluster() {
    // `CLUSTER KEYSLOT` answers.
    assert_eq!(slot(b"foo"), 12182);
    assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
    assert_eq!(slot(b"distlock:{order:42}:fence"), slot(b"order:42"));
    assert_eq!(slot(b"a{}b"), slot(b"a{}b")); // empty tag: whole key
}

fn key(name: &str) -> LockKey {
    LockKey::new("p", name.as_bytes(), 1 << 20).expect("valid name")
}

/// Every key `name` has under `prefix`: the lock key, then one per kind.
fn keys(prefix: &str, name: &str) -> Vec<(Option<Kind>, Vec<u8>)> {
    let k = LockKey::new(prefix, name.as_bytes(), 1 << 20).expect("valid name");
    let mut all = vec![(None, k.lock().to_vec())];
    for kind in Kind::ALL {
        all.push((Some(kind), k.helper(kind)));
    }
    all
}

/// Checks the layout's promises over `names` under `prefix`: no key is made twice (from
/// another name or another kind), every key of a name shares its slot, the lock key gives
/// the name back and no helper key passes for a lock key.
fn check(prefix: &str, names: impl IntoIterator<Item = String>) -> Result<(), String> {
    let mut seen: HashMap<Vec<u8>, (Option<Kind>, String)> = HashMap::new();
    for name in names {
        let all = keys(prefix, &name);
        let first = slot(&all[0].1);
        for (kind, key) in all {
            let shown = String::from_utf8_lossy(&key).into_owned();
            if let Some(earlier) = seen.insert(key.clone(), (kind, name.clone())) {
                if earlier != (kind, name.clone()) {
                    return Err(format!("`{shown}` is {earlier:?} and {:?}", (kind, &name)));
                }
            }
            if slot(&key) != first {
                return Err(format!("`{shown}` of `{name}` is in another slot"));
            }
            let back = name_of(prefix, &key);
            match kind {
                None if back.as_deref() != Some(name.as_str()) => {
                    return Err(format!("`{shown}` reads back as {back:?}, not `{name}`"));
                }
                Some(kind) if back.is_some() => {
                    return Err(format!(
                        "{kind:?} key `{shown}` passes for the lock {back:?}"
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[test]
fn the_layout_as_documented() {
    let cases = [
        ("order:42", "p:{order:42}", "p:#fence:{order:42}"),
        ("}x", "p:{{}x}", "p:#fence:{{}x}"),
        ("{x", "p:{{{x}", "p:#fence:{{{x}"),
        ("#x", "p:{#x}", "p:#fence:{#x}"),
        ("order:{42}", "p:order:{42}", "p:#fence:order:{42}"),
        ("{k}:waited", "p:#{k}:waited", "p:#fence:#{k}:waited"),
        ("#a{b}", "p:##a{b}", "p:#fence:##a{b}"),
    ];
    for (name, lock, fence) in cases {
        let k = key(name);
        assert_eq!(k.lock(), lock.as_bytes(), "{name}");
        assert_eq!(k.helper(Kind::Fence), fence.as_bytes(), "{name}");
        assert_eq!(k.name(), name);
        assert_eq!(k.channel(), k.lock());
    }
    assert_eq!(key("x").helper(Kind::Waited), b"p:#waited:{x}");
    assert_eq!(key("x").helper(Kind::Forced), b"p:#forced:{x}");
    assert_eq!(key("x").helper(Kind::Readers), b"p:#readers:{x}");
    assert_eq!(key("x").helper(Kind::Intents), b"p:#intents:{x}");
    assert_eq!(key("x").helper(Kind::Slots), b"p:#slots:{x}");
    assert_eq!(record_key("p", "ABCDEFGH"), b"p:#process:{ABCDEFGH}");
    assert_eq!(record_key("", "ABCDEFGH"), b"#process:{ABCDEFGH}");
    let bare = LockKey::new("", b"order:{42}", 1024).unwrap();
    assert_eq!(bare.lock(), b"order:{42}");
    assert_eq!(bare.helper(Kind::Fence), b"#fence:order:{42}");
    assert_eq!(lock_of_channel(&key("x").channel()), key("x").lock());
}

#[test]
fn helper_arguments_match_the_helper_keys() {
    let k = key("order:42");
    let mut cmd = redis::cmd("X");
    for kind in Kind::ALL {
        cmd.arg(k.helper_arg(kind));
    }
    let args: Vec<Vec<u8>> = cmd
        .args_iter()
        .skip(1)
        .map(|a| match a {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            _ => Vec::new(),
        })
        .collect();
    let expected: Vec<Vec<u8>> = Kind::ALL.iter().map(|&kind| k.helper(kind)).collect();
    assert_eq!(args, expected);
}

/// Every name of up to 6 bytes drawn from the bytes the layout gives a meaning to (braces,
/// `#`, `:`), a kind's first letter and another letter: 55,986 names, each key once.
#[test]
fn every_short_name_has_keys_of_its_own() {
    const BYTES: &[u8] = b"{}#:fa";
    let mut names = vec![String::new()];
    let mut all = Vec::new();
    for _ in 0..6 {
        names = names
            .iter()
            .flat_map(|n| BYTES.iter().map(move |&b| format!("{n}{}", b as char)))
            .collect();
        all.extend(names.iter().cloned());
    }
    for prefix in ["p", "", "p:q"] {
        check(prefix, all.iter().cloned()).unwrap();
    }
}

#[test]
fn a_users_hash_tag_chooses_the_slot() {
    assert_eq!(key("order:{42}").slot(), key("payment:{42}").slot());
    assert_eq!(key("{42}:order").slot(), key("payment:{42}").slot());
    assert_eq!(key("order:{42}").slot(), slot(b"42"));
    assert_eq!(key("order:42").slot(), slot(b"order:42"));
}

#[test]
fn keys_of_other_prefixes_or_shapes_are_not_lock_names() {
    for key in [
        &b"other:{x}"[..],
        b"p:#fence:{x}",
        b"p:{x",
        b"p:{}",
        b"p:#x",
        b"p:x",
        b"p:{x{y}}",
        b"p:\xff",
    ] {
        assert_eq!(name_of("p", key), None, "{}", String::from_utf8_lossy(key));
    }
    assert_eq!(name_of("", b"{x}").as_deref(), Some("x"));
    assert_eq!(name_of("p", b"p:x{y}").as_deref(), Some("x{y}"));
}

fn adversarial_name() -> impl Strategy<Value = String> {
    let fragment = prop::sample::select(vec![
        "{",
        "}",
        "{}",
        "}{",
        "#",
        "##",
        ":",
        "fence",
        ":fence",
        "waited",
        ":waited",
        "forced",
        "process",
        ":process",
        "readers",
        "intents",
        "#readers:",
        "#intents:",
        "slots",
        "#slots:",
        "#fence:",
        "#waited:",
        "#process:",
        "p:",
        "p",
        "distlock:",
        "{x}",
        "{p}",
        "x",
        "42",
        "ü",
        "é{",
        " ",
        "\t",
    ]);
    prop::collection::vec(fragment, 1..8).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn adversarial_names_never_share_a_key(
        names in prop::collection::vec(adversarial_name(), 2..12),
        prefix in prop::sample::select(vec!["distlock", "", "p", "a:b", "#", "p:#fence"]),
    ) {
        let result = check(prefix, names);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// The lifetime of a fencing counter, as the docs give it (lib.rs and the README, "Keys"):
/// `fence.lua` is where it is set.
#[test]
fn fencing_counters_live_a_day_after_their_last_use() {
    let day_ms = 24 * 3600 * 1000;
    assert!(
        include_str!("../fence.lua").contains(&format!("local FENCE_KEPT_MS = '{day_ms}'")),
        "fence.lua and the docs disagree on the counters' lifetime"
    );
}

#[test]
fn bad_names_are_refused_with_a_reason() {
    let err = |n: &[u8]| LockKey::new("p", n, 16).unwrap_err().to_string();
    assert!(err(b"").contains("empty"));
    assert!(err(&[b'a'; 17]).contains("limit is 16"));
    assert!(err(b"\xff\xfe").contains("not UTF-8"));
}

#[test]
fn long_names_are_shortened_for_display() {
    let long = "x".repeat(1000);
    let k = LockKey::new("p", long.as_bytes(), 4096).unwrap();
    assert!(k.name().len() < 200);
    assert!(k.name().ends_with("(1000 bytes)"));
}

#[test]
fn prefixes_with_braces_are_refused() {
    assert!(validate_prefix("locks").is_ok());
    assert!(validate_prefix("locks#1").is_ok());
    assert!(validate_prefix("lo{cks}").is_err());
}

/// A key says what it names in errors; a set is its members' primitive's set, and each member
/// keeps its own.
#[test]
fn a_key_names_its_primitive() {
    use crate::mode::Primitive;
    let named = key("pool").naming(Primitive::Semaphore).lock_name();
    assert_eq!(
        (named.as_str(), named.primitive()),
        ("pool", Primitive::Semaphore)
    );
    assert_eq!(key("a").lock_name().primitive(), Primitive::Lock);
    let writes = ["b", "a"].map(|n| key(n).naming(Primitive::WriteLock));
    let set = LockKey::set(writes.to_vec()).expect("a set");
    let named = set.lock_name();
    assert_eq!(named.primitive(), Primitive::WriteLockSet);
    assert_eq!(named.as_str(), "[b, a]"); // by Cluster slot
    assert_eq!(
        set.members()[0].lock_name().primitive(),
        Primitive::WriteLock
    );
}
