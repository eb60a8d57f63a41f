//! What a key placeholder may refer to: the names a fn signature binds.
//!
//! Extractor-style parameters (`Path(id): Path<u64>`) bind names inside
//! patterns, so walking only `PatIdent` at the top level would miss exactly the
//! axum handlers this crate targets.

use syn::visit::{self, Visit};
use syn::{FnArg, Ident, PatIdent, Signature, Token};

/// The bindings a fn signature introduces, in parameter order.
#[derive(Debug, Default)]
pub struct Bindings {
    /// The `self` token of a method receiver (`self`, `&self`, `self: Arc<Self>`).
    pub receiver: Option<Token![self]>,
    /// Every name bound by the parameter patterns.
    pub names: Vec<Ident>,
}

impl Bindings {
    pub fn of(sig: &Signature) -> Self {
        let mut collector = Collector::default();
        let mut receiver = None;
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(r) => receiver = Some(r.self_token),
                FnArg::Typed(typed) => collector.visit_pat(&typed.pat),
            }
        }
        Self {
            receiver,
            names: collector.names,
        }
    }

    pub fn find(&self, name: &str) -> Option<&Ident> {
        self.names.iter().find(|ident| *ident == name)
    }

    /// Everything a placeholder root may name, for messages.
    pub fn roots(&self) -> Vec<String> {
        let receiver = self.receiver.map(|_| "self".to_owned());
        receiver
            .into_iter()
            .chain(self.names.iter().map(Ident::to_string))
            .collect()
    }
}

#[derive(Default)]
struct Collector {
    names: Vec<Ident>,
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_pat_ident(&mut self, pat: &'ast PatIdent) {
        self.names.push(pat.ident.clone());
        // Still visit `name @ subpattern`, which binds more names.
        visit::visit_pat_ident(self, pat);
    }

    // Expressions (const blocks, array lengths in nested types) may contain
    // their own patterns, which bind nothing in the fn's scope.
    fn visit_expr(&mut self, _: &'ast syn::Expr) {}

    fn visit_type(&mut self, _: &'ast syn::Type) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(sig: &str) -> Vec<String> {
        let sig: Signature = syn::parse_str(sig).expect("valid signature");
        Bindings::of(&sig).roots()
    }

    #[test]
    fn plain_and_mut_idents() {
        assert_eq!(
            names("fn f(id: u64, mut n: u32, ref r: u8)"),
            ["id", "n", "r"]
        );
        assert_eq!(names("fn f(_: u64, _x: u32)"), ["_x"]);
        assert_eq!(names("fn f()"), Vec::<String>::new());
    }

    #[test]
    fn extractor_patterns() {
        assert_eq!(
            names("fn f(Path(id): Path<u64>, State(state): State<App>, Json(body): Json<Cart>)"),
            ["id", "state", "body"]
        );
        assert_eq!(names("fn f(Path((a, b)): Path<(u32, u32)>)"), ["a", "b"]);
        assert_eq!(
            names("fn f(axum::extract::Path(id): axum::extract::Path<u64>)"),
            ["id"]
        );
    }

    #[test]
    fn tuple_struct_and_ref_patterns() {
        assert_eq!(names("fn f((a, b): (u32, u32))"), ["a", "b"]);
        assert_eq!(
            names("fn f(Foo { x, y: renamed, .. }: Foo)"),
            ["x", "renamed"]
        );
        assert_eq!(names("fn f(&x: &u32, &mut y: &mut u32)"), ["x", "y"]);
        assert_eq!(names("fn f([first, .., last]: [u8; 4])"), ["first", "last"]);
        assert_eq!(
            names("fn f(whole @ Wrapper(inner): Wrapper)"),
            ["whole", "inner"]
        );
    }

    #[test]
    fn nested_combinations() {
        assert_eq!(
            names("fn f(Outer { inner: Inner(a, (b, &c)), d: Some(e), .. }: Outer)"),
            ["a", "b", "c", "e"]
        );
    }

    #[test]
    fn receivers() {
        for sig in [
            "fn f(self)",
            "fn f(&self)",
            "fn f(&mut self)",
            "fn f(mut self)",
            "fn f(self: Arc<Self>)",
            "fn f(&'a self)",
        ] {
            let parsed: Signature = syn::parse_str(sig).unwrap();
            assert!(Bindings::of(&parsed).receiver.is_some(), "{sig}");
        }
        assert_eq!(names("fn f(&self, id: u64)"), ["self", "id"]);
        let free: Signature = syn::parse_str("fn f(id: u64)").unwrap();
        assert!(Bindings::of(&free).receiver.is_none());
    }

    #[test]
    fn types_and_expressions_bind_nothing() {
        assert_eq!(names("fn f(a: [u8; { let hidden = 1; hidden }])"), ["a"]);
    }

    #[test]
    fn find_by_name() {
        let sig: Signature = syn::parse_str("fn f(Path(id): Path<u64>)").unwrap();
        let bindings = Bindings::of(&sig);
        assert!(bindings.find("id").is_some());
        assert!(bindings.find("Path").is_none());
    }
}
