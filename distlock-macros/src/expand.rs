//! Code generation. PLACEHOLDER until the expansion stage lands.
//!
//! It must never emit the fn on its own: that would run the body without the
//! lock. Until real code generation exists, the fn is emitted together with a
//! compile error, so nothing built with the attribute links.

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::LockModel;

pub fn expand(model: LockModel) -> TokenStream {
    let item = &model.item;
    quote! {
        #item
        ::core::compile_error!("distlock-macros: code generation is not implemented yet");
    }
}
