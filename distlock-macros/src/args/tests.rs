use super::*;
use quote::quote;

fn parse_ok(attr: AttrKind, tokens: TokenStream) -> LockArgs {
    let mut errors = Errors::default();
    let args = parse(attr, tokens, &mut errors).expect("syntax");
    if let Err(error) = errors.finish() {
        panic!("unexpected error: {error}");
    }
    args
}

fn messages(attr: AttrKind, tokens: TokenStream) -> Vec<String> {
    let mut errors = Errors::default();
    parse(attr, tokens, &mut errors);
    errors
        .finish()
        .expect_err("expected errors")
        .into_iter()
        .map(|error| error.to_string())
        .collect()
}

#[test]
fn parses_every_argument() {
    let args = parse_ok(
        AttrKind::Distributed,
        quote!(
            key = "order:<id>",
            ttl = "10s",
            wait = "0s",
            mode = "redlock",
            watchdog = "2s",
            on_busy = "skip",
            on_lost = "continue",
            max_hold = "1m",
            client = state.locks,
            map_err = AppError::from_lock,
        ),
    );
    assert_eq!(args.key.unwrap().value(), "order:<id>");
    assert_eq!(args.ttl.unwrap().value, Duration::from_secs(10));
    assert_eq!(args.wait.unwrap().value, Duration::ZERO);
    assert_eq!(args.mode.unwrap().value, Mode::Redlock);
    assert_eq!(
        args.watchdog.unwrap().value,
        WatchdogArg::Period(Duration::from_secs(2))
    );
    assert_eq!(args.on_busy.unwrap().value, OnBusy::Skip);
    assert_eq!(args.on_lost.unwrap().value, OnLost::Continue);
    assert_eq!(args.max_hold.unwrap().value, Duration::from_secs(60));
    assert!(matches!(args.client, Some(Expr::Field(_))));
    assert_eq!(args.map_err.unwrap().path.segments.len(), 2);
}

#[test]
fn empty_attribute_parses_to_nothing() {
    let args = parse_ok(AttrKind::Read, quote!());
    assert!(args.key.is_none() && !args.given("key"));
}

#[test]
fn watchdog_accepts_booleans() {
    let args = parse_ok(AttrKind::Write, quote!(watchdog = false));
    assert_eq!(args.watchdog.unwrap().value, WatchdogArg::Enabled(false));
}

#[test]
fn client_accepts_any_expression() {
    for tokens in [
        quote!(client = &LOCKS),
        quote!(client = self.locks),
        quote!(client = get()),
    ] {
        assert!(parse_ok(AttrKind::Distributed, tokens).client.is_some());
    }
}

#[test]
fn unknown_argument_suggests_and_lists() {
    let all = messages(AttrKind::Distributed, quote!(tll = "1s"));
    assert_eq!(all.len(), 1);
    assert!(all[0].contains("unknown argument `tll`"), "{all:?}");
    assert!(all[0].contains("did you mean `ttl`?"), "{all:?}");
    assert!(all[0].contains("`key`, `ttl`, `wait`, `mode`"), "{all:?}");
    let renamed = messages(AttrKind::Distributed, quote!(timeout = "1s"));
    assert!(renamed[0].contains("did you mean `wait`?"), "{renamed:?}");
    let keyword = messages(AttrKind::Distributed, quote!(type = "1s"));
    assert!(
        keyword[0].contains("unknown argument `type`"),
        "{keyword:?}"
    );
}

#[test]
fn read_lock_lists_no_mode() {
    let all = messages(AttrKind::Read, quote!(mdoe = "x"));
    assert!(!all[0].contains("`mode`"), "{all:?}");
    let mode = messages(AttrKind::Write, quote!(mode = "redlock"));
    assert!(mode[0].contains("pick their own algorithm"), "{mode:?}");
}

#[test]
fn permits_belong_to_the_semaphore_and_mode_does_not() {
    let args = parse_ok(AttrKind::Semaphore, quote!(key = "k", permits = 4));
    assert_eq!(args.permits.unwrap().value, 4);
    for attr in [AttrKind::Distributed, AttrKind::Read, AttrKind::Write] {
        let all = messages(attr, quote!(permits = 4));
        assert!(
            all[0].contains("use `#[semaphore(key = .., permits = n)]`"),
            "{all:?}"
        );
        // An alias names `permits` only where it is an argument.
        let alias = messages(attr, quote!(limit = 4));
        assert!(!alias[0].contains("did you mean `permits`"), "{alias:?}");
    }
    let alias = messages(AttrKind::Semaphore, quote!(limit = 4));
    assert!(alias[0].contains("did you mean `permits`?"), "{alias:?}");
    assert!(alias[0].contains("`wait`, `permits`"), "{alias:?}");
    let mode = messages(AttrKind::Semaphore, quote!(mode = "redlock"));
    assert!(
        mode[0].contains("not an argument of `#[semaphore]`"),
        "{mode:?}"
    );
    for (value, expected) in [
        (
            quote!(permits = 0),
            "must be at least 1: it is how many holders",
        ),
        (quote!(permits = "4"), "write `permits = 4`"),
        (quote!(permits = -1), "takes a whole number literal"),
        (quote!(permits = 4294967296), "takes a small whole number"),
    ] {
        let all = messages(AttrKind::Semaphore, value);
        assert!(all[0].contains(expected), "{all:?}");
    }
}

#[test]
fn duplicates_are_reported_once_per_repeat() {
    let all = messages(
        AttrKind::Distributed,
        quote!(ttl = "1s", ttl = "2s", ttl = "3s"),
    );
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|m| m.contains("duplicate argument `ttl`")));
}

#[test]
fn all_errors_are_collected() {
    let all = messages(
        AttrKind::Distributed,
        quote!(
            key = 5,
            ttl = 10,
            wait = "1x",
            mode = "redlok",
            on_busy = skip,
            watchdog = "on",
            map_err = |e| e
        ),
    );
    assert_eq!(all.len(), 7, "{all:#?}");
    assert!(all[0].contains("`key` takes a string literal"));
    assert!(all[1].contains("write `ttl = \"10s\"`"));
    assert!(all[2].contains("unknown unit `x`"));
    assert!(all[3].contains("did you mean \"redlock\"?"));
    assert!(all[4].contains("write `on_busy = \"skip\"`"));
    assert!(all[5].contains("invalid `watchdog`"));
    assert!(all[6].contains("`map_err` takes the path"));
}

#[test]
fn syntax_errors_explain_the_form() {
    let positional = messages(AttrKind::Distributed, quote!("order:<id>"));
    assert!(
        positional[0].contains("write `key = \"order:<id>\"`"),
        "{positional:?}"
    );
    let flag = messages(AttrKind::Distributed, quote!(watchdog));
    assert!(
        flag[0].contains("expected `=` after `watchdog`"),
        "{flag:?}"
    );
    let missing = messages(AttrKind::Distributed, quote!(ttl = , key = "a"));
    assert!(
        missing[0].contains("missing value after `ttl =`"),
        "{missing:?}"
    );
}

#[test]
fn key_takes_a_list_of_distinct_templates() {
    let args = parse_ok(
        AttrKind::Distributed,
        quote!(key = ["account:<from>", "account:<to>"]),
    );
    assert!(args.key.is_none() && args.given("key"));
    let list: Vec<String> = args.keys.unwrap().value.iter().map(LitStr::value).collect();
    assert_eq!(list, ["account:<from>", "account:<to>"]);
    let empty = messages(AttrKind::Distributed, quote!(key = []));
    assert!(empty[0].contains("empty key list"), "{empty:?}");
    let bad = messages(AttrKind::Distributed, quote!(key = ["a", 5, "a", b]));
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad[0].contains("each key of a list is a string literal"));
    assert!(bad[1].contains("duplicate key `a`"));
    assert!(bad[2].contains("each key of a list is a string literal"));
}

#[test]
fn float_durations_suggest_milliseconds() {
    let all = messages(AttrKind::Distributed, quote!(ttl = 1.5));
    assert!(all[0].contains("\"1500ms\""), "{all:?}");
}
