//! The sparse bench's selection kernels alone, on this PE's GPU: exact top-k by magnitude and
//! threshold compaction ([`nvshmem::TopK`]) at each density, and a device-to-device copy of the
//! same gradient as the memory's speed (it reads and writes every element once).
//!
//! Checking: the gradient holds normal values rounded to a grid of 2^-12 ([`grid_normal`]), so
//! magnitudes repeat as in a real gradient's low bits, and ties are taken by the kernels' rule
//! (the lower index). After the timed calls each selection runs once more into a set poisoned
//! with NaN values and index -1, and its pairs must equal the host's selection bit for bit:
//! top-k, the `k` largest magnitudes (ties to the lower index) in index order; threshold, every
//! element at or above the k-th largest magnitude, in index order. The copy is compared with
//! the gradient.

use crate::bench::time_calls;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use nvshmem::tools::size_label;
use nvshmem::{Error, HostSparse, Nvshmem, Result, SparseSet, SparseValue, TopK};
use std::sync::Arc;

/// One timed row: the method's name, the density, the pairs selected (the copy: elements),
/// microseconds per call.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    pub method: &'static str,
    pub density: f64,
    pub k: usize,
    pub us: f64,
}

/// Method names of the rows.
pub const TOPK_ROW: &str = "select: top-k";
pub const THRESHOLD_ROW: &str = "select: threshold";
pub const COPY_ROW: &str = "copy (memory)";

/// A normal value (Box-Muller over the hash's two halves) rounded to a multiple of 2^-12 and
/// kept within +-8: exact in f32, and sums of a few stay exact.
pub fn grid_normal(h: u64) -> f64 {
    let u1 = ((h >> 32) as f64 + 0.5) / 4294967296.0;
    let u2 = ((h & 0xffff_ffff) as f64) / 4294967296.0;
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (z.clamp(-8.0, 8.0) * 4096.0).round() / 4096.0
}

/// The key the kernels order by: the bits of |v| as f32 (monotone in the magnitude; -0 and +0
/// alike).
fn key<T: SparseValue>(v: T) -> u32 {
    (v.to_f64() as f32).abs().to_bits()
}

/// Every element's key, computed once per gradient for all its selections.
pub fn keys_of<T: SparseValue>(host: &[T]) -> Vec<u32> {
    host.iter().map(|&v| key(v)).collect()
}

/// The host's top-k of `host`: the `k` largest magnitudes, ties to the lower index, in index
/// order; and the k-th largest key (0 when k = 0). `keys`: [`keys_of`] `host`.
pub fn host_topk<T: SparseValue>(host: &[T], keys: &[u32], k: usize) -> (HostSparse<T, i32>, u32) {
    let k = k.min(host.len());
    if k == 0 {
        return (HostSparse::empty(), 0);
    }
    let mut order: Vec<u32> = (0..host.len() as u32).collect();
    let by = |a: &u32, b: &u32| keys[*b as usize].cmp(&keys[*a as usize]).then(a.cmp(b));
    order.select_nth_unstable_by(k - 1, by);
    let kth = keys[order[k - 1] as usize];
    let mut idx: Vec<u32> = order[..k].to_vec();
    idx.sort_unstable();
    let set = HostSparse {
        count: k as u64,
        idx: idx.iter().map(|&i| i as i32).collect(),
        val: idx.iter().map(|&i| host[i as usize]).collect(),
    };
    (set, kth)
}

/// The host's threshold selection: every element whose key is at least `min_key`, in index
/// order. `keys`: [`keys_of`] `host`.
pub fn host_threshold<T: SparseValue>(
    host: &[T],
    keys: &[u32],
    min_key: u32,
) -> HostSparse<T, i32> {
    let idx: Vec<i32> = (0..host.len())
        .filter(|&i| keys[i] >= min_key)
        .map(|i| i as i32)
        .collect();
    HostSparse {
        count: idx.len() as u64,
        val: idx.iter().map(|&i| host[i as usize]).collect(),
        idx,
    }
}

/// The buffers the rows reuse across sizes: the selection workspace, one set of capacity
/// `max_n` and a copy target.
pub struct SelectBuffers<T: SparseValue> {
    topk: TopK,
    set: SparseSet<T, i32>,
    copy: CudaSlice<T>,
}

impl<T: SparseValue> SelectBuffers<T> {
    /// For gradients of up to `max_n` elements.
    pub fn new(stream: &Arc<CudaStream>, max_n: usize) -> Result<Self> {
        Ok(SelectBuffers {
            topk: TopK::new(stream, max_n)?,
            set: SparseSet::new(stream, max_n.max(1))?,
            copy: stream.alloc_zeros(max_n.max(1))?,
        })
    }
}

/// Rows for gradient `g` (a copy of `host`, `bytes` long) at each density: top-k, threshold at
/// top-k's k-th magnitude, then the copy; each checked as the module says.
#[allow(clippy::too_many_arguments)]
pub fn select_rows<T: SparseValue, G: DevicePtr<T>>(
    nv: &Nvshmem,
    stream: &Arc<CudaStream>,
    bufs: &mut SelectBuffers<T>,
    g: &G,
    host: &[T],
    bytes: usize,
    densities: &[f64],
    (warmup, reps): (usize, usize),
) -> Result<Vec<Timed>> {
    let n = host.len();
    let row = |method, density, k, us| Timed {
        method,
        density,
        k,
        us,
    };
    let mut rows = Vec::new();
    let keys = keys_of(host);
    for &density in densities {
        let k = ((density * n as f64).ceil() as usize).clamp(1, n.max(1));
        let (want_topk, kth) = host_topk(host, &keys, k);
        let SelectBuffers { topk, set, .. } = bufs;
        let us = time_calls(nv, stream, warmup, reps, || {
            topk.run(g, k, set, stream).map(|_| ())
        })?;
        poison(set, stream)?;
        topk.run(g, k, set, stream)?;
        check(TOPK_ROW, density, bytes, &set.to_host(stream)?, &want_topk)?;
        rows.push(row(TOPK_ROW, density, k, us));

        let t = f32::from_bits(kth);
        let want = host_threshold(host, &keys, kth);
        let us = time_calls(nv, stream, warmup, reps, || {
            topk.threshold(g, t, set, stream)
        })?;
        poison(set, stream)?;
        topk.threshold(g, t, set, stream)?;
        check(THRESHOLD_ROW, density, bytes, &set.to_host(stream)?, &want)?;
        rows.push(row(THRESHOLD_ROW, density, want.idx.len(), us));
    }
    let mut dst = bufs.copy.slice_mut(0..n);
    let us = time_calls(nv, stream, warmup, reps, || {
        stream.memcpy_dtod(g, &mut dst)?;
        Ok(())
    })?;
    let got = stream.clone_dtoh(&bufs.copy.slice(0..n))?;
    if let Some(i) = (0..n).find(|&i| got[i].to_f64().to_bits() != host[i].to_f64().to_bits()) {
        return Err(mismatch(
            COPY_ROW,
            1.0,
            bytes,
            format!(
                "element {i} is {} not {}",
                got[i].to_f64(),
                host[i].to_f64()
            ),
        ));
    }
    rows.push(row(COPY_ROW, 1.0, n, us));
    Ok(rows)
}

/// Every pair of the set NaN with index -1, its count past any selection.
fn poison<T: SparseValue>(set: &mut SparseSet<T, i32>, stream: &Arc<CudaStream>) -> Result<()> {
    let cap = set.capacity();
    let (mut idx, mut val, count) = set.parts_mut();
    stream.memcpy_htod(&vec![-1i32; cap], &mut idx)?;
    stream.memcpy_htod(&vec![T::of_f32(f32::NAN); cap], &mut val)?;
    stream.memcpy_htod(&[u64::MAX], count)?;
    Ok(())
}

fn check<T: SparseValue>(
    what: &str,
    density: f64,
    bytes: usize,
    got: &HostSparse<T, i32>,
    want: &HostSparse<T, i32>,
) -> Result<()> {
    match got.difference(want) {
        None => Ok(()),
        Some(d) => Err(mismatch(what, density, bytes, d)),
    }
}

fn mismatch(what: &str, density: f64, bytes: usize, detail: String) -> Error {
    Error::Io {
        what: "sparse bench check".into(),
        message: format!(
            "{what} at density {density}, {}: differs from the host's selection ({detail})",
            size_label(bytes)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_selections_take_ties_to_the_lower_index_in_index_order() {
        let v: Vec<f32> = vec![1.0, -3.0, 2.0, 3.0, -2.0, 0.5];
        let keys = keys_of(&v);
        let (t, kth) = host_topk(&v, &keys, 3);
        // |3| at 1 and 3, then the first |2| (index 2) of the tie with index 4.
        assert_eq!(t.idx, vec![1, 2, 3]);
        assert_eq!(t.val, vec![-3.0, 2.0, 3.0]);
        assert_eq!(kth, 2.0f32.to_bits());
        let th = host_threshold(&v, &keys, kth);
        assert_eq!(th.idx, vec![1, 2, 3, 4]);
        assert_eq!(th.count, 4);
        assert_eq!(host_topk(&v, &keys, 0).0.count, 0);
        assert_eq!(host_topk(&v, &keys, 99).0.idx.len(), 6);
    }

    #[test]
    fn grid_normals_are_on_the_grid_and_spread() {
        let vals: Vec<f64> = (0..10000u64)
            .map(|i| grid_normal(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 7)))
            .collect();
        assert!(vals
            .iter()
            .all(|v| (v * 4096.0).fract() == 0.0 && v.abs() <= 8.0));
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64;
        assert!(mean.abs() < 0.05 && (var - 1.0).abs() < 0.1, "{mean} {var}");
    }
}
