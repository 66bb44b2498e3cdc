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

/// Lines [`write_jsonl`] formats per task: a few hundred kilobytes of text each.
const JSONL_LINES_PER_TASK: usize = 64;

/// Tasks [`write_jsonl`] formats before writing them, per core: bounds the text held at once.
const JSONL_TASKS_PER_CORE: usize = 8;

/// Writes one JSON object per sentence (see [`Format::Jsonl`]); floats are printed with the
/// shortest representation that reads back to the same f32. Lines are formatted on every core
/// (rayon's global pool), a block at a time, and written in input order: one thread formatted
/// about 35 000 MiniLM rows a second, slower than the GPU embeds them.
///
/// # Errors
/// I/O errors of `w`.
pub fn write_jsonl<S: AsRef<str> + Sync>(
    mut w: impl Write,
    sentences: &[S],
    emb: &Embeddings,
) -> io::Result<()> {
    use rayon::prelude::*;
    let format = |lines: std::ops::Range<usize>| -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        for i in lines {
            let rec = Record {
                index: i,
                text: sentences[i].as_ref(),
                embedding: emb.row(i),
            };
            serde_json::to_writer(&mut buf, &rec)?;
            buf.push(b'\n');
        }
        Ok(buf)
    };
    let block = JSONL_LINES_PER_TASK * JSONL_TASKS_PER_CORE * rayon::current_num_threads();
    for start in (0..sentences.len()).step_by(block) {
        let end = (start + block).min(sentences.len());
        let texts: Vec<Vec<u8>> = (start..end)
            .into_par_iter()
            .step_by(JSONL_LINES_PER_TASK)
            .map(|s| format(s..(s + JSONL_LINES_PER_TASK).min(end)))
            .collect::<io::Result<_>>()?;
        for t in &texts {
            w.write_all(t)?;
        }
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

/// Checks, before any work is done, that `path` can become the output file, as far as that can
/// be known without writing it: where [`write_output`] would replace a file, that the file (if
/// any) is writable and that a temporary file can be created next to it; where it would write
/// in place (stdout, stderr, a FIFO, a device), that it opens for writing. [`write_output`]
/// still reports later failures.
///
/// # Errors
/// [`Error::Io`] naming the path and the reason (a missing directory, a directory given as the
/// file, permissions, a loop of symbolic links).
pub fn check_output_path(path: &Path) -> Result<()> {
    let fail = |e| Error::io("write output", path, e);
    match output_target(path).map_err(fail)? {
        Target::Stream(_) => Ok(()),
        Target::InPlace => open_in_place(path).map(drop).map_err(fail),
        Target::Replace { target, .. } => {
            let parent = parent_dir(&target);
            if !parent.is_dir() {
                return Err(fail(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("directory {} does not exist", parent.display()),
                )));
            }
            temp_builder().tempfile_in(parent).map(drop).map_err(fail)
        }
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Where the bytes for an output path go.
enum Target {
    /// The path is this process's stdout or stderr (`/dev/stdout`, `/proc/self/fd/1`, or a file
    /// the shell redirected a stream to): the data goes through the open stream, so an append
    /// redirection (`>>`) keeps its earlier contents and other output keeps its order.
    Stream(Stream),
    /// An existing FIFO or device: it cannot be replaced by a rename, so it is opened and
    /// written.
    InPlace,
    /// A regular file (or none yet) at `target`, the path with its symbolic links followed:
    /// written by a temporary file renamed over it.
    Replace {
        target: PathBuf,
        existing: Option<std::fs::Metadata>,
    },
}

/// Decides where `path`'s data goes ([`Target`]). An existing regular file must be writable by
/// this process (as a shell's `>` requires), although the rename would not need it.
fn output_target(path: &Path) -> io::Result<Target> {
    // The kernel's view first: it follows `/proc/self/fd` links, which name open files rather
    // than paths.
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            ));
        }
        Ok(m) => {
            if same_file_as(&m, &io::stdout()) {
                return Ok(Target::Stream(Stream::Stdout));
            }
            if same_file_as(&m, &io::stderr()) {
                return Ok(Target::Stream(Stream::Stderr));
            }
            if !m.is_file() {
                return Ok(Target::InPlace);
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let target = resolve_symlinks(path)?;
    let existing = match std::fs::metadata(&target) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(m) = &existing {
        if m.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            ));
        }
        // Opening for writing without truncation changes nothing; it fails where `>` would.
        std::fs::OpenOptions::new().write(true).open(&target)?;
    }
    Ok(Target::Replace { target, existing })
}

/// Whether `m` describes the file that `stream` (stdout or stderr) is open on.
#[cfg(unix)]
fn same_file_as(m: &std::fs::Metadata, stream: &impl std::os::fd::AsFd) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(fd) = stream.as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|s| s.dev() == m.dev() && s.ino() == m.ino())
}

#[cfg(not(unix))]
fn same_file_as<T>(_: &std::fs::Metadata, _: &T) -> bool {
    false
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

fn write_stream(
    stream: Stream,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let (name, result) = match stream {
        Stream::Stdout => {
            let mut w = io::BufWriter::new(io::stdout().lock());
            ("stdout", write(&mut w).and_then(|()| w.flush()))
        }
        Stream::Stderr => {
            let mut w = io::BufWriter::new(io::stderr().lock());
            ("stderr", write(&mut w).and_then(|()| w.flush()))
        }
    };
    result.map_err(|e| Error::io("write", name, e))
}

fn open_in_place(path: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new().write(true).open(path)
}

fn temp_builder() -> tempfile::Builder<'static, 'static> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".fused-gemm-output.");
    builder
}

/// Writes the output to `path`, or to stdout with `path = None`.
///
/// Where the data goes ([`check_output_path`] checks the same, before the work):
/// - a `path` that is this process's stdout or stderr (`/dev/stdout`, or the file a shell
///   redirected it to) is written through that stream;
/// - an existing FIFO or character device is opened and written directly;
/// - otherwise `path` is resolved through its symbolic links (a link stays a link; its target
///   gets the data) and `write` runs into a temporary file next to the target, which is then
///   renamed over it: the file appears complete or not at all. The new file gets the
///   permissions of the file it replaces, or those of a newly created file (0666 minus the
///   umask) when there was none. A file this process may not write is an error, not replaced.
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
        return write_stream(Stream::Stdout, write);
    };
    let fail = |e| Error::io("write output", path, e);
    let (target, existing) = match output_target(path).map_err(fail)? {
        Target::Stream(s) => return write_stream(s, write),
        Target::InPlace => {
            let mut w = io::BufWriter::new(open_in_place(path).map_err(fail)?);
            return write(&mut w).and_then(|()| w.flush()).map_err(fail);
        }
        Target::Replace { target, existing } => (target, existing),
    };
    let mut builder = temp_builder();
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
    let mut out = format!("cosine similarity ({})\n{:>w$}", plural(n, "sentence"), "");
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

/// `"1 sentence"`, `"2 sentences"`, `"2 batches"`: `n` and `noun`, with an `s` unless `n`
/// is 1, `es` after s, x, z, ch and sh (English's regular rule, for the nouns this tool
/// counts; not for words such as "epoch").
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| noun.ends_with(e))
    {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::{Record, plural, write_jsonl};
    use crate::embed::Embeddings;

    /// The parallel formatting writes what one `serde_json` call per line would, in input
    /// order, across several blocks and a partial last task.
    #[test]
    fn jsonl_lines_are_in_input_order_across_blocks() {
        let block = super::JSONL_LINES_PER_TASK
            * super::JSONL_TASKS_PER_CORE
            * rayon::current_num_threads();
        let (count, dim) = (2 * block + 17, 3);
        let sentences: Vec<String> = (0..count).map(|i| format!("s\"{i}\\")).collect();
        let data: Vec<f32> = (0..count * dim).map(|v| v as f32 / 7.0 - 11.0).collect();
        let emb = Embeddings {
            count,
            dim,
            data,
            truncated: Vec::new(),
        };
        let mut got = Vec::new();
        write_jsonl(&mut got, &sentences, &emb).unwrap();
        let mut want = Vec::new();
        for (i, s) in sentences.iter().enumerate() {
            let rec = Record {
                index: i,
                text: s,
                embedding: emb.row(i),
            };
            serde_json::to_writer(&mut want, &rec).unwrap();
            want.push(b'\n');
        }
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }

    #[test]
    fn plural_counts_with_the_right_ending() {
        assert_eq!(plural(1, "batch"), "1 batch");
        assert_eq!(plural(0, "batch"), "0 batches");
        assert_eq!(plural(32, "batch"), "32 batches");
        assert_eq!(plural(2, "sentence"), "2 sentences");
        assert_eq!(plural(1, "sentence"), "1 sentence");
    }
}
