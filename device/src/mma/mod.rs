//! Tensor-core matrix multiply-accumulate instructions.

pub mod sm80;
pub mod sm90;
