//! The font the charts' text is drawn with. plotters' `ab_glyph` backend draws with TrueType
//! bytes registered at run time; none ships with this crate (no font file is committed), so
//! one is read from `NVSH_PLOT_FONT` (that file only, when set) or else from where Linux
//! distributions install DejaVu Sans or Liberation Sans (`scripts/setup_env.sh` installs
//! Debian's `fonts-dejavu-core`). Without a font the charts are drawn without text, and the
//! caller is told so.

use plotters::style::{register_font, FontStyle};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that names a TrueType (.ttf) font file to use.
pub const FONT_ENV: &str = "NVSH_PLOT_FONT";

/// The family name the font is registered under, and the charts ask for.
pub(crate) const FAMILY: &str = "sans-serif";

/// Where Debian/Ubuntu, Fedora, Arch and openSUSE install DejaVu Sans or Liberation Sans.
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/LiberationSans-Regular.ttf",
];

/// The outcome of looking for a font, once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FontState {
    /// Registered: the charts have text.
    Loaded(PathBuf),
    /// None usable: why, in the user's terms.
    Missing(String),
}

static FONT: OnceLock<FontState> = OnceLock::new();

/// Finds and registers the font on first use; later calls return the same outcome.
pub fn font() -> &'static FontState {
    FONT.get_or_init(|| {
        let mut problems = Vec::new();
        for path in candidates(std::env::var_os(FONT_ENV).map(PathBuf::from)) {
            match load(&path) {
                Ok(()) => return FontState::Loaded(path),
                // A file absent from a well-known path is the usual case, not news.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if std::env::var_os(FONT_ENV).is_some() {
                        problems.push(format!("{FONT_ENV}={}: {e}", path.display()));
                    }
                }
                Err(e) => problems.push(format!("{}: {e}", path.display())),
            }
        }
        FontState::Missing(missing_text(&problems))
    })
}

/// `NVSH_PLOT_FONT` alone when set (a font asked for by name is not silently replaced),
/// else the well-known paths.
fn candidates(env: Option<PathBuf>) -> Vec<PathBuf> {
    match env {
        Some(p) => vec![p],
        None => FONT_PATHS.iter().map(PathBuf::from).collect(),
    }
}

fn load(path: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(path)?;
    // plotters keeps a reference for the life of the process; one font is leaked, once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font(FAMILY, FontStyle::Normal, bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a TrueType or OpenType font",
        )
    })
}

fn missing_text(problems: &[String]) -> String {
    let mut s = format!(
        "no usable font, so the chart has no text (titles, axes, legend); install Debian's \
         fonts-dejavu-core (scripts/setup_env.sh does) or set {FONT_ENV} to a .ttf file"
    );
    if !problems.is_empty() {
        s += &format!(" ({})", problems.join("; "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_replaces_the_well_known_paths() {
        let c = candidates(Some(PathBuf::from("/x/my.ttf")));
        assert_eq!(c, [PathBuf::from("/x/my.ttf")]);
        assert_eq!(candidates(None).len(), FONT_PATHS.len());
    }

    #[test]
    fn a_file_that_is_no_font_is_refused_with_a_reason() {
        let dir = std::env::temp_dir().join(format!("nvsh-plot-font-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.ttf");
        std::fs::write(&bad, b"not a font").unwrap();
        let e = load(&bad).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let text = missing_text(&[format!("{}: {e}", bad.display())]);
        assert!(
            text.contains("fonts-dejavu-core") && text.contains("bad.ttf: not a TrueType"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
