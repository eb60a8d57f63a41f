use super::*;
use quote::quote;

fn model(args: TokenStream, item: TokenStream) -> LockModel {
    analyze(AttrKind::Distributed, args, item).unwrap_or_else(|e| panic!("{e}"))
}

fn messages(attr: AttrKind, args: TokenStream, item: TokenStream) -> Vec<String> {
    analyze(attr, args, item)
        .expect_err("expected errors")
        .into_iter()
        .map(|error| error.to_string())
        .collect()
}

fn pay() -> TokenStream {
    quote!(
        async fn pay(id: u64, Path(user): Path<u64>) -> Result<(), E> {}
    )
}

#[test]
fn fills_defaults() {
    let m = model(quote!(key = "order:<id>"), pay());
    assert!(matches!(m.kind, LockKind::Exclusive { mode } if mode.value == Mode::SetNx));
    assert_eq!(m.ttl.value, DEFAULT_TTL);
    assert_eq!(m.wait.value, DEFAULT_WAIT);
    assert_eq!(m.watchdog.value, Watchdog::Every(Duration::from_secs(10)));
    assert_eq!(m.on_busy.value, OnBusy::Error);
    assert_eq!(m.on_lost.value, OnLost::Cancel);
    assert!(m.max_hold.is_none() && m.client.is_none() && m.map_err.is_none());
    assert_eq!(m.item.sig.ident, "pay");
}

#[test]
fn resolves_template_segments() {
    let m = model(quote!(key = "{o:<user>}:<id.inner.0>"), pay());
    let shapes: Vec<String> = m
        .key
        .segments
        .iter()
        .map(|segment| match segment {
            KeySegment::Literal(text) => text.clone(),
            KeySegment::Placeholder(p) => {
                let fields = p.fields.iter().map(|f| quote!(#f).to_string());
                let path: Vec<String> = std::iter::once(p.root.to_string()).chain(fields).collect();
                format!("[{}]", path.join("."))
            }
        })
        .collect();
    assert_eq!(shapes, ["{o:", "[user]", "}:", "[id.inner.0]"]);
}

#[test]
fn watchdog_variants() {
    let off = model(quote!(key = "k", watchdog = false), pay());
    assert_eq!(off.watchdog.value, Watchdog::Off);
    let on = model(quote!(key = "k", ttl = "9s", watchdog = true), pay());
    assert_eq!(on.watchdog.value, Watchdog::Every(Duration::from_secs(3)));
    let period = model(quote!(key = "k", ttl = "9s", watchdog = "8s"), pay());
    assert_eq!(
        period.watchdog.value,
        Watchdog::Every(Duration::from_secs(8))
    );
}

#[test]
fn self_placeholders_need_a_receiver() {
    let method = quote!(
        async fn run(&self) -> Result<(), E> {}
    );
    assert!(analyze(AttrKind::Read, quote!(key = "<self.id>"), method).is_ok());
    let all = messages(AttrKind::Read, quote!(key = "<self.id>"), pay());
    assert!(
        all[0].contains("`<self.id>` needs a method with a `self` receiver"),
        "{all:?}"
    );
}

#[test]
fn unknown_binding_lists_and_suggests() {
    let all = messages(AttrKind::Distributed, quote!(key = "<usr>:<nope>"), pay());
    assert_eq!(
        all,
        [
            "`<usr>` names no parameter of `pay`; bindings are: id, user; did you mean `<user>`?",
            "`<nope>` names no parameter of `pay`; bindings are: id, user",
        ]
    );
    let none = messages(
        AttrKind::Distributed,
        quote!(key = "<id>"),
        quote!(
            async fn tick() -> Result<(), E> {}
        ),
    );
    assert!(none[0].contains("which has none"), "{none:?}");
}

#[test]
fn reports_argument_and_signature_errors_together() {
    let all = messages(
        AttrKind::Write,
        quote!(tll = "1s", key = "<x>"),
        quote!(
            #[distributed_lock(key = "a")]
            fn f() {}
        ),
    );
    assert_eq!(all.len(), 5, "{all:#?}");
    assert!(all[0].contains("unknown argument `tll`"));
    assert!(all[1].contains("stacked"));
    assert!(all[2].contains("requires an `async fn`"));
    assert!(all[3].contains("must return `Result<T, E>`"));
    assert!(all[4].contains("`<x>` names no parameter"));
}

#[test]
fn same_attribute_twice() {
    let all = messages(
        AttrKind::Distributed,
        quote!(key = "a"),
        quote!(
            #[distlock::distributed_lock(key = "b")]
            async fn f() -> Result<(), E> {}
        ),
    );
    assert_eq!(all.len(), 1);
    assert!(all[0].contains("applied twice"), "{all:?}");
}

#[test]
fn a_semaphore_needs_its_permits() {
    let ok = analyze(
        AttrKind::Semaphore,
        quote!(key = "export:<id>", permits = 4),
        pay(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(ok.kind, LockKind::Semaphore { permits } if permits.value == 4));
    let missing = messages(AttrKind::Semaphore, quote!(key = "export:<id>"), pay());
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].contains("needs `permits = n`"), "{missing:?}");
    // Reported once: a broken value is not also missing.
    let zero = messages(
        AttrKind::Semaphore,
        quote!(key = "export:<id>", permits = 0),
        pay(),
    );
    assert_eq!(zero.len(), 1, "{zero:?}");
    assert!(zero[0].contains("`permits` must be at least 1"), "{zero:?}");
    // With every other problem of the same attribute.
    let all = messages(
        AttrKind::Semaphore,
        quote!(ttl = "0s"),
        quote!(
            fn f() {}
        ),
    );
    assert_eq!(all.len(), 5, "{all:#?}");
}

#[test]
fn missing_key_shows_an_example_from_the_signature() {
    let all = messages(AttrKind::Distributed, quote!(ttl = "1s"), pay());
    assert_eq!(all.len(), 1);
    assert!(
        all[0].contains("#[distributed_lock(key = \"pay:<id>\")]"),
        "{all:?}"
    );
}

#[test]
fn invalid_values_are_not_reported_twice() {
    // An invalid ttl must not also produce "missing"/"period not below ttl".
    let all = messages(
        AttrKind::Distributed,
        quote!(key = "k", ttl = "1x", watchdog = "1h"),
        pay(),
    );
    assert_eq!(all.len(), 1, "{all:?}");
    let key = messages(AttrKind::Distributed, quote!(key = 1), pay());
    assert_eq!(key.len(), 1, "{key:?}");
}

#[test]
fn ttl_within_the_runtime_range() {
    let short = messages(AttrKind::Distributed, quote!(key = "k", ttl = "9ms"), pay());
    assert!(short[0].contains("between 10ms and 720h"), "{short:?}");
    let long = messages(
        AttrKind::Distributed,
        quote!(key = "k", ttl = "721h"),
        pay(),
    );
    assert!(long[0].contains("between 10ms and 720h"), "{long:?}");
    assert_eq!(
        model(quote!(key = "k", ttl = "10ms"), pay()).ttl.value,
        MIN_TTL
    );
    assert_eq!(
        model(quote!(key = "k", ttl = "720h"), pay()).ttl.value,
        MAX_TTL
    );
}

#[test]
fn relational_checks() {
    let zero = messages(
        AttrKind::Distributed,
        quote!(key = "k", ttl = "0s", max_hold = "0ms"),
        pay(),
    );
    assert_eq!(zero.len(), 2, "{zero:?}");
    let period = messages(
        AttrKind::Distributed,
        quote!(key = "k", watchdog = "30s"),
        pay(),
    );
    assert!(
        period[0].contains("below the default ttl of 30s"),
        "{period:?}"
    );
    let zero_period = messages(
        AttrKind::Distributed,
        quote!(key = "k", watchdog = "0s"),
        pay(),
    );
    assert!(
        zero_period[0].contains("watchdog = false"),
        "{zero_period:?}"
    );
}

#[test]
fn rejects_non_fn_items_and_impl_trait() {
    let all = messages(
        AttrKind::Distributed,
        quote!(key = "k"),
        quote!(
            struct S;
        ),
    );
    assert!(
        all[0].contains("can only be applied to an `async fn`"),
        "{all:?}"
    );
    let opaque = messages(
        AttrKind::Distributed,
        quote!(key = "k"),
        quote!(
            async fn f() -> impl Sized {}
        ),
    );
    assert!(opaque[0].contains("`impl Trait`"), "{opaque:?}");
}

#[test]
fn oversized_tuple_index_is_an_error_not_a_panic() {
    let all = messages(
        AttrKind::Distributed,
        quote!(key = "<id.4294967296>"),
        pay(),
    );
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(
        all[0].contains("not a field name or tuple index"),
        "{all:?}"
    );
    assert!(
        model(quote!(key = "<id.4294967295>"), pay())
            .key
            .segments
            .len()
            == 1
    );
}

#[test]
fn a_key_list_checks_every_template_and_takes_every_name_exclusively_or_in_write_mode() {
    let m = model(quote!(key = ["account:<id>", "user:<user>"]), pay());
    let list = m.keys.expect("a list");
    assert_eq!(list.len(), 2);
    assert_eq!(m.key.lit.value(), "account:<id>");
    let redlock = model(quote!(key = ["a", "b"], mode = "redlock"), pay());
    assert!(redlock.keys.is_some());
    let typos = messages(
        AttrKind::Distributed,
        quote!(key = ["account:<idd>", "user:<usr>"]),
        pay(),
    );
    assert_eq!(typos.len(), 2, "{typos:?}");
    assert!(typos[0].contains("`<idd>` names no parameter"), "{typos:?}");
    assert!(typos[1].contains("`<usr>` names no parameter"), "{typos:?}");
    let reentrant = messages(
        AttrKind::Distributed,
        quote!(key = ["a", "b"], mode = "reentrant"),
        pay(),
    );
    assert!(reentrant[0].contains("takes one key"), "{reentrant:?}");
    let read = messages(AttrKind::Read, quote!(key = ["a", "b"]), pay());
    assert!(read[0].contains("`#[read_lock]` takes one key"), "{read:?}");
    assert!(read[0].contains("`#[write_lock(key = [..])]`"), "{read:?}");
    let write = analyze(AttrKind::Write, quote!(key = ["a", "b"]), pay())
        .unwrap_or_else(|e| panic!("a write set: {e}"));
    assert_eq!(write.keys.map(|k| k.len()), Some(2));
}

#[test]
fn members_from_fields() {
    let span = Span::call_site();
    assert!(matches!(
        member("0", span),
        Member::Unnamed(Index { index: 0, .. })
    ));
    assert!(matches!(member("name", span), Member::Named(_)));
    let raw = member("r#type", span);
    assert_eq!(quote!(#raw).to_string(), "r#type");
}

#[test]
fn subspan_falls_back_to_the_literal() {
    let lit: LitStr = syn::parse_quote!("order:<id>");
    // Outside a compiler, or on stable, there are no sub-spans: same span back.
    let span = lit_subspan(&lit, 6..10);
    assert_eq!(format!("{span:?}"), format!("{:?}", lit.span()));
    let escaped: LitStr = syn::parse_quote!("a\tb<id>");
    let _ = lit_subspan(&escaped, 3..7);
}
