//! Entry points bound from their definitions: the `extern "C"` functions a `.cu` file defines
//! and no header declares (the collective family's), so that a new collective needs no header
//! line. Pure functions of text, shared by build.rs and its tests.

/// Each `extern "C"` definition in `source` (text of a `.cu` file) as (name, declaration): the
/// text from `extern "C"` to the body's `{`, whitespace folded, ending in `;`. Comments are
/// dropped first; a definition must name its function before the first `(`.
pub fn definitions(source: &str) -> Vec<(String, String)> {
    let text = without_comments(source);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("extern \"C\"") {
        rest = &rest[at + "extern \"C\"".len()..];
        // `extern "C" {` opens a block of declarations, not a definition.
        let Some(end) = rest.find(['{', ';']) else {
            break;
        };
        let head = rest[..end].trim();
        if rest[end..].starts_with(';') || !head.ends_with(')') {
            continue;
        }
        let Some(name) = head[..head.find('(').unwrap_or(0)]
            .split_whitespace()
            .last()
            .map(|w| w.trim_start_matches('*'))
        else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        let folded = head.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push((name.to_string(), format!("{folded};")));
    }
    out
}

/// Whether `header` (text of a `.h` file) declares or names function `name` followed by `(`.
pub fn declares(header: &str, name: &str) -> bool {
    let text = without_comments(header);
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].trim_start();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && after.starts_with('(')
    })
}

/// `source` with `//` and `/* */` comments blanked (string literals are not special: device
/// sources put no comment markers inside strings before an entry point).
fn without_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        let (at, close) = match (line, block) {
            (Some(l), Some(b)) if b < l => (b, "*/"),
            (Some(l), _) => (l, "\n"),
            (None, Some(b)) => (b, "*/"),
            (None, None) => {
                out.push_str(rest);
                return out;
            }
        };
        out.push_str(&rest[..at]);
        out.push(' ');
        match rest[at + 2..].find(close) {
            Some(end) => {
                // Keep the newline that ends a line comment.
                let skip = at + 2 + end + if close == "\n" { 0 } else { close.len() };
                rest = &rest[skip..];
            }
            None => return out,
        }
    }
}
