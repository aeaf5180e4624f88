//! PNG files: the check that a path can take a plot before long work, PNG encoding, and a PNG
//! reader for the tests of the crates that draw. Files are written through
//! [`crate::atomic_file`].

use crate::atomic_file::probe_writable;
use std::fs::File;
use std::path::Path;

/// [`probe_writable`] for a plot, which must also be named `*.png`: a typo such as `--plot
/// r.json` must not overwrite the results with an image.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let is_png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !is_png && !path.as_os_str().is_empty() && !path.is_dir() {
        return Err(format!(
            "{} does not end in .png; a plot is a PNG image, so give a name ending in .png",
            path.display()
        ));
    }
    probe_writable(path)
}

/// Encodes an RGB image (3 bytes per pixel, rows top to bottom) as PNG.
pub fn encode(rgb: &[u8], width: u32, height: u32) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(std::io::Error::other)?;
    w.write_image_data(rgb).map_err(std::io::Error::other)?;
    w.finish().map_err(std::io::Error::other)?;
    Ok(out)
}

/// A decoded PNG, as RGB (what the tests of the crates that draw look at).
#[derive(Debug, Clone)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    /// 3 bytes per pixel, rows top to bottom.
    pub rgb: Vec<u8>,
}

impl Image {
    /// The pixel at (x, y).
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = (y as usize * self.width as usize + x as usize) * 3;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    /// Pixels of the rectangle `x0..x1` x `y0..y1` (clipped to the image) whose colour is not
    /// `background`.
    pub fn count_unlike(&self, (x0, x1): (u32, u32), (y0, y1): (u32, u32), bg: [u8; 3]) -> usize {
        let (x1, y1) = (x1.min(self.width), y1.min(self.height));
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| (x, y)))
            .filter(|&(x, y)| self.pixel(x, y) != bg)
            .count()
    }

    /// Pixels of the rectangle that are neither `background` nor grey (r = g = b): the
    /// coloured lines of the series, not the axes, grid or text.
    pub fn count_coloured(&self, (x0, x1): (u32, u32), (y0, y1): (u32, u32)) -> usize {
        let (x1, y1) = (x1.min(self.width), y1.min(self.height));
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| (x, y)))
            .filter(|&(x, y)| {
                let [r, g, b] = self.pixel(x, y);
                !(r == g && g == b)
            })
            .count()
    }
}

/// Reads a PNG file (8-bit RGB or RGBA; alpha is dropped).
pub fn read_png(path: &Path) -> Result<Image, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut dec = png::Decoder::new(std::io::BufReader::new(file));
    dec.set_transformations(png::Transformations::EXPAND);
    let mut reader = dec
        .read_info()
        .map_err(|e| format!("{}: not a PNG file ({e})", path.display()))?;
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| format!("{}: damaged PNG ({e})", path.display()))?;
    buf.truncate(info.buffer_size());
    let rgb = match (info.color_type, info.bit_depth) {
        (png::ColorType::Rgb, png::BitDepth::Eight) => buf,
        (png::ColorType::Rgba, png::BitDepth::Eight) => buf
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        (c, d) => {
            return Err(format!(
                "{}: a {c:?} PNG of {d:?} bits; only 8-bit RGB and RGBA are read",
                path.display()
            ))
        }
    };
    Ok(Image {
        width: info.width,
        height: info.height,
        rgb,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atomic_file::write_atomic;
    use std::path::PathBuf;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nvsh-plot-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_image_round_trips_and_a_failed_write_keeps_the_old_file() {
        let d = dir("png");
        let target = d.join("a.png");
        let rgb: Vec<u8> = (0..4 * 3 * 3).map(|i| i as u8).collect();
        write_atomic(&target, &encode(&rgb, 4, 3).unwrap()).unwrap();
        let img = read_png(&target).unwrap();
        assert_eq!((img.width, img.height, &img.rgb), (4, 3, &rgb));
        assert_eq!(img.pixel(1, 0), [3, 4, 5]);
        assert_eq!(img.count_unlike((0, 4), (0, 3), [0, 1, 2]), 11);
        // Into a directory that does not exist: an error, and nothing left behind.
        let e = write_atomic(&d.join("no/such/dir.png"), b"x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        // Not a PNG: an error naming the file.
        std::fs::write(d.join("b.png"), b"text").unwrap();
        let e = read_png(&d.join("b.png")).unwrap_err();
        assert!(e.contains("b.png: not a PNG file"), "{e}");
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn paths_that_cannot_take_a_plot_are_refused_before_work() {
        let d = dir("writable");
        assert!(check_writable(&d.join("ok.png")).is_ok());
        assert!(check_writable(&d.join("OK.PNG")).is_ok());
        // The check leaves nothing behind.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        let e = check_writable(&d.join("r.json")).unwrap_err();
        assert!(e.contains("r.json does not end in .png"), "{e}");
        let e = check_writable(&d).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let e = check_writable(&d.join("missing/p.png")).unwrap_err();
        assert!(
            e.contains("cannot write") && e.contains("existing, writable directory"),
            "{e}"
        );
        assert!(check_writable(Path::new("")).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
