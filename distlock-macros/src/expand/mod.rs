//! Code generation: the validated [`LockModel`] becomes the same fn with its body run under
//! the lock.
//!
//! The signature, attributes, visibility, generics and where-clause are emitted as written;
//! only the block is replaced:
//!
//! ```text
//! <attrs> <vis> async fn name<G>(params) -> Ret where W {
//!     let __distlock_returns = <how to build a Ret from a lock error; checks Ret>;
//!     let __distlock_key = <format_args! of the template, borrowing the parameters;
//!                           for `key = [..]`, an array of them>;
//!     let __distlock_client = <client = expr, or the process default>;
//!     ::distlock::__private::run(__distlock_client, __distlock_key, <Spec>, <on_busy>,
//!                                __distlock_returns, async move {
//!         if false { return ::distlock::__private::anchor::<Ret>(); }
//!         <the original block's statements>
//!     }).await
//! }
//! ```
//!
//! * The key and the client are computed before the `async move` block takes ownership of
//!   the parameters; both own their data afterwards. A fixed key costs no allocation; a key
//!   with placeholders is one `String`. Nothing else is allocated and nothing is sent to
//!   Redis beyond what the lock itself needs (acquire, release).
//! * The never-taken `return` fixes the block's output type to `Ret` before the body is
//!   type-checked, so `?` and `return` in the body infer exactly as in the fn itself, and
//!   since they leave only the inner block, the lock is still released after them.
//! * The body's statements are spliced into that block without the body's own braces: as the
//!   block's tail, `{ Ok(1) }` would set off `unused_braces` on the user's braces, with a
//!   suggestion to delete them from the fn. Without them the body's locals still drop where
//!   they did, at the end of the block, before the release. A body's inner attributes
//!   (`#![allow(..)]`) go inside the fn's braces, where they were written.
//! * Generated locals are `__distlock_`-prefixed with `Span::mixed_site()`, so user code can
//!   neither see nor shadow them; every path starts with `::distlock::__private`.
//! * Type checks (`Result` return type, error conversion, `Display` placeholders, `client`
//!   type, `Default` for `on_busy = "skip"`) are trait bounds in `__private` with
//!   `#[diagnostic::on_unimplemented]` messages, emitted with the span of the user's token
//!   that causes them, so the error points there.

use std::time::Duration;

use proc_macro2::{Delimiter, Group, Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::{
    AttrStyle, GenericArgument, Index, LitStr, Member, PathArguments, ReturnType, Token, Type,
    TypeInfer,
};

use crate::model::{
    KeySegment, KeyTemplate, LockKind, LockModel, Mode, OnBusy, OnError, OnLost, Placeholder,
    Spanned, Watchdog,
};

pub fn expand(model: LockModel) -> TokenStream {
    let private = private();
    let key = Ident::new("__distlock_key", Span::mixed_site());
    let client = Ident::new("__distlock_client", Span::mixed_site());
    let returns = Ident::new("__distlock_returns", Span::mixed_site());
    let ret = return_type(&model);
    let returns_expr = returns_expr(&model, &ret);
    let key_expr = match &model.keys {
        // `key = [..]`: an array of the rendered names, which `run` takes all at once.
        Some(list) => {
            let keys = list.iter().map(key_expr);
            quote!([#(#keys),*])
        }
        None => key_expr(&model.key),
    };
    let client_expr = client_expr(&model);
    let spec = spec(&model);
    let on_busy = on_busy(&model.on_busy, &model.on_error);
    let anchor = anchor(&ret);
    let item = &model.item;
    let (vis, sig) = (&item.vis, &item.sig);
    // syn keeps a body's inner attributes (`#![allow(..)]`) with the fn's own; they go back
    // inside the fn's braces, where they were written.
    let outer = item
        .attrs
        .iter()
        .filter(|a| matches!(a.style, AttrStyle::Outer));
    let inner = item
        .attrs
        .iter()
        .filter(|a| matches!(a.style, AttrStyle::Inner(_)));
    // The block's statements, not the block: `{ Ok(1) }` as the tail of the `async move`
    // block would warn "unnecessary braces" on the user's own braces.
    let body = &item.block.stmts;
    quote! {
        #(#outer)*
        #vis #sig {
            #(#inner)*
            let #returns = #returns_expr;
            let #key = #key_expr;
            let #client = #client_expr;
            #private::run(
                #client,
                #key,
                #spec,
                #on_busy,
                #returns,
                async move {
                    #anchor
                    #(#body)*
                },
            )
            .await
        }
    }
}

/// `::distlock::__private`, resolved where the attribute is used.
fn private() -> TokenStream {
    private_at(Span::call_site())
}

/// `::distlock::__private` carrying `span`, for code whose errors must point at a user token:
/// rustc reports an expression at the span from its first to its last token, so every token
/// of such an expression must carry the user's span.
fn private_at(span: Span) -> TokenStream {
    quote_spanned!(span=> ::distlock::__private)
}

/// The declared return type as generated code may name it: validation guarantees there is
/// one; an `impl Trait` inside it (`Result<impl IntoResponse, E>`) cannot be named in an
/// expression, so it becomes `_` and is inferred from the body.
fn return_type(model: &LockModel) -> Type {
    let mut ty = match &model.item.sig.output {
        ReturnType::Type(_, ty) => (**ty).clone(),
        ReturnType::Default => syn::parse_quote!(()),
    };
    erase_impl_trait(&mut ty);
    ty
}

/// Replaces every `impl Trait` inside `ty` with `_`. (Walks the type kinds an `impl Trait` can
/// sit in within a return type.)
fn erase_impl_trait(ty: &mut Type) {
    match ty {
        Type::ImplTrait(opaque) => {
            let underscore_token = Token![_](opaque.impl_token.span);
            *ty = Type::Infer(TypeInfer { underscore_token });
        }
        Type::Path(path) => {
            if let Some(qself) = &mut path.qself {
                erase_impl_trait(&mut qself.ty);
            }
            for segment in &mut path.path.segments {
                if let PathArguments::AngleBracketed(generics) = &mut segment.arguments {
                    for argument in &mut generics.args {
                        match argument {
                            GenericArgument::Type(ty) => erase_impl_trait(ty),
                            GenericArgument::AssocType(assoc) => erase_impl_trait(&mut assoc.ty),
                            _ => {}
                        }
                    }
                }
            }
        }
        Type::Tuple(tuple) => tuple.elems.iter_mut().for_each(erase_impl_trait),
        Type::Reference(reference) => erase_impl_trait(&mut reference.elem),
        Type::Array(array) => erase_impl_trait(&mut array.elem),
        Type::Slice(slice) => erase_impl_trait(&mut slice.elem),
        Type::Paren(paren) => erase_impl_trait(&mut paren.elem),
        Type::Group(group) => erase_impl_trait(&mut group.elem),
        Type::Ptr(pointer) => erase_impl_trait(&mut pointer.elem),
        _ => {}
    }
}

/// How the return value is built, with the checks on the return type: it is a `Result` and
/// its error converts from `distlock::Error` (reported on the return type), or `map_err` is a
/// `fn(distlock::Error) -> E` (reported on the path).
fn returns_expr(model: &LockModel, ret: &Type) -> TokenStream {
    let span = ret.span();
    let private = private_at(span);
    if model.on_error.value == OnError::Log {
        // `Default` for the return type is the check; its error points at `"log"`.
        let span = model.on_error.span;
        let private = private_at(span);
        return quote_spanned!(span=> #private::returns_logged::<#ret>());
    }
    match &model.map_err {
        None => quote_spanned!(span=> #private::returns::<#ret>()),
        Some(path) => {
            // The call carries the path's span (a signature mismatch is its error); the type
            // argument keeps the return type's (so is "not a `Result`").
            let span = path.span();
            let private = private_at(span);
            quote_spanned!(span=> #private::returns_mapped::<#ret>(#path))
        }
    }
}

/// The never-taken `return` that gives the body's `async move` block the fn's return type.
fn anchor(ret: &Type) -> TokenStream {
    let private = private_at(ret.span());
    let call = quote_spanned!(ret.span()=> #private::anchor::<#ret>());
    quote! {
        if false {
            return #call;
        }
    }
}

/// `format_args!` over the template: literal text (braces escaped) and one `{}` per
/// placeholder. Each placeholder's value is checked and borrowed first, in its own `let`
/// spanned on the placeholder, so a type error (no `Display`, an `Option`) points into the key.
fn key_expr(template: &KeyTemplate) -> TokenStream {
    let private = private();
    let mut format = String::new();
    let mut parts = Vec::new();
    let mut names = Vec::new();
    for segment in &template.segments {
        match segment {
            KeySegment::Literal(text) => {
                format.push_str(&text.replace('{', "{{").replace('}', "}}"));
            }
            KeySegment::Placeholder(placeholder) => {
                format.push_str("{}");
                let name =
                    format_ident!("__distlock_part{}", names.len(), span = Span::mixed_site());
                parts.push(placeholder_part(&name, placeholder));
                names.push(name);
            }
        }
    }
    let format = LitStr::new(&format, template.lit.span());
    if names.is_empty() {
        return quote!(#private::key(#private::format_args!(#format)));
    }
    quote! {
        {
            use #private::Part as _;
            #(#parts)*
            #private::key(#private::format_args!(#format, #(#names),*))
        }
    }
}

/// `let name = Placeholder(&root.field.0).part();`: a borrow of the binding (whose ident keeps
/// the parameter's span, so it resolves to the parameter), checked by `part`.
fn placeholder_part(name: &Ident, placeholder: &Placeholder) -> TokenStream {
    let private = private_at(placeholder.span);
    let root = &placeholder.root;
    // Fields resolve by name alone; a macro context on them keeps rustc from offering to
    // rewrite the key literal when a field is misspelt.
    let fields = placeholder.fields.iter().map(|field| match field {
        Member::Named(name) => {
            let mut name = name.clone();
            name.set_span(name.span().resolved_at(Span::mixed_site()));
            Member::Named(name)
        }
        Member::Unnamed(index) => Member::Unnamed(Index {
            index: index.index,
            span: index.span.resolved_at(Span::mixed_site()),
        }),
    });
    let value = quote_spanned! {placeholder.span=>
        #private::Placeholder(&#root #(.#fields)*).part()
    };
    quote!(let #name = #value;)
}

fn client_expr(model: &LockModel) -> TokenStream {
    let private = private();
    match &model.client {
        Some(expr) => {
            // An invisible group keeps the expression whole (`a + b` stays one operand)
            // without parentheses the user's lints could complain about.
            let span = expr.span();
            let private = private_at(span);
            let mut group = Group::new(Delimiter::None, quote!(#expr));
            group.set_span(span);
            quote_spanned!(span=> #private::client(&#group))
        }
        // Redlock fns take the quorum default, so one process can set a single-node default
        // for its other locks and a quorum default for its Redlock ones.
        None => match &model.kind {
            LockKind::Exclusive { mode } if matches!(mode.value, Mode::Redlock) => {
                quote!(#private::default_quorum_client())
            }
            _ => quote!(#private::default_client()),
        },
    }
}

fn spec(model: &LockModel) -> TokenStream {
    let private = private();
    let kind = match &model.kind {
        LockKind::Exclusive { mode } => match mode.value {
            Mode::SetNx => quote!(SetNx),
            Mode::Reentrant => quote!(Reentrant),
            Mode::Redlock => quote!(Redlock),
        },
        LockKind::Read => quote!(Read),
        LockKind::Write => quote!(Write),
        LockKind::Semaphore { permits } => {
            let permits = Literal::u32_suffixed(permits.value);
            quote!(Semaphore(#permits))
        }
    };
    let ttl = duration(model.ttl.value);
    let wait = duration(model.wait.value);
    let renew_every = optional_duration(match model.watchdog.value {
        Watchdog::Off => None,
        Watchdog::Every(period) => Some(period),
    });
    let max_hold = optional_duration(model.max_hold.as_ref().map(|cap| cap.value));
    let replicas = match model.replicas {
        Some((count, timeout)) => {
            let count = Literal::u32_suffixed(count);
            let timeout = duration(timeout);
            quote!(#private::Option::Some((#count, #timeout)))
        }
        None => quote!(#private::Option::None),
    };
    let min_hold = optional_duration(model.min_hold.as_ref().map(|min| min.value));
    let template = match &model.keys {
        // The list's label in traces and metrics: its templates as written.
        Some(list) => {
            let written: Vec<String> = list.iter().map(|t| t.lit.value()).collect();
            LitStr::new(&format!("[{}]", written.join(", ")), model.key.lit.span())
        }
        None => model.key.lit.clone(),
    };
    let fn_name = model.item.sig.ident.to_string();
    let record_name = model.record_name;
    let fencing = model.fencing;
    let on_lost = match model.on_lost.value {
        OnLost::Cancel => quote!(Cancel),
        OnLost::Continue => quote!(Continue),
    };
    quote! {
        #private::Spec {
            kind: #private::Kind::#kind,
            ttl: #ttl,
            wait: #wait,
            renew_every: #renew_every,
            max_hold: #max_hold,
            replicas: #replicas,
            min_hold: #min_hold,
            on_lost: #private::OnLost::#on_lost,
            template: #template,
            site: ::core::concat!(::core::module_path!(), "::", #fn_name),
            record_name: #record_name,
            fencing: #fencing,
        }
    }
}

fn duration(value: Duration) -> TokenStream {
    let private = private();
    let secs = Literal::u64_suffixed(value.as_secs());
    let nanos = Literal::u32_suffixed(value.subsec_nanos());
    quote!(#private::duration(#secs, #nanos))
}

fn optional_duration(value: Option<Duration>) -> TokenStream {
    let private = private();
    match value {
        Some(value) => {
            let value = duration(value);
            quote!(#private::Option::Some(#value))
        }
        None => quote!(#private::Option::None),
    }
}

/// `"skip"` needs `Default` for the `Ok` type: checked by `busy_skip`, pointing at `"skip"`.
fn on_busy(on_busy: &Spanned<OnBusy>, on_error: &Spanned<OnError>) -> TokenStream {
    let private = private();
    match (on_busy.value, on_error.value) {
        (OnBusy::Error, _) => quote!(#private::busy_error()),
        // A skipped call returns `Default::default()` itself (checked by `returns_logged`).
        (OnBusy::Skip, OnError::Log) => quote!(#private::busy_skip_logged()),
        (OnBusy::Skip, OnError::Return) => {
            let private = private_at(on_busy.span);
            quote_spanned!(on_busy.span=> #private::busy_skip())
        }
    }
}

#[cfg(test)]
mod tests;
