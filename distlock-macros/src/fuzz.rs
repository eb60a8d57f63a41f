//! Fuzzing entry points: **not an API**. Each runs arbitrary bytes through the attribute's
//! pipeline (parse → validate → expand) outside a compiler, where `proc-macro2` falls back to
//! its own token types. Errors are the expected outcome; a panic is a bug (inside rustc it
//! would be an opaque "proc macro panicked" instead of a diagnostic).
//!
//! A proc-macro crate can export only its macros, so the `cargo fuzz` targets in `fuzz/`
//! include this file and the modules it uses with `#[path]`; here it is compiled for tests
//! only, where [`tests`] runs every entry over the seed corpus and a few thousand
//! pseudo-random inputs, so regressions show without cargo-fuzz.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::LitStr;

use crate::model::AttrKind;
use crate::{duration, expand, template, validate};

/// Fns the attribute is applied to: the binding shapes placeholders can name (plain,
/// extractor, tuple, struct pattern, raw identifier, receiver), none, and a non-async fn.
const ITEMS: &[&str] = &[
    "async fn pay(id: u64, Path(user): Path<u64>, (a, b): (u32, u32)) -> Result<(), E> {}",
    "async fn run(&self, r#type: u8, Foo { x, y: renamed, .. }: Foo) -> Result<u8, E> {}",
    "async fn tick() -> Result<(), E> {}",
    "fn sync(id: u64) {}",
];

/// In `attribute_args` input, separates the attribute's tokens from the text of the item.
pub const ITEM_SEPARATOR: &str = "\n=>\n";

/// The first byte picks the attribute, the fn and whether the literal is written raw; the
/// rest is the key template, parsed alone and then as `key = ".."` of the attribute.
pub fn key_template(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    if let Ok(segments) = template::parse(&text) {
        assert!(!segments.is_empty(), "{text:?} parsed to no segment");
    }
    // A raw literal has a source text equal to its value, so sub-spans are computed.
    let raw = (selector & 0x80 != 0)
        .then(|| syn::parse_str::<LitStr>(&format!("r#\"{text}\"#")).ok())
        .flatten();
    let lit = raw.unwrap_or_else(|| LitStr::new(&text, Span::call_site()));
    pipeline(attr(selector), quote!(key = #lit), item(selector));
}

/// Arbitrary text as a duration, alone (whatever parses must format and parse back to the
/// same value) and as the attribute's durations, where the range and watchdog checks apply.
pub fn duration(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(parsed) = duration::parse(&text) {
        let written = duration::format(parsed);
        assert_eq!(
            duration::parse(&written),
            Ok(parsed),
            "{text:?} formats as {written:?}"
        );
    }
    let lit = LitStr::new(&text, Span::call_site());
    pipeline(
        AttrKind::Distributed,
        quote!(key = "k", ttl = #lit, max_hold = #lit),
        item(0),
    );
    pipeline(
        AttrKind::Read,
        quote!(key = "k", wait = #lit, watchdog = #lit),
        item(0),
    );
}

/// The first byte picks the attribute and the fn; the rest is the attribute's argument list
/// as token text, optionally followed by [`ITEM_SEPARATOR`] and the item's own text.
pub fn attribute_args(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let (args, item_text) = match text.split_once(ITEM_SEPARATOR) {
        Some((args, item)) => (args, Some(item)),
        None => (&*text, None),
    };
    // Text that does not even lex never reaches a proc macro.
    let Ok(args) = args.parse::<TokenStream>() else {
        return;
    };
    let item = match item_text.map(str::parse::<TokenStream>) {
        None => item(selector),
        Some(Ok(item)) => item,
        Some(Err(_)) => return,
    };
    pipeline(attr(selector), args, item);
}

fn attr(selector: u8) -> AttrKind {
    AttrKind::ALL[usize::from(selector) % AttrKind::ALL.len()]
}

fn item(selector: u8) -> TokenStream {
    let text = ITEMS[usize::from(selector / 3) % ITEMS.len()];
    text.parse().expect("the fixed items lex")
}

/// What the attribute does with its input: a model expands to a fn; errors become
/// `compile_error!`s.
fn pipeline(attr: AttrKind, args: TokenStream, item: TokenStream) {
    match validate::analyze(attr, args, item) {
        Ok(model) => {
            let expanded = expand::expand(model);
            if let Err(error) = syn::parse2::<syn::ItemFn>(expanded.clone()) {
                panic!("the expansion is not a fn ({error}): {expanded}");
            }
        }
        Err(errors) => {
            let _ = errors.to_compile_error();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The committed seeds and crash reproducers of one target.
    fn corpus(target: &str) -> Vec<Vec<u8>> {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut inputs = Vec::new();
        for dir in ["seeds", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
                continue;
            };
            for entry in entries.flatten() {
                if let Ok(bytes) = std::fs::read(entry.path()) {
                    inputs.push(bytes);
                }
            }
        }
        inputs
    }

    /// Pieces of the attribute grammar, spliced into seeds to reach past the first error.
    const TOKENS: &[&str] = &[
        "<",
        ">",
        ".",
        ",",
        "=",
        "\"",
        "r#",
        "{",
        "}",
        "(",
        ")",
        "key",
        "ttl",
        "wait",
        "mode",
        "watchdog",
        "on_busy",
        "on_lost",
        "max_hold",
        "replicas",
        "replicas_timeout",
        "client",
        "map_err",
        "self",
        "id",
        "user",
        "a",
        "0",
        "1",
        "4294967296",
        "ms",
        "s",
        "m",
        "h",
        "true",
        "false",
        "redlock",
        "skip",
        "é",
        " ",
        "\\",
        "-",
        "\n=>\n",
    ];

    /// xorshift64*: deterministic, so a failure reproduces, and no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).unwrap_or(0)
        }
    }

    /// The seeds, then `count` inputs: grammar pieces and random bytes, alone or spliced
    /// into a seed.
    fn inputs(seeds: &[Vec<u8>], count: usize) -> Vec<Vec<u8>> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut out = seeds.to_vec();
        for i in 0..count {
            let mut input = seeds
                .get(i % (seeds.len() + 1))
                .cloned()
                .unwrap_or_else(|| vec![rng.next() as u8]);
            for _ in 0..=rng.below(6) {
                let at = rng.below(input.len() + 1);
                match rng.below(4) {
                    0 if at < input.len() => input[at] = rng.next() as u8,
                    1 => {
                        input.truncate(at);
                    }
                    _ => {
                        let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
                        input.splice(at..at, token.iter().copied());
                    }
                }
            }
            out.push(input);
        }
        out
    }

    #[test]
    fn key_templates_never_panic() {
        for input in inputs(&corpus("key_template"), 3000) {
            super::key_template(&input);
        }
    }

    #[test]
    fn durations_never_panic() {
        for input in inputs(&corpus("duration"), 3000) {
            super::duration(&input);
        }
    }

    #[test]
    fn attribute_args_never_panic() {
        for input in inputs(&corpus("attribute_args"), 3000) {
            super::attribute_args(&input);
        }
    }
}
