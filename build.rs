//! Records the build as `VCPULAB_BUILD_ID`: the `VCPULAB_BUILD_ID` environment
//! variable when set (e.g. by a CI job building from an sdist), else the git
//! commit the crate is built from (12 hex digits, `.dirty` appended when
//! tracked files differ from it), else `unknown`. Python reads it as
//! `vcpulab._core.__build__` (see python/vcpulab/provenance.py).
//!
//! Also probes `/dev/kvm` for the Rust tests: where it cannot be opened
//! read-write, the build sets `cfg(vcpulab_no_kvm)` and the real-KVM unit
//! tests report themselves ignored, with the reason, instead of passing
//! without running. (`cargo test` builds and runs on the same machine;
//! the probe says nothing about where a wheel is later installed.)

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn from_git() -> String {
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) if !commit.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{commit}.dirty")
            } else {
                commit
            }
        }
        _ => "unknown".to_string(),
    }
}

fn main() {
    let id = match std::env::var("VCPULAB_BUILD_ID").ok().filter(|s| !s.is_empty()) {
        Some(given) => given,
        None => from_git(),
    };
    println!("cargo:rustc-env=VCPULAB_BUILD_ID={id}");
    // recompute when HEAD moves (a commit, a checkout) or the index changes
    for path in ["HEAD", "index", "logs/HEAD"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            if std::path::Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    println!("cargo:rerun-if-env-changed=VCPULAB_BUILD_ID");
    println!("cargo:rustc-check-cfg=cfg(vcpulab_no_kvm)");
    if std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_err() {
        println!("cargo:rustc-cfg=vcpulab_no_kvm");
    }
    println!("cargo:rerun-if-changed=/dev/kvm");
}
