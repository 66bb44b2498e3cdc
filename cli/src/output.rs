//! Writing embeddings (JSON lines or `.npy`) atomically, and the similarity table.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::embed::Embeddings;
use crate::error::{Error, Result};

/// Output format of `embed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON object per sentence and line: `{"index": i, "text": "...", "embedding": [f32; d]}`.
    Jsonl,
    /// A NumPy `.npy` file: little-endian float32 (`<f4`), shape `[sentences, d]`, C order.
    Npy,
}

#[derive(Serialize)]
struct Record<'a> {
    index: usize,
    text: &'a str,
    embedding: &'a [f32],
}

/// Writes one JSON object per sentence (see [`Format::Jsonl`]); floats are printed with the
/// shortest representation that reads back to the same f32.
///
/// # Errors
/// I/O errors of `w`.
pub fn write_jsonl<S: AsRef<str>>(
    mut w: impl Write,
    sentences: &[S],
    emb: &Embeddings,
) -> io::Result<()> {
    for (i, s) in sentences.iter().enumerate() {
        let rec = Record {
            index: i,
            text: s.as_ref(),
            embedding: emb.row(i),
        };
        serde_json::to_writer(&mut w, &rec)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

/// Writes `emb` as a `[count, dim]` float32 `.npy` array (see [`Format::Npy`]).
///
/// # Errors
/// I/O errors of `w`.
pub fn write_npy(w: impl Write, emb: &Embeddings) -> io::Result<()> {
    use npyz::WriterBuilder;
    let mut npy = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[emb.count as u64, emb.dim as u64])
        .writer(w)
        .begin_nd()?;
    npy.extend(emb.data.iter().copied())?;
    npy.finish()
}

/// Checks, before any work is done, that `path` can become the output file: its directory
/// exists and it is not itself a directory. [`write_output`] still reports later failures.
///
/// # Errors
/// [`Error::Io`] naming the path and the reason.
pub fn check_output_path(path: &Path) -> Result<()> {
    let parent = parent_dir(path);
    if !parent.is_dir() {
        return Err(Error::io(
            "write output",
            path,
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("directory {} does not exist", parent.display()),
            ),
        ));
    }
    if path.is_dir() {
        return Err(Error::io(
            "write output",
            path,
            io::Error::new(io::ErrorKind::IsADirectory, "it is a directory"),
        ));
    }
    Ok(())
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes the output to `path`, or to stdout with `path = None`.
///
/// `path` is first resolved through any symbolic links (a link stays a link; its target gets
/// the data). An existing target that is not a regular file (a FIFO, a character device) is
/// opened and written directly. Otherwise `write` runs into a temporary file next to the
/// target, which is then renamed over it: the file appears complete or not at all. The new
/// file gets the permissions of the file it replaces, or those of a newly created file
/// (0666 minus the umask) when there was none.
///
/// # Errors
/// [`Error::Io`] when `path` cannot be resolved or opened, or the temporary file cannot be
/// created, written or renamed (the temporary file is removed); errors of `write` wrapped the
/// same way.
pub fn write_output(
    path: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let Some(path) = path else {
        let stdout = io::stdout();
        let mut lock = io::BufWriter::new(stdout.lock());
        return write(&mut lock)
            .and_then(|()| lock.flush())
            .map_err(|e| Error::io("write", "stdout", e));
    };
    let fail = |e| Error::io("write output", path, e);
    let target = resolve_symlinks(path).map_err(fail)?;
    let existing = match std::fs::metadata(&target) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(fail(e)),
    };
    if let Some(m) = existing.as_ref().filter(|m| !m.is_file()) {
        if m.is_dir() {
            return Err(fail(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            )));
        }
        // A FIFO or device cannot be replaced by a rename: the data must go into it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .map_err(fail)?;
        let mut w = io::BufWriter::new(file);
        return write(&mut w).and_then(|()| w.flush()).map_err(fail);
    }
    let mut builder = tempfile::Builder::new();
    builder.prefix(".fused-gemm-output.");
    // The temporary file's default 0600 would stick to the output after the rename. Set-id
    // bits are dropped, as a write by another user would.
    #[cfg(unix)]
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        let mode = existing
            .as_ref()
            .map_or(0o666, |m| m.permissions().mode() & 0o777);
        let perms = std::fs::Permissions::from_mode(mode);
        builder.permissions(perms.clone());
        perms
    };
    let mut tmp = builder.tempfile_in(parent_dir(&target)).map_err(fail)?;
    #[cfg(unix)]
    if existing.is_some() {
        // Creation applied the umask; the replaced file's mode is kept exactly.
        tmp.as_file().set_permissions(mode).map_err(fail)?;
    }
    {
        let mut w = io::BufWriter::new(tmp.as_file_mut());
        write(&mut w).and_then(|()| w.flush()).map_err(fail)?;
    }
    tmp.as_file().sync_all().map_err(fail)?;
    tmp.persist(&target).map_err(|e| fail(e.error))?;
    Ok(())
}

/// `path` with every symbolic link along the final component followed (not the directories
/// above it: the rename happens in the directory that holds the real file). A dangling link
/// resolves to its missing target, which is then created.
fn resolve_symlinks(path: &Path) -> io::Result<PathBuf> {
    // As the kernel's limit on nested links (ELOOP).
    const MAX_LINKS: usize = 40;
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&p)?;
                p = parent_dir(&p).join(link);
            }
            Ok(_) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// The cosine-similarity matrix as a text table: a header of column indices, one row per
/// sentence with 4 decimals, then a legend mapping indices to (shortened) sentences.
pub fn similarity_table<S: AsRef<str>>(sentences: &[S], emb: &Embeddings) -> String {
    let n = emb.count;
    let m = emb.cosine_matrix();
    let w = format!("[{}]", n.saturating_sub(1)).len().max(7);
    let mut out = format!("cosine similarity ({n} sentences)\n{:>w$}", "");
    for j in 0..n {
        out += &format!(" {:>w$}", format!("[{j}]"));
    }
    out.push('\n');
    for i in 0..n {
        out += &format!("{:>w$}", format!("[{i}]"));
        for j in 0..n {
            out += &format!(" {:>w$.4}", m[i * n + j]);
        }
        out.push('\n');
    }
    for (i, s) in sentences.iter().enumerate() {
        out += &format!("[{i}] {}\n", shorten(s.as_ref(), 70));
    }
    out
}

fn shorten(s: &str, max_chars: usize) -> String {
    let one_line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max_chars {
        return one_line;
    }
    let mut t: String = one_line.chars().take(max_chars - 1).collect();
    t.push('…');
    t
}
