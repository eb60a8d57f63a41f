//! Attribute macros for `distlock`: run an `async fn` body only while holding
//! a distributed lock (or a semaphore's permit) on Redis.
//!
//! Use them through the `distlock` crate, which re-exports them. The pipeline
//! for each attribute is parse (`args`, `template`, `duration`) → validate
//! (`validate`, `sig`) → expand (`expand`), with the validated
//! description in `model`.

mod args;
mod diag;
mod duration;
mod expand;
// Entry points for the `cargo fuzz` targets in `fuzz/`, which include this file with
// `#[path]`; compiled here only for its corpus tests.
#[cfg(test)]
mod fuzz;
mod model;
mod sig;
mod template;
mod validate;

use proc_macro::TokenStream;
use quote::ToTokens;

use crate::model::AttrKind;

/// Runs the fn body while holding an exclusive distributed lock.
///
/// ```rust,ignore
/// #[distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s")]
/// async fn pay(id: u64, amount: u64) -> Result<Receipt, AppError> {
///     // at most one caller per order id runs this, across all processes
/// }
/// ```
///
#[doc = include_str!("../docs/arguments.md")]
#[doc = include_str!("behaviour.md")]
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(AttrKind::Distributed, args, item)
}

/// Runs the fn body while holding the shared (read) side of a distributed
/// read/write lock: readers of the same key run together, never alongside a
/// writer. Waiting writers block new readers, so writers are not starved.
///
/// ```rust,ignore
/// #[read_lock(key = "doc:<doc_id>", client = state.locks)]
/// async fn show(
///     State(state): State<App>,
///     Path(doc_id): Path<u64>,
/// ) -> Result<Json<Doc>, AppError> {
///     // any number of readers, no writer of doc:<doc_id>
/// }
/// ```
///
#[doc = include_str!("../docs/arguments.md")]
#[doc = include_str!("behaviour.md")]
#[proc_macro_attribute]
pub fn read_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(AttrKind::Read, args, item)
}

/// Runs the fn body while holding the exclusive (write) side of a distributed
/// read/write lock: no reader and no other writer of the same key runs at the
/// same time.
///
/// ```rust,ignore
/// #[write_lock(key = "doc:<doc_id>", client = state.locks)]
/// async fn edit(
///     State(state): State<App>,
///     Path(doc_id): Path<u64>,
///     Json(body): Json<Doc>,
/// ) -> Result<Json<Doc>, AppError> {
///     // alone on doc:<doc_id>
/// }
/// ```
///
#[doc = include_str!("../docs/arguments.md")]
#[doc = include_str!("behaviour.md")]
#[proc_macro_attribute]
pub fn write_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(AttrKind::Write, args, item)
}

/// Runs the fn body while holding one permit of a distributed counting semaphore: at most
/// `permits` calls with the same key run at once, across every process. `permits` is required.
/// Each permit has a lease of its own, so a crashed holder frees its one permit at its ttl.
///
/// ```rust,ignore
/// #[semaphore(key = "export:<tenant>", permits = 4, ttl = "30s", wait = "10s")]
/// async fn export(tenant: &str) -> Result<Report, AppError> {
///     // at most 4 exports per tenant at a time
/// }
/// ```
///
#[doc = include_str!("../docs/arguments.md")]
#[doc = include_str!("behaviour.md")]
#[proc_macro_attribute]
pub fn semaphore(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(AttrKind::Semaphore, args, item)
}

fn entry(attr: AttrKind, args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match validate::analyze(attr, args.into(), item.clone()) {
        Ok(model) => expand::expand(model).into(),
        Err(errors) => {
            // Re-emitting the fn keeps callers compiling, so the user sees our
            // errors rather than a cascade of "cannot find function".
            let mut out = errors.to_compile_error();
            out.extend(without_lock_attributes(item));
            out.into()
        }
    }
}

/// The item with any further lock attributes removed: they were reported as
/// stacked, and expanding them would only add errors about the same fn.
fn without_lock_attributes(item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(mut function) => {
            function
                .attrs
                .retain(|attribute| validate::lock_attribute(attribute).is_none());
            function.into_token_stream()
        }
        Err(_) => item,
    }
}
