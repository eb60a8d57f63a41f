//! Shared code of the fuzz targets.
//!
//! A proc-macro crate exports only its macros, so the attribute pipeline of
//! `distlock-macros` is compiled into this crate from its own source files: the same modules,
//! at the crate root as there (they refer to each other through `crate::`), with the
//! macro-free entry points of `distlock-macros/src/fuzz.rs`. Outside a compiler, `proc-macro2`
//! uses its fallback token types. The runtime's entry points are `distlock::__fuzz` (feature
//! `_fuzzing`).

// Parts of the model only the real macro entry (lib.rs) reads.
#[allow(dead_code)]
#[path = "../../distlock-macros/src/args.rs"]
mod args;
#[allow(dead_code)]
#[path = "../../distlock-macros/src/diag.rs"]
mod diag;
#[allow(dead_code)]
#[path = "../../distlock-macros/src/duration.rs"]
mod duration;
#[allow(dead_code)]
#[path = "../../distlock-macros/src/expand/mod.rs"]
mod expand;
#[allow(dead_code)]
#[path = "../../distlock-macros/src/model.rs"]
mod model;
#[allow(dead_code)]
#[path = "../../distlock-macros/src/sig.rs"]
mod sig;
#[allow(dead_code)]
#[path = "../../distlock-macros/src/template.rs"]
mod template;
#[allow(dead_code)]
#[path = "../../distlock-macros/src/validate.rs"]
mod validate;

/// The attribute pipeline's entry points: `key_template`, `duration`, `attribute_args`.
#[path = "../../distlock-macros/src/fuzz.rs"]
pub mod macros;

/// The runtime's entry points: `acquire_reply`, `push_frame`, `answer_stream`.
pub use distlock::__fuzz as runtime;
