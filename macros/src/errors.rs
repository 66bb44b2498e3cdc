//! Error accumulation: every mistake is reported, not only the first (serde_derive's `Ctxt`).

use proc_macro2::Span;

#[derive(Default)]
pub struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.push_err(syn::Error::new(span, msg));
    }

    pub fn push_err(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// All errors pushed, combined into one (`None` when there were none).
    pub fn into_error(self) -> Option<syn::Error> {
        self.0
    }
}
