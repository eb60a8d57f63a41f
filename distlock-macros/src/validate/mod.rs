//! Checks the parsed arguments against each other and against the fn, and
//! produces the [`LockModel`] the expansion stage consumes.
//!
//! Every check runs even after an earlier one failed, so one build reports
//! every problem; a `None` from a helper means "already reported".

use std::ops::Range;
use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::{Attribute, Ident, Index, Item, ItemFn, LitStr, Member, ReturnType, Signature, Type};

use crate::args::{self, LockArgs, WatchdogArg};
use crate::diag::{did_you_mean, Errors};
use crate::duration;
use crate::model::{
    AttrKind, KeySegment, KeyTemplate, LockKind, LockModel, Mode, OnBusy, OnError, OnLost,
    Placeholder, Spanned, Watchdog, DEFAULT_REPLICAS_TIMEOUT, DEFAULT_TTL, DEFAULT_WAIT, MAX_TTL,
    MIN_TTL, WATCHDOG_DIVISOR,
};
use crate::sig::Bindings;
use crate::template::{self, Segment};

/// Parses and validates one attribute application: the attribute's own
/// tokens and the item it is attached to.
pub fn analyze(attr: AttrKind, args: TokenStream, item: TokenStream) -> syn::Result<LockModel> {
    let mut errors = Errors::default();
    let args = args::parse(attr, args, &mut errors);
    let model = match syn::parse2::<Item>(item) {
        Ok(Item::Fn(item)) => validate(attr, args, item, &mut errors),
        Ok(other) => {
            errors.push(syn::Error::new_spanned(
                other,
                format!(
                    "`#[{}]` can only be applied to an `async fn` with a body",
                    attr.name()
                ),
            ));
            None
        }
        Err(error) => {
            errors.push(error);
            None
        }
    };
    errors.finish()?;
    model.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            "distlock-macros bug: validation failed without an error; please report it",
        )
    })
}

fn validate(
    attr: AttrKind,
    args: Option<LockArgs>,
    item: ItemFn,
    errors: &mut Errors,
) -> Option<LockModel> {
    check_stacked(attr, &item.attrs, errors);
    let logged = args
        .as_ref()
        .and_then(|a| a.on_error.as_ref())
        .is_some_and(|e| e.value == OnError::Log);
    check_signature(attr, &item.sig, logged, errors);
    let args = args?;
    let bindings = Bindings::of(&item.sig);
    let key = key_template(attr, &args, &item.sig, &bindings, errors);
    let keys = key_list(attr, &args, &item.sig, &bindings, errors);
    let ttl = ttl(&args, errors);
    let watchdog = watchdog(&args, ttl.as_ref(), errors);
    check_max_hold(&args, errors);
    let replicas = replicas(&args, errors);
    check_min_hold(&args, errors);
    check_on_error(&args, errors);
    let kind = match attr {
        AttrKind::Distributed => Some(LockKind::Exclusive {
            mode: args.mode.unwrap_or(Spanned::default_value(Mode::SetNx)),
        }),
        AttrKind::Read => Some(LockKind::Read),
        AttrKind::Write => Some(LockKind::Write),
        AttrKind::Semaphore => permits(&args, errors),
    };
    let (key, keys) = match keys {
        Some(list) => {
            let list = list?;
            (list.first()?.clone(), Some(list))
        }
        None => (key?, None),
    };
    Some(LockModel {
        kind: kind?,
        key,
        keys,
        ttl: ttl?,
        wait: args.wait.unwrap_or(Spanned::default_value(DEFAULT_WAIT)),
        watchdog: watchdog?,
        on_busy: args
            .on_busy
            .unwrap_or(Spanned::default_value(OnBusy::Error)),
        on_lost: args
            .on_lost
            .unwrap_or(Spanned::default_value(OnLost::Cancel)),
        max_hold: args.max_hold,
        replicas: replicas?,
        min_hold: args.min_hold.filter(|m| !m.value.is_zero()),
        on_error: args
            .on_error
            .unwrap_or(Spanned::default_value(OnError::Return)),
        record_name: args.record_name.is_some_and(|r| r.value),
        fencing: args.fencing.is_some_and(|f| f.value),
        client: args.client,
        map_err: args.map_err,
        item,
    })
}

/// The outer attribute sees the ones below it; stacking two lock attributes
/// would nest two acquisitions in an order the user never wrote down.
fn check_stacked(attr: AttrKind, attrs: &[Attribute], errors: &mut Errors) {
    for attribute in attrs {
        let Some(other) = lock_attribute(attribute) else {
            continue;
        };
        let message = if other == attr {
            format!(
                "`#[{}]` is applied twice to this fn; only one lock attribute per fn is supported, so remove one",
                attr.name()
            )
        } else {
            format!(
                "only one lock attribute per fn is supported, but `#[{}]` is stacked with `#[{}]`; keep one (to hold two locks, call a second locked fn from this one)",
                other.name(),
                attr.name()
            )
        };
        errors.push(syn::Error::new_spanned(attribute, message));
    }
}

/// Which lock attribute `attribute` is, judged by the last path segment so
/// `#[distlock::write_lock]` counts too.
pub fn lock_attribute(attribute: &Attribute) -> Option<AttrKind> {
    let last = attribute.path().segments.last()?;
    AttrKind::from_name(&last.ident.to_string())
}

fn check_signature(attr: AttrKind, sig: &Signature, logged: bool, errors: &mut Errors) {
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            format!(
                "`#[{}]` requires an `async fn`: acquiring, renewing and releasing the lock are network calls awaited around the body; write `async fn {}`",
                attr.name(),
                sig.ident
            ),
        ));
    }
    match &sig.output {
        // With `on_error = "log"` a lock error is logged and the fn returns `()`.
        ReturnType::Default if logged => {}
        ReturnType::Default => errors.push(syn::Error::new(
            sig.paren_token.span.close(),
            "a locked fn must return `Result<T, E>` with `E: From<distlock::Error>`, because acquiring the lock can fail; add a return type such as `-> Result<(), MyError>`, or let lock errors be logged with `on_error = \"log\"` (the body is then not run and the fn returns `Default::default()`)",
        )),
        ReturnType::Type(_, ty) if matches!(**ty, Type::ImplTrait(_)) => errors.push(syn::Error::new_spanned(
            ty,
            "a locked fn cannot return `impl Trait`: a lock error must be turned into the return value; return `Result<impl Trait, E>` with `E: From<distlock::Error>`",
        )),
        ReturnType::Type(..) => {}
    }
}

fn key_template(
    attr: AttrKind,
    args: &LockArgs,
    sig: &Signature,
    bindings: &Bindings,
    errors: &mut Errors,
) -> Option<KeyTemplate> {
    let Some(lit) = &args.key else {
        if !args.given("key") {
            errors.push(missing_key(attr, sig, bindings));
        }
        return None;
    };
    template_of(lit, sig, bindings, errors)
}

/// `key = [..]`: each template checked as `key`'s (every error reported), for a lock that may
/// take several names at once: the exclusive `#[distributed_lock]`, as `setnx` or on a
/// `redlock` quorum (`Client::lock_many`), and `#[write_lock]`, the write side of each name's
/// read/write lock (`Client::write_many`). `None` for one key; `Some(None)` once an error is
/// reported.
fn key_list(
    attr: AttrKind,
    args: &LockArgs,
    sig: &Signature,
    bindings: &Bindings,
    errors: &mut Errors,
) -> Option<Option<Vec<KeyTemplate>>> {
    let list = args.keys.as_ref()?;
    let mut ok = true;
    let mode = args.mode.as_ref().filter(|m| m.value == Mode::Reentrant);
    if let Some(mode) = mode {
        errors.push(syn::Error::new(
            mode.span,
            "`mode = \"reentrant\"` takes one key: a list of keys takes every name at once, exclusively (as `setnx`, or `redlock` on a quorum); remove `mode`, or give one key",
        ));
        ok = false;
    }
    if attr != AttrKind::Distributed && attr != AttrKind::Write {
        errors.push(syn::Error::new(
            list.span,
            format!(
                "`#[{}]` takes one key: a list of keys takes every name at once, with `#[distributed_lock(key = [..])]` (exclusive locks) or `#[write_lock(key = [..])]` (the write side of each name's read/write lock: use it where the names are also taken with `#[read_lock]`/`#[write_lock]`, one name, one mode)",
                attr.name()
            ),
        ));
        ok = false;
    }
    let templates: Vec<Option<KeyTemplate>> = list
        .value
        .iter()
        .map(|lit| template_of(lit, sig, bindings, errors))
        .collect();
    Some(
        templates
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .filter(|_| ok),
    )
}

/// One key template, split and resolved against the fn's bindings.
fn template_of(
    lit: &LitStr,
    sig: &Signature,
    bindings: &Bindings,
    errors: &mut Errors,
) -> Option<KeyTemplate> {
    let segments = match template::parse(&lit.value()) {
        Ok(segments) => segments,
        Err(template_errors) => {
            for error in template_errors {
                errors.push(syn::Error::new(
                    lit_subspan(lit, error.range),
                    error.message,
                ));
            }
            return None;
        }
    };
    let mut resolved = Vec::with_capacity(segments.len());
    let mut complete = true;
    for segment in segments {
        match segment {
            Segment::Literal(literal) => resolved.push(KeySegment::Literal(literal.text)),
            Segment::Placeholder(placeholder) => {
                match errors.ok(resolve(&placeholder, lit, sig, bindings)) {
                    Some(placeholder) => resolved.push(KeySegment::Placeholder(placeholder)),
                    None => complete = false,
                }
            }
        }
    }
    complete.then(|| KeyTemplate {
        lit: lit.clone(),
        segments: resolved,
    })
}

fn missing_key(attr: AttrKind, sig: &Signature, bindings: &Bindings) -> syn::Error {
    let example = match bindings.names.first() {
        Some(first) => format!("{}:<{first}>", sig.ident),
        None => sig.ident.to_string(),
    };
    syn::Error::new(
        Span::call_site(),
        format!(
            "`#[{name}]` needs `key = \"...\"`: the name of the lock in Redis, e.g. `#[{name}(key = \"{example}\")]`; `<param>` placeholders are filled from the fn's parameters",
            name = attr.name()
        ),
    )
}

fn resolve(
    placeholder: &template::Placeholder,
    lit: &LitStr,
    sig: &Signature,
    bindings: &Bindings,
) -> syn::Result<Placeholder> {
    let span = lit_subspan(lit, placeholder.range.clone());
    let root = if placeholder.root == "self" {
        let receiver = bindings.receiver.ok_or_else(|| {
            syn::Error::new(
                span,
                format!(
                    "`{}` needs a method with a `self` receiver, but `{}` has none; use a parameter instead",
                    placeholder.written(),
                    sig.ident
                ),
            )
        })?;
        // The receiver's own span makes the generated `self` resolve to it.
        Ident::new("self", receiver.span)
    } else {
        bindings
            .find(&placeholder.root)
            .cloned()
            .ok_or_else(|| unknown_binding(placeholder, span, sig, bindings))?
    };
    let fields = placeholder
        .fields
        .iter()
        .map(|field| member(field, span))
        .collect();
    Ok(Placeholder { root, fields, span })
}

fn unknown_binding(
    placeholder: &template::Placeholder,
    span: Span,
    sig: &Signature,
    bindings: &Bindings,
) -> syn::Error {
    let roots = bindings.roots();
    let written = placeholder.written();
    let fn_name = &sig.ident;
    let message = if roots.is_empty() {
        format!(
            "`{written}` names no parameter of `{fn_name}`, which has none; use a fixed key or add the value as a parameter"
        )
    } else {
        let suggestion = did_you_mean(&placeholder.root, roots.iter().map(String::as_str))
            .map(|name| format!("; did you mean `<{name}>`?"))
            .unwrap_or_default();
        format!(
            "`{written}` names no parameter of `{fn_name}`; bindings are: {}{suggestion}",
            roots.join(", ")
        )
    };
    syn::Error::new(span, message)
}

fn member(field: &str, span: Span) -> Member {
    if let Ok(index) = field.parse::<u32>() {
        return Member::Unnamed(Index { index, span });
    }
    let ident = match field.strip_prefix("r#") {
        Some(raw) => Ident::new_raw(raw, span),
        None => Ident::new(field, span),
    };
    Member::Named(ident)
}

/// The span of `range` (bytes of the literal's value) inside the literal.
///
/// Compilers that cannot point inside a string (stable rustc today) return
/// `None` from `subspan`; the whole literal is the next best place. Escapes
/// shift byte offsets, so a literal whose source text differs from its value
/// also falls back.
fn lit_subspan(lit: &LitStr, range: Range<usize>) -> Span {
    let source = lit.token().to_string();
    let (open, close) = match source.strip_prefix('r') {
        Some(raw) => {
            let hashes = raw.len() - raw.trim_start_matches('#').len();
            (hashes + 2, hashes + 1)
        }
        None => (1, 1),
    };
    let inner = source.get(open..source.len().saturating_sub(close));
    if inner != Some(lit.value().as_str()) {
        return lit.span();
    }
    lit.token()
        .subspan(range.start + open..range.end + open)
        .unwrap_or_else(|| lit.span())
}

fn ttl(args: &LockArgs, errors: &mut Errors) -> Option<Spanned<Duration>> {
    match &args.ttl {
        None if args.given("ttl") => None,
        None => Some(Spanned::default_value(DEFAULT_TTL)),
        Some(ttl) if ttl.value.is_zero() => {
            errors.push(syn::Error::new(
                ttl.span,
                "`ttl` must be greater than zero: a zero lease expires before the body starts; write e.g. `ttl = \"10s\"`",
            ));
            None
        }
        Some(ttl) if ttl.value < MIN_TTL || ttl.value > MAX_TTL => {
            errors.push(syn::Error::new(
                ttl.span,
                format!(
                    "`ttl` must be between {} and {} (distlock::MIN_TTL and MAX_TTL): shorter, the allowance for clock drift eats the lease; longer, a crashed holder blocks everyone for too long (the watchdog renews a short ttl for as long as the body runs)",
                    duration::format(MIN_TTL),
                    duration::format(MAX_TTL),
                ),
            ));
            None
        }
        Some(ttl) => Some(ttl.clone()),
    }
}

fn watchdog(
    args: &LockArgs,
    ttl: Option<&Spanned<Duration>>,
    errors: &mut Errors,
) -> Option<Spanned<Watchdog>> {
    let Some(arg) = &args.watchdog else {
        if args.given("watchdog") {
            return None;
        }
        let period = ttl?.value / WATCHDOG_DIVISOR;
        return Some(Spanned::default_value(Watchdog::Every(period)));
    };
    let span = arg.span;
    let period = match arg.value {
        WatchdogArg::Enabled(false) => return Some(Spanned::new(Watchdog::Off, span)),
        WatchdogArg::Enabled(true) => {
            return Some(Spanned::new(
                Watchdog::Every(ttl?.value / WATCHDOG_DIVISOR),
                span,
            ))
        }
        WatchdogArg::Period(period) => period,
    };
    if period.is_zero() {
        errors.push(syn::Error::new(
            span,
            "the watchdog period must be greater than zero; to turn renewal off write `watchdog = false`",
        ));
        return None;
    }
    // An invalid ttl was reported already; comparing with it would only add noise.
    let ttl = ttl?;
    if period >= ttl.value {
        errors.push(period_not_below_ttl(
            period,
            ttl.value,
            args.ttl.is_none(),
            span,
        ));
        return None;
    }
    Some(Spanned::new(Watchdog::Every(period), span))
}

fn period_not_below_ttl(
    period: Duration,
    ttl: Duration,
    ttl_is_default: bool,
    span: Span,
) -> syn::Error {
    let which = if ttl_is_default { "default ttl" } else { "ttl" };
    syn::Error::new(
        span,
        format!(
            "the watchdog period must be below the {which} of {ttl}, or the lease can expire before it is renewed; got {period}. Write `watchdog = true` to renew every ttl/3 (the default), or give a shorter period",
            ttl = duration::format(ttl),
            period = duration::format(period),
        ),
    )
}

/// `replicas` with its timeout: `replicas_timeout` alone, a zero timeout, and replica
/// acknowledgement on a Redlock quorum (independent masters) are refused.
fn replicas(args: &LockArgs, errors: &mut Errors) -> Option<Option<(u32, Duration)>> {
    let mut ok = true;
    if let Some(timeout) = &args.replicas_timeout {
        if !args.given("replicas") {
            errors.push(syn::Error::new(
                timeout.span,
                "`replicas_timeout` needs `replicas = n`: say how many replicas must confirm each acquisition, e.g. `replicas = 1`",
            ));
            ok = false;
        } else if timeout.value.as_millis() == 0 {
            errors.push(syn::Error::new(
                timeout.span,
                "`replicas_timeout` must be at least 1ms (Redis's WAIT with 0 would wait forever)",
            ));
            ok = false;
        }
    }
    if let (Some(replicas), Some(mode)) = (&args.replicas, &args.mode) {
        if mode.value == Mode::Redlock {
            errors.push(syn::Error::new(
                replicas.span,
                "`replicas` is for a deployment with replicas (one node, Sentinel, Cluster); a Redlock quorum's nodes are independent masters: remove `replicas`, or use another mode",
            ));
            ok = false;
        }
    }
    if !ok || (args.given("replicas") && args.replicas.is_none()) {
        return None;
    }
    Some(args.replicas.as_ref().map(|n| {
        let timeout = args
            .replicas_timeout
            .as_ref()
            .map_or(DEFAULT_REPLICAS_TIMEOUT, |t| t.value);
        (n.value, timeout)
    }))
}

/// `#[semaphore]` needs `permits`: how many holders it admits is no default to guess.
fn permits(args: &LockArgs, errors: &mut Errors) -> Option<LockKind> {
    if let Some(permits) = &args.permits {
        return Some(LockKind::Semaphore {
            permits: permits.clone(),
        });
    }
    if !args.given("permits") {
        errors.push(syn::Error::new(
            Span::call_site(),
            "`#[semaphore]` needs `permits = n`: how many holders it admits at once, e.g. `#[semaphore(key = \"export:<tenant>\", permits = 4)]`",
        ));
    }
    None
}

/// Only reports: a zero `min_hold` fails the whole attribute.
fn check_min_hold(args: &LockArgs, errors: &mut Errors) {
    if let Some(min_hold) = args.min_hold.as_ref().filter(|m| m.value.is_zero()) {
        errors.push(syn::Error::new(
            min_hold.span,
            "`min_hold` must be greater than zero; leave it out to release the lock as soon as the body returns",
        ));
    }
}

/// `map_err` converts lock errors into the fn's error type; with `on_error = "log"` there is
/// none to convert into.
fn check_on_error(args: &LockArgs, errors: &mut Errors) {
    let Some(on_error) = &args.on_error else {
        return;
    };
    if on_error.value == OnError::Log {
        if let Some(map_err) = &args.map_err {
            errors.push(syn::Error::new_spanned(
                map_err,
                "`map_err` has no effect with `on_error = \"log\"`: lock errors are logged, not returned; remove one of the two",
            ));
        }
    }
}

/// Only reports: a zero `max_hold` fails the whole attribute, so the model
/// can take `args.max_hold` as is.
fn check_max_hold(args: &LockArgs, errors: &mut Errors) {
    if let Some(max_hold) = args.max_hold.as_ref().filter(|m| m.value.is_zero()) {
        errors.push(syn::Error::new(
            max_hold.span,
            "`max_hold` must be greater than zero; leave it out for no cap on the hold time",
        ));
    }
}

#[cfg(test)]
mod tests;
