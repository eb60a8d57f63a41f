//! Attribute grammar: `name = value, ...` into [`LockArgs`].
//!
//! Each argument is checked on its own here (known name, no duplicate, value
//! of the right shape); relations between arguments and with the fn are left
//! to `validate`. Errors are pushed, not returned, so every bad argument is
//! reported in one build.

use std::collections::BTreeSet;
use std::time::Duration;

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprArray, ExprLit, ExprPath, Ident, Lit, LitStr, Token};

use crate::diag::{did_you_mean, list_code, Errors};
use crate::duration;
use crate::model::{AttrKind, Mode, OnBusy, OnError, OnLost, Spanned};

/// Every argument, in the order the docs and error messages list them.
const ARGUMENTS: &[&str] = &[
    "key",
    "ttl",
    "wait",
    "mode",
    "permits",
    "watchdog",
    "on_busy",
    "on_lost",
    "on_error",
    "max_hold",
    "min_hold",
    "record_name",
    "fencing",
    "replicas",
    "replicas_timeout",
    "client",
    "map_err",
];

/// Names other lock libraries use, mapped to ours, for "did you mean".
const ALIASES: &[(&str, &str)] = &[
    ("name", "key"),
    ("keys", "key"),
    ("lease", "ttl"),
    ("lease_time", "ttl"),
    ("expire", "ttl"),
    ("expiration", "ttl"),
    ("timeout", "wait"),
    ("wait_time", "wait"),
    ("acquire_timeout", "wait"),
    ("renew", "watchdog"),
    ("auto_renew", "watchdog"),
    ("on_lease_lost", "on_lost"),
    ("on_timeout", "on_busy"),
    ("wait_replicas", "replicas"),
    ("sync_replicas", "replicas"),
    ("replica_timeout", "replicas_timeout"),
    ("lock_at_least_for", "min_hold"),
    ("at_least", "min_hold"),
    ("min_duration", "min_hold"),
    ("lock_at_most_for", "ttl"),
    ("on_failure", "on_error"),
    ("trace_key", "record_name"),
    ("record_key", "record_name"),
    ("trace_name", "record_name"),
    ("fence", "fencing"),
    ("fencing_token", "fencing"),
    ("fenced", "fencing"),
    ("limit", "permits"),
    ("max_permits", "permits"),
    ("concurrency", "permits"),
    ("max_concurrent", "permits"),
];

/// The attribute's arguments, each parsed on its own, each keeping its span.
#[derive(Default)]
pub struct LockArgs {
    /// Names that appeared, including ones whose value was invalid, so later
    /// checks can tell "absent" (use the default) from "given but broken"
    /// (already reported; do not compare against a default).
    given: BTreeSet<String>,
    pub key: Option<LitStr>,
    /// `key = [..]`: several names at once, each template checked like `key`'s; the span is
    /// the list's.
    pub keys: Option<Spanned<Vec<LitStr>>>,
    pub ttl: Option<Spanned<Duration>>,
    pub wait: Option<Spanned<Duration>>,
    pub mode: Option<Spanned<Mode>>,
    pub permits: Option<Spanned<u32>>,
    pub watchdog: Option<Spanned<WatchdogArg>>,
    pub on_busy: Option<Spanned<OnBusy>>,
    pub on_lost: Option<Spanned<OnLost>>,
    pub max_hold: Option<Spanned<Duration>>,
    pub replicas: Option<Spanned<u32>>,
    pub replicas_timeout: Option<Spanned<Duration>>,
    pub min_hold: Option<Spanned<Duration>>,
    pub on_error: Option<Spanned<OnError>>,
    pub record_name: Option<Spanned<bool>>,
    pub fencing: Option<Spanned<bool>>,
    pub client: Option<Expr>,
    pub map_err: Option<ExprPath>,
}

impl LockArgs {
    pub fn given(&self, name: &str) -> bool {
        self.given.contains(name)
    }
}

/// `watchdog = true | false | "<period>"` before it is resolved against the ttl.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchdogArg {
    Enabled(bool),
    Period(Duration),
}

/// Parses the attribute's tokens. `None` means the token stream was not even
/// a list of `name = value` (the syntax error is already pushed).
pub fn parse(attr: AttrKind, tokens: TokenStream, errors: &mut Errors) -> Option<LockArgs> {
    let raw = Punctuated::<RawArg, Token![,]>::parse_terminated.parse2(tokens);
    let raw = errors.ok(raw)?;
    let mut args = LockArgs::default();
    for arg in raw {
        errors.ok(args.apply(attr, arg));
    }
    Some(args)
}

/// One `name = value` pair, before its value is interpreted.
struct RawArg {
    name: Ident,
    value: Expr,
}

impl Parse for RawArg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "the key is a named argument: write `key = \"{}\"`",
                    lit.value()
                ),
            ));
        }
        // `parse_any` accepts keywords, so `type = ..` is reported as an
        // unknown argument rather than as a syntax error.
        let name = Ident::parse_any(input).map_err(|error| {
            syn::Error::new(
                error.span(),
                "expected an argument such as `key = \"order:<id>\"`",
            )
        })?;
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                name.span(),
                format!("expected `=` after `{name}`: arguments are written `{name} = value`"),
            ));
        }
        input.parse::<Token![=]>()?;
        if input.is_empty() || input.peek(Token![,]) {
            return Err(input.error(format!("missing value after `{name} =`")));
        }
        Ok(Self {
            name,
            value: input.parse()?,
        })
    }
}

impl LockArgs {
    fn apply(&mut self, attr: AttrKind, arg: RawArg) -> syn::Result<()> {
        let name = arg.name.unraw().to_string();
        if !ARGUMENTS.contains(&name.as_str()) {
            return Err(unknown_argument(attr, &arg.name));
        }
        if name == "mode" && attr == AttrKind::Semaphore {
            return Err(syn::Error::new(
                arg.name.span(),
                "`mode` is not an argument of `#[semaphore]`: a semaphore has its own algorithm (a sorted set of permits on one node or one cluster slot, never a Redlock quorum); remove `mode`",
            ));
        }
        if name == "mode" && attr != AttrKind::Distributed {
            return Err(syn::Error::new(
                arg.name.span(),
                format!(
                    "`mode` is not an argument of `#[{}]`: read/write locks pick their own algorithm (a reader/writer hash on one node or one cluster slot); remove `mode`, or use `#[distributed_lock(mode = ..)]` for an exclusive lock",
                    attr.name()
                ),
            ));
        }
        if name == "permits" && attr != AttrKind::Semaphore {
            return Err(syn::Error::new(
                arg.name.span(),
                format!(
                    "`permits` is not an argument of `#[{}]`, which admits one holder (or readers); to admit up to n holders at once use `#[semaphore(key = .., permits = n)]`",
                    attr.name()
                ),
            ));
        }
        if !self.given.insert(name.clone()) {
            return Err(syn::Error::new(
                arg.name.span(),
                format!("duplicate argument `{name}`: it is already set earlier in this attribute; keep one"),
            ));
        }
        let value = &arg.value;
        match name.as_str() {
            "key" => match peel(value) {
                Expr::Array(list) => self.keys = Some(key_list(list)?),
                _ => self.key = Some(string(&name, value, "order:<id>")?),
            },
            "ttl" => self.ttl = Some(duration(&name, value)?),
            "wait" => self.wait = Some(duration(&name, value)?),
            "max_hold" => self.max_hold = Some(duration(&name, value)?),
            "replicas" => {
                self.replicas = Some(count(&name, value, "it is how many replicas must confirm each acquisition; leave it out to wait for none")?)
            }
            "permits" => {
                self.permits = Some(count(&name, value, "it is how many holders the semaphore admits at once")?)
            }
            "replicas_timeout" => self.replicas_timeout = Some(duration(&name, value)?),
            "min_hold" => self.min_hold = Some(duration(&name, value)?),
            "on_error" => self.on_error = Some(choice(&name, value, &OnError::ALL)?),
            "record_name" => self.record_name = Some(boolean(&name, value)?),
            "fencing" => self.fencing = Some(boolean(&name, value)?),
            "mode" => self.mode = Some(choice(&name, value, &Mode::ALL)?),
            "on_busy" => self.on_busy = Some(choice(&name, value, &OnBusy::ALL)?),
            "on_lost" => self.on_lost = Some(choice(&name, value, &OnLost::ALL)?),
            "watchdog" => self.watchdog = Some(watchdog(value)?),
            "client" => self.client = Some(arg.value),
            "map_err" => self.map_err = Some(path(value)?),
            _ => unreachable!("every name in ARGUMENTS is handled"),
        }
        Ok(())
    }
}

fn valid_arguments(attr: AttrKind) -> impl Iterator<Item = &'static str> {
    ARGUMENTS
        .iter()
        .copied()
        .filter(move |name| *name != "mode" || attr == AttrKind::Distributed)
        .filter(move |name| *name != "permits" || attr == AttrKind::Semaphore)
}

fn unknown_argument(attr: AttrKind, name: &Ident) -> syn::Error {
    let written = name.unraw().to_string();
    let alias = ALIASES
        .iter()
        .find(|(alias, _)| *alias == written)
        .map(|(_, ours)| *ours)
        .filter(|ours| valid_arguments(attr).any(|valid| valid == *ours));
    let suggestion = alias
        .or_else(|| did_you_mean(&written, valid_arguments(attr)))
        .map(|ours| format!("; did you mean `{ours}`?"))
        .unwrap_or_default();
    syn::Error::new(
        name.span(),
        format!(
            "unknown argument `{written}` for `#[{}]`{suggestion} (valid arguments: {})",
            attr.name(),
            list_code(valid_arguments(attr)),
        ),
    )
}

/// Looks through the invisible groups `macro_rules!` wraps around `$e:expr`.
fn peel(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(group) => peel(&group.expr),
        other => other,
    }
}

fn string(name: &str, value: &Expr, example: &str) -> syn::Result<LitStr> {
    match peel(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        Expr::Path(path) if path.path.get_ident().is_some() => {
            let word = path
                .path
                .get_ident()
                .map(Ident::to_string)
                .unwrap_or_default();
            Err(syn::Error::new_spanned(
                value,
                format!("`{name}` takes a string literal: write `{name} = \"{word}\"`"),
            ))
        }
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{name}` takes a string literal, e.g. `{name} = \"{example}\"`"),
        )),
    }
}

/// `key = ["account:<from>", "account:<to>"]`: string literals, at least one, no template
/// twice (one fn would name one lock twice: a slip, not a choice).
fn key_list(list: &ExprArray) -> syn::Result<Spanned<Vec<LitStr>>> {
    let span = list.bracket_token.span.join();
    if list.elems.is_empty() {
        return Err(syn::Error::new(
            span,
            "empty key list: name at least one lock, e.g. `key = [\"account:<from>\", \"account:<to>\"]`",
        ));
    }
    let mut templates: Vec<LitStr> = Vec::with_capacity(list.elems.len());
    let mut errors: Option<syn::Error> = None;
    let mut push = |error: syn::Error| match &mut errors {
        Some(all) => all.combine(error),
        None => errors = Some(error),
    };
    for element in &list.elems {
        let lit = match peel(element) {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => lit,
            _ => {
                push(syn::Error::new_spanned(
                    element,
                    "each key of a list is a string literal, e.g. `key = [\"account:<from>\", \"account:<to>\"]`",
                ));
                continue;
            }
        };
        if templates.iter().any(|t| t.value() == lit.value()) {
            push(syn::Error::new(
                lit.span(),
                format!(
                    "duplicate key `{}` in the list: each template names its lock once; remove one",
                    lit.value()
                ),
            ));
            continue;
        }
        templates.push(lit.clone());
    }
    match errors {
        Some(errors) => Err(errors),
        None => Ok(Spanned::new(templates, span)),
    }
}

/// A whole number of at least 1, e.g. `replicas = 1`; `meaning` says why 0 is refused.
fn count(name: &str, value: &Expr, meaning: &str) -> syn::Result<Spanned<u32>> {
    match peel(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => match int.base10_parse::<u32>() {
            Ok(0) => Err(syn::Error::new(
                int.span(),
                format!("`{name}` must be at least 1: {meaning}"),
            )),
            Ok(n) => Ok(Spanned::new(n, int.span())),
            Err(_) => Err(syn::Error::new(
                int.span(),
                format!("`{name}` takes a small whole number, e.g. `{name} = 1`"),
            )),
        },
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Err(syn::Error::new(
            lit.span(),
            format!(
                "`{name}` takes a number, not a string: write `{name} = {}`",
                lit.value()
            ),
        )),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{name}` takes a whole number literal, e.g. `{name} = 1`"),
        )),
    }
}

fn duration(name: &str, value: &Expr) -> syn::Result<Spanned<Duration>> {
    let lit = match peel(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit,
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            return Err(syn::Error::new(
                int.span(),
                format!(
                    "`{name}` needs a unit: write `{name} = \"{}s\"` (a string; units: {})",
                    int.base10_digits(),
                    duration::UNIT_LIST
                ),
            ))
        }
        Expr::Lit(ExprLit {
            lit: Lit::Float(_), ..
        }) => {
            return Err(syn::Error::new_spanned(
                value,
                format!("`{name}` takes a duration string with a whole number and a unit, e.g. `{name} = \"1500ms\"`"),
            ))
        }
        _ => {
            return Err(syn::Error::new_spanned(
                value,
                format!("`{name}` takes a duration string, e.g. `{name} = \"10s\"` (units: {})", duration::UNIT_LIST),
            ))
        }
    };
    let parsed = duration::parse(&lit.value())
        .map_err(|message| syn::Error::new(lit.span(), format!("invalid `{name}`: {message}")))?;
    Ok(Spanned::new(parsed, lit.span()))
}

fn choice<T: Copy>(
    name: &str,
    value: &Expr,
    options: &[(&'static str, T)],
) -> syn::Result<Spanned<T>> {
    let names = || options.iter().map(|(option, _)| *option);
    let lit = string(name, value, names().next().unwrap_or_default())?;
    let written = lit.value();
    if let Some((_, option)) = options.iter().find(|(option, _)| *option == written) {
        return Ok(Spanned::new(*option, lit.span()));
    }
    let suggestion = did_you_mean(&written, names())
        .map(|option| format!("did you mean \"{option}\"? "))
        .unwrap_or_default();
    let valid = names()
        .map(|option| format!("\"{option}\""))
        .collect::<Vec<_>>()
        .join(", ");
    Err(syn::Error::new(
        lit.span(),
        format!("unknown value \"{written}\" for `{name}`; {suggestion}expected one of {valid}"),
    ))
}

fn watchdog(value: &Expr) -> syn::Result<Spanned<WatchdogArg>> {
    match peel(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(flag),
            ..
        }) => Ok(Spanned::new(WatchdogArg::Enabled(flag.value), flag.span)),
        Expr::Lit(ExprLit {
            lit: Lit::Str(_) | Lit::Int(_),
            ..
        }) => duration("watchdog", value)
            .map(|period| Spanned::new(WatchdogArg::Period(period.value), period.span)),
        _ => Err(syn::Error::new_spanned(
            value,
            "`watchdog` takes `true`, `false` or a renewal period such as `watchdog = \"5s\"`",
        )),
    }
}

fn boolean(name: &str, value: &Expr) -> syn::Result<Spanned<bool>> {
    match peel(value) {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(flag),
            ..
        }) => Ok(Spanned::new(flag.value, flag.span)),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{name}` takes `true` or `false`, e.g. `{name} = true`"),
        )),
    }
}

fn path(value: &Expr) -> syn::Result<ExprPath> {
    match peel(value) {
        Expr::Path(path) => Ok(path.clone()),
        _ => Err(syn::Error::new(
            value.span(),
            "`map_err` takes the path of a fn from `distlock::Error` to your error type, e.g. `map_err = AppError::from_lock`",
        )),
    }
}

#[cfg(test)]
mod tests;
