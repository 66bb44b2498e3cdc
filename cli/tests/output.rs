//! Writing `-o PATH`: file modes, symbolic links and non-regular files (unix).
#![cfg(unix)]

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use fused_gemm_cli::output::write_output;

fn write(path: &Path, data: &[u8]) {
    write_output(Some(path), |w| w.write_all(data)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The names in `dir`, sorted (a leftover temporary file would show here).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn a_new_file_gets_the_mode_of_a_normally_created_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    write(&out, b"data");
    let reference = dir.path().join("reference");
    std::fs::File::create(&reference).unwrap();
    // Both are subject to the same umask; a temporary file's 0600 would differ under any
    // umask but 077.
    assert_eq!(mode(&out), mode(&reference), "{:o}", mode(&out));
    assert_eq!(std::fs::read(&out).unwrap(), b"data");
    assert_eq!(names(dir.path()), ["out", "reference"]);
}

#[test]
fn a_replaced_file_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    for m in [0o640, 0o604, 0o664] {
        let out = dir.path().join(format!("out{m:o}"));
        std::fs::write(&out, b"old contents, longer than the new").unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(m)).unwrap();
        write(&out, b"new");
        assert_eq!(mode(&out), m, "{:o}", mode(&out));
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
    }
    assert_eq!(names(dir.path()), ["out604", "out640", "out664"]);
}

#[test]
fn a_symlink_stays_a_link_and_its_target_gets_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/real"), b"old").unwrap();
    std::fs::set_permissions(d.join("sub/real"), std::fs::Permissions::from_mode(0o640)).unwrap();
    // link2 -> link -> sub/real, both relative.
    std::os::unix::fs::symlink("sub/real", d.join("link")).unwrap();
    std::os::unix::fs::symlink("link", d.join("link2")).unwrap();
    write(&d.join("link2"), b"new");
    for l in ["link", "link2"] {
        let meta = std::fs::symlink_metadata(d.join(l)).unwrap();
        assert!(meta.file_type().is_symlink(), "{l} was replaced");
    }
    assert_eq!(
        std::fs::read_link(d.join("link2")).unwrap(),
        Path::new("link")
    );
    assert_eq!(std::fs::read(d.join("sub/real")).unwrap(), b"new");
    assert_eq!(mode(&d.join("sub/real")), 0o640);
    assert_eq!(names(&d.join("sub")), ["real"]);

    // A dangling link: its target is created.
    std::os::unix::fs::symlink("sub/new", d.join("dangling")).unwrap();
    write(&d.join("dangling"), b"created");
    assert!(
        std::fs::symlink_metadata(d.join("dangling"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(d.join("sub/new")).unwrap(), b"created");
    assert_eq!(names(d), ["dangling", "link", "link2", "sub"]);
}

#[test]
fn a_fifo_is_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let fifo = fifo.clone();
        std::thread::spawn(move || tx.send(std::fs::read(fifo).unwrap()));
    }
    // More than a pipe buffer: the writer must wait for the reader.
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    write(&fifo, &data);
    // A timeout instead of a hang if the data went elsewhere (the reader then blocks forever).
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the FIFO's reader got nothing");
    assert_eq!(got, data);
    let meta = std::fs::symlink_metadata(&fifo).unwrap();
    assert!(meta.file_type().is_fifo(), "the FIFO was replaced");
    assert_eq!(names(dir.path()), ["fifo"]);
}

#[test]
fn a_link_loop_or_a_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::os::unix::fs::symlink("b", d.join("a")).unwrap();
    std::os::unix::fs::symlink("a", d.join("b")).unwrap();
    assert!(write_output(Some(&d.join("a")), |w| w.write_all(b"x")).is_err());
    std::fs::create_dir(d.join("dir")).unwrap();
    std::os::unix::fs::symlink("dir", d.join("to-dir")).unwrap();
    let e = write_output(Some(&d.join("to-dir")), |w| w.write_all(b"x")).unwrap_err();
    assert!(e.to_string().contains("directory"), "{e}");
    assert_eq!(names(d), ["a", "b", "dir", "to-dir"]);
    assert_eq!(names(&d.join("dir")), Vec::<String>::new());
}

#[test]
fn the_early_check_follows_links_and_probes_the_directory() {
    use fused_gemm_cli::output::check_output_path;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A dangling link into a missing directory: the check reports it, not the late write.
    std::os::unix::fs::symlink("nodir/x", d.join("dangling")).unwrap();
    let e = check_output_path(&d.join("dangling")).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    // A dangling link into an existing directory, an existing file, a new name: all fine, and
    // the probe leaves nothing behind.
    std::os::unix::fs::symlink("target", d.join("link")).unwrap();
    std::fs::write(d.join("file"), b"old").unwrap();
    for p in ["link", "file", "new"] {
        check_output_path(&d.join(p)).unwrap();
    }
    assert_eq!(names(d), ["dangling", "file", "link"]);
    assert_eq!(std::fs::read(d.join("file")).unwrap(), b"old");
    let e = check_output_path(d).unwrap_err();
    assert!(e.to_string().contains("directory"), "{e}");
}

#[test]
fn dev_null_is_written_in_place() {
    write(Path::new("/dev/null"), b"discarded");
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    fused_gemm_cli::output::check_output_path(Path::new("/dev/null")).unwrap();
}
