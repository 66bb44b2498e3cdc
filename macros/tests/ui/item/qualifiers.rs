use fused_gemm_macros::fused_gemm;

// No `async`, `const`, `unsafe` or ABI: the launcher is a safe, synchronous enqueue.
#[fused_gemm(epilogue = [bias])]
pub async fn asynchronous() {}

#[fused_gemm(epilogue = [bias])]
pub const fn constant() {}

#[fused_gemm(epilogue = [bias])]
pub unsafe fn not_safe() {}

#[fused_gemm(epilogue = [bias])]
pub extern "C" fn with_abi() {}

fn main() {}
