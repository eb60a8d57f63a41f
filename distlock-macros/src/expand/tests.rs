//! The expansion's text, checked piece by piece.

use super::*;
use crate::model::AttrKind;
use crate::validate::analyze;

fn expanded(attr: AttrKind, args: TokenStream, item: TokenStream) -> String {
    let model = analyze(attr, args, item).unwrap_or_else(|e| panic!("{e}"));
    expand(model).to_string()
}

fn contains(out: &str, expected: &str) {
    assert!(out.contains(expected), "missing {expected:?} in\n{out}");
}

#[test]
fn builds_the_key_from_literal_text_and_placeholders() {
    let out = expanded(
        AttrKind::Distributed,
        quote!(key = "{order}:<id>:<user.name>"),
        quote!(
            async fn pay(id: u64, user: User) -> Result<(), E> {
                Ok(())
            }
        ),
    );
    contains(&out, "use :: distlock :: __private :: Part as _ ;");
    contains(
        &out,
        "let __distlock_part0 = :: distlock :: __private :: Placeholder (& id) . part () ;",
    );
    contains(
        &out,
        "let __distlock_part1 = :: distlock :: __private :: Placeholder (& user . name) . part () ;",
    );
    contains(
        &out,
        r#"format_args ! ("{{order}}:{}:{}" , __distlock_part0 , __distlock_part1)"#,
    );
}

#[test]
fn a_key_list_is_an_array_of_names_labelled_by_its_templates() {
    let out = expanded(
        AttrKind::Distributed,
        quote!(key = ["account:<from>", "account:<to>"]),
        quote!(
            async fn transfer(from: u64, to: u64) -> Result<(), E> {
                Ok(())
            }
        ),
    );
    contains(&out, "let __distlock_key = [{");
    contains(
        &out,
        r#"format_args ! ("account:{}" , __distlock_part0)) } , {"#,
    );
    contains(&out, "Placeholder (& to) . part ()");
    contains(&out, r#"template : "[account:<from>, account:<to>]""#);
    contains(&out, "Kind :: SetNx");
}

#[test]
fn fixed_keys_skip_the_placeholder_machinery() {
    let out = expanded(
        AttrKind::Write,
        quote!(key = "nightly-report"),
        quote!(
            async fn report() -> Result<(), E> {
                Ok(())
            }
        ),
    );
    contains(
        &out,
        r#"let __distlock_key = :: distlock :: __private :: key (:: distlock :: __private :: format_args ! ("nightly-report")) ;"#,
    );
    assert!(!out.contains("Part as _"), "{out}");
    contains(&out, "Kind :: Write");
}

#[test]
fn spec_carries_every_setting() {
    let out = expanded(
        AttrKind::Distributed,
        quote!(
            key = "k",
            ttl = "1m30s",
            wait = "0s",
            mode = "reentrant",
            watchdog = false,
            max_hold = "250ms",
            on_lost = "continue"
        ),
        quote!(
            async fn f() -> Result<(), E> {
                Ok(())
            }
        ),
    );
    for expected in [
        "kind : :: distlock :: __private :: Kind :: Reentrant",
        "ttl : :: distlock :: __private :: duration (90u64 , 0u32)",
        "wait : :: distlock :: __private :: duration (0u64 , 0u32)",
        "renew_every : :: distlock :: __private :: Option :: None",
        "max_hold : :: distlock :: __private :: Option :: Some (:: distlock :: __private :: duration (0u64 , 250000000u32))",
        "on_lost : :: distlock :: __private :: OnLost :: Continue",
    ] {
        contains(&out, expected);
    }
}

#[test]
fn a_semaphore_carries_its_permits_and_uses_the_process_client() {
    let out = expanded(
        AttrKind::Semaphore,
        quote!(
            key = "export:<tenant>",
            permits = 4,
            ttl = "30s",
            wait = "10s"
        ),
        quote!(
            async fn export(tenant: String) -> Result<(), E> {
                Ok(())
            }
        ),
    );
    contains(
        &out,
        "kind : :: distlock :: __private :: Kind :: Semaphore (4u32)",
    );
    contains(
        &out,
        "let __distlock_client = :: distlock :: __private :: default_client () ;",
    );
    contains(
        &out,
        "wait : :: distlock :: __private :: duration (10u64 , 0u32)",
    );
}

#[test]
fn defaults_use_the_process_client_and_from() {
    let out = expanded(
        AttrKind::Read,
        quote!(key = "doc:<id>"),
        quote!(
            pub(crate) async fn show(id: u64) -> AppResult<Doc> {
                todo!()
            }
        ),
    );
    contains(
        &out,
        "let __distlock_returns = :: distlock :: __private :: returns :: < AppResult < Doc > > () ;",
    );
    contains(
        &out,
        "let __distlock_client = :: distlock :: __private :: default_client () ;",
    );
    contains(&out, "__private :: busy_error ()");
    contains(
        &out,
        "renew_every : :: distlock :: __private :: Option :: Some (:: distlock :: __private :: duration (10u64 , 0u32))",
    );
    contains(
        &out,
        "wait : :: distlock :: __private :: duration (5u64 , 0u32)",
    );
    contains(
        &out,
        "ttl : :: distlock :: __private :: duration (30u64 , 0u32)",
    );
    contains(&out, "kind : :: distlock :: __private :: Kind :: Read");
    contains(
        &out,
        "on_lost : :: distlock :: __private :: OnLost :: Cancel",
    );
    assert!(out.starts_with("pub (crate) async fn show"), "{out}");
}

#[test]
fn explicit_client_map_err_and_skip() {
    let out = expanded(
        AttrKind::Distributed,
        quote!(
            key = "job",
            client = state.locks,
            map_err = AppError::lock,
            on_busy = "skip",
            mode = "redlock"
        ),
        quote!(
            async fn job(state: App) -> Result<Option<u8>, AppError> {
                Ok(None)
            }
        ),
    );
    contains(&out, "__private :: client (& state . locks)");
    contains(
        &out,
        "__private :: returns_mapped :: < Result < Option < u8 > , AppError > > (AppError :: lock)",
    );
    contains(&out, "__private :: busy_skip ()");
    contains(&out, "Kind :: Redlock");
}

#[test]
fn impl_trait_inside_the_return_type_is_inferred() {
    let out = expanded(
        AttrKind::Write,
        quote!(key = "doc"),
        quote!(
            async fn save() -> Result<(StatusCode, impl IntoResponse), AppError> {
                Ok((StatusCode::OK, "saved"))
            }
        ),
    );
    assert!(
        out.starts_with(
            "async fn save () -> Result < (StatusCode , impl IntoResponse) , AppError >"
        ),
        "{out}"
    );
    contains(
        &out,
        "returns :: < Result < (StatusCode , _) , AppError > > ()",
    );
    contains(
        &out,
        "anchor :: < Result < (StatusCode , _) , AppError > > ()",
    );
}

#[test]
fn signature_and_attributes_are_kept() {
    let out = expanded(
        AttrKind::Distributed,
        quote!(key = "<self.id>"),
        quote!(
            #[doc = "docs"]
            #[inline]
            pub async fn run<'a, T: Clone>(&'a self, t: T) -> Result<&'a T, E>
            where
                T: Send,
            {
                Ok(&self.t)
            }
        ),
    );
    assert!(
        out.starts_with("# [doc = \"docs\"] # [inline] pub async fn run < 'a , T : Clone > (& 'a self , t : T) -> Result < & 'a T , E > where T : Send , {"),
        "{out}"
    );
    contains(&out, "Placeholder (& self . id)");
    contains(
        &out,
        "async move { if false { return :: distlock :: __private :: anchor :: < Result < & 'a T , E > > () ; } Ok (& self . t) }",
    );
    contains(
        &out,
        ":: distlock :: __private :: run (__distlock_client , __distlock_key ,",
    );
    assert!(out.ends_with(") . await }"), "{out}");
}

#[test]
fn the_body_is_spliced_without_its_braces_and_inner_attributes_stay_inside() {
    let out = expanded(
        AttrKind::Distributed,
        quote!(key = "k"),
        quote!(
            #[inline]
            async fn one_line() -> Result<u32, E> {
                #![allow(unused_variables)]
                Ok(1)
            }
        ),
    );
    assert!(
        out.starts_with(
            "# [inline] async fn one_line () -> Result < u32 , E > { # ! [allow (unused_variables)] let __distlock_returns"
        ),
        "{out}"
    );
    contains(
        &out,
        "async move { if false { return :: distlock :: __private :: anchor :: < Result < u32 , E > > () ; } Ok (1) }",
    );
}
