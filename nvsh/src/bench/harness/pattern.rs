//! The values the benches' inputs hold, hashed from (PE, element, salt) into ranges that every
//! element type and every reduction of them keeps exact, so outputs can be checked exactly.

use super::dtype::BenchDtype;

/// A well-mixed 64-bit hash of (pe, element, salt): splitmix64 at position `i` of a stream
/// seeded by (pe, salt), so the pattern has no short period along the elements.
pub fn pattern_hash(pe: i32, i: usize, salt: u64) -> u64 {
    let seed = salt
        .wrapping_mul(0xd605_bbb5_8c8a_bbb5)
        .wrapping_add((pe as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f));
    let mut z = seed.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Largest magnitude of [`quarter_value`].
pub const QUARTER_MAX: f64 = 8.0;

/// A quarter-integer in [-8, 8] from a hash: 65 values, each exact in every float type, and
/// any sum of up to 8 of them (at most 256 quarters in magnitude) exact in bf16 too.
pub fn quarter_value(h: u64) -> f64 {
    ((h >> 32) % 65) as f64 / 4.0 - QUARTER_MAX
}

/// One of -2, -1, -1/2, 1/2, 1, 2 from a hash: products of up to 126 of them are exact powers
/// of two (with a sign) in f32 and bf16, of up to 15 in f16.
pub fn power_of_two_value(h: u64) -> f64 {
    let magnitude = [0.5, 1.0, 2.0][((h >> 32) % 3) as usize];
    if (h >> 40) & 1 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// [`quarter_value`]'s 65 steps as integers: [-32, 32] for signed types, [0, 64] for unsigned
/// ones. Sums of n stay within 32n in magnitude, far inside every integer type for any PE
/// count a job can have, so every reduction of them is exact.
pub fn integer_value(h: u64, signed: bool) -> f64 {
    let q = ((h >> 32) % 65) as f64;
    if signed {
        q - 32.0
    } else {
        q
    }
}

/// 1 or 2 from a hash, with a random sign for signed types: the integer counterpart of
/// [`power_of_two_value`].
pub fn integer_power_value(h: u64, signed: bool) -> f64 {
    let magnitude = [1.0, 2.0][((h >> 32) % 2) as usize];
    if signed && (h >> 40) & 1 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// An element for data movement (broadcast, allgather, alltoall) from a hash: quarter-integers
/// for the float types (exact in each); for the integers, values spread over most of the
/// type's bits, so that every byte moves data, yet never the poison
/// ([`BenchDtype::poison_byte`]) and exact in the f64 the reference goes through: u8 in
/// [0, 254], u32 in [0, 2^32 - 2], i32 in [-2^30, 2^30), u64 in [0, 2^53), i64 in
/// [-2^52, 2^52).
pub fn movement_value(dtype: BenchDtype, h: u64) -> f64 {
    let top = h >> 32;
    match dtype {
        BenchDtype::U8 => (top % 255) as f64,
        BenchDtype::U32 => (top % 0xffff_ffff) as f64,
        BenchDtype::I32 => (top >> 1) as f64 - (1u64 << 30) as f64,
        BenchDtype::U64 => (h >> 11) as f64,
        BenchDtype::I64 => (h >> 11) as f64 - (1u64 << 52) as f64,
        BenchDtype::F32 | BenchDtype::Bf16 | BenchDtype::F16 | BenchDtype::F64 => quarter_value(h),
    }
}

/// Salt of input buffer `slot` at message size `bytes`: different per buffer and per size.
pub fn salt(bytes: usize, slot: usize) -> u64 {
    (bytes as u64)
        .wrapping_mul(1_000_003)
        .wrapping_add(slot as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::BenchElement;

    /// The poison byte's value in each type, as the checker reads it.
    fn poison<T: BenchElement>() -> T {
        let bytes = vec![T::BENCH_DTYPE.poison_byte(); std::mem::size_of::<T>()];
        // SAFETY: every bit pattern is a valid element (Element's contract).
        unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
    }

    /// No correct output holds the poison: NaN for floats, an integer outside every pattern's
    /// range otherwise (so an element a call leaves unwritten is always wrong).
    #[test]
    fn poison_is_never_a_value_the_patterns_produce() {
        assert!(poison::<f32>().is_nan() && poison::<f64>().is_nan());
        assert!(poison::<half::f16>().is_nan() && poison::<half::bf16>().is_nan());
        assert_eq!(poison::<u8>(), u8::MAX);
        assert_eq!(poison::<u32>(), u32::MAX);
        assert_eq!(poison::<u64>(), u64::MAX);
        assert_eq!(poison::<i32>(), -0x7f7f_7f80);
        assert_eq!(poison::<i64>(), -0x7f7f_7f7f_7f7f_7f80);
        // Hashes at the ends of each pattern's range, and every data movement value between.
        for h in [
            0,
            1,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            (1 << 63) - 1,
            0xffff_fffe << 32,
        ] {
            for &d in &BenchDtype::ALL {
                let v = movement_value(d, h);
                assert!(v.fract() == 0.0 || d.is_float(), "{d:?} {h:x}");
                let (lo, hi) = match d {
                    BenchDtype::U8 => (0.0, 254.0),
                    BenchDtype::U32 => (0.0, (u32::MAX - 1) as f64),
                    BenchDtype::I32 => (-(2f64.powi(30)), 2f64.powi(30) - 1.0),
                    BenchDtype::U64 => (0.0, 2f64.powi(53) - 1.0),
                    BenchDtype::I64 => (-(2f64.powi(52)), 2f64.powi(52) - 1.0),
                    _ => (-QUARTER_MAX, QUARTER_MAX),
                };
                assert!((lo..=hi).contains(&v), "{d:?} {h:x}: {v}");
            }
            for signed in [true, false] {
                assert!(integer_value(h, signed).abs() <= 64.0);
                assert!(integer_power_value(h, signed).abs() <= 2.0);
            }
        }
        // The ends themselves are reached, and convert to the type exactly.
        assert_eq!(
            movement_value(BenchDtype::U32, 0xffff_fffe << 32),
            4294967294.0
        );
        assert_eq!(movement_value(BenchDtype::U32, u64::MAX), 0.0);
        assert_eq!(movement_value(BenchDtype::I32, u64::MAX), 1073741823.0);
        assert_eq!(movement_value(BenchDtype::I32, 0), -1073741824.0);
        assert_eq!(movement_value(BenchDtype::U8, 254 << 32), 254.0);
        assert_eq!(movement_value(BenchDtype::I64, 0), -4503599627370496.0);
        assert_eq!(
            movement_value(BenchDtype::U64, u64::MAX),
            9007199254740991.0
        );
        assert_eq!(i64::from_value(-4503599627370496.0), -(1 << 52));
        assert_eq!(u64::from_value(9007199254740991.0), (1 << 53) - 1);
        assert_eq!(u8::from_value(254.0), 254);
        assert_eq!(i32::from_value(-1073741824.0).value(), -1073741824.0);
    }
}
