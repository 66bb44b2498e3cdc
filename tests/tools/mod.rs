//! Finding the CUDA tools that the machine-code tests (`sass.rs`) run on the CPU.

use std::path::PathBuf;
use std::process::Command;

/// The CUDA tool `name`: the path in the environment variable `env_var` if set, else
/// `.tools/<dir>/nvidia/cu13/bin/<name>` (where `scripts/setup.sh` installs it from the PyPI
/// wheel `wheel`), else `name` on `PATH`.
///
/// # Panics
/// When none of them is found, with the command that installs it.
pub fn cuda_tool(name: &str, env_var: &str, dir: &str, wheel: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_var) {
        return PathBuf::from(p);
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(".tools")
        .join(dir)
        .join("nvidia/cu13/bin")
        .join(name);
    if local.exists() {
        return local;
    }
    if Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return PathBuf::from(name);
    }
    panic!(
        "{name} not found. Install it with `scripts/setup.sh` (pip wheel {wheel} into .tools/), \
         or set {env_var}=/path/to/{name}"
    );
}
