//! Guides: how to run distlock, choose a deployment, and what it is built and checked to do.
//!
//! The same texts are in the repository's `docs/` directory.

// The guides link to each other with Markdown reference links whose targets are the `.md`
// files (right where the files are read); these definitions come first, so they win on
// docs.rs, where the guides are modules.
macro_rules! guide_links {
    () => {
        "[operations]: crate::guide::operations\n"
    };
}

#[doc = guide_links!()]
#[doc = include_str!("../docs/operations.md")]
pub mod operations {}
