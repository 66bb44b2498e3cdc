//! Reading input sentences: one per line from a file or stdin.

use crate::error::{Error, Result};

/// Splits `bytes` into lines (`\n`, with a trailing `\r` removed) and checks that each is
/// UTF-8. A final newline does not start another line, so an empty input has no lines and
/// `"\n"` has one empty line. `source_name` (`stdin` or a path) is used in errors.
///
/// # Errors
/// [`Error::InvalidUtf8`] naming the first line (1-based) that is not valid UTF-8.
pub fn split_lines(bytes: &[u8], source_name: &str) -> Result<Vec<String>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    body.split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            String::from_utf8(line.to_vec()).map_err(|_| Error::InvalidUtf8 {
                source_name: source_name.to_owned(),
                line: i + 1,
            })
        })
        .collect()
}

/// Reads the lines of the file at `path` (see [`split_lines`]).
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; [`Error::InvalidUtf8`].
pub fn read_lines_from_file(path: &std::path::Path) -> Result<Vec<String>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("read input file", path, e))?;
    split_lines(&bytes, &path.display().to_string())
}

/// Reads all of `reader` and splits it into lines (see [`split_lines`]).
///
/// # Errors
/// [`Error::Io`] when reading fails; [`Error::InvalidUtf8`].
pub fn read_lines_from(mut reader: impl std::io::Read, source_name: &str) -> Result<Vec<String>> {
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", source_name, e))?;
    split_lines(&bytes, source_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_blank_lines_and_drop_one_final_newline() {
        assert!(split_lines(b"", "t").unwrap().is_empty());
        assert_eq!(split_lines(b"\n", "t").unwrap(), [""]);
        assert_eq!(split_lines(b"a\r\n\n  b", "t").unwrap(), ["a", "", "  b"]);
        assert_eq!(split_lines(b"a\nb\n", "t").unwrap(), ["a", "b"]);
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let e = split_lines(b"ok\nfine\nbad \xff\xfe\n", "stdin").unwrap_err();
        assert_eq!(e.to_string(), "stdin: line 3 is not valid UTF-8");
    }
}
