//! Writing embeddings (JSON lines or `.npy`) atomically, and the similarity table.

use std::io::{self, Write};
use std::path::Path;

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

/// Runs `write` into a temporary file next to `path`, then renames it to `path`: the file
/// appears complete or not at all. With `path = None` it writes to stdout instead.
///
/// # Errors
/// [`Error::Io`] when the temporary file cannot be created, written or renamed (the
/// temporary file is removed); errors of `write` wrapped the same way.
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
    let dir = parent_dir(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(".fused-gemm-output.")
        .tempfile_in(dir)
        .map_err(|e| Error::io("write output", path, e))?;
    {
        let mut w = io::BufWriter::new(tmp.as_file_mut());
        write(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| Error::io("write output", path, e))?;
    }
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io("write output", path, e))?;
    tmp.persist(path)
        .map_err(|e| Error::io("write output", path, e.error))?;
    Ok(())
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
