//! Element types that symmetric buffers may hold. The trait is sealed: each type has a fixed
//! size and plain bit representation, so byte-level RMA moves it intact between PEs.

use crate::sys;
use std::fmt::Debug;

mod private {
    pub trait Sealed {}
}

/// Data types of the collectives and device kernels (codes from device/abi.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Dtype {
    /// 32-bit float (`f32`).
    F32 = sys::NVSHMEMRS_DTYPE_F32 as i32,
    /// 64-bit float (`f64`).
    F64 = sys::NVSHMEMRS_DTYPE_F64 as i32,
    /// IEEE half precision (`half::f16`).
    F16 = sys::NVSHMEMRS_DTYPE_F16 as i32,
    /// bfloat16 (`half::bf16`).
    Bf16 = sys::NVSHMEMRS_DTYPE_BF16 as i32,
    /// `i32`.
    I32 = sys::NVSHMEMRS_DTYPE_I32 as i32,
    /// `i64`.
    I64 = sys::NVSHMEMRS_DTYPE_I64 as i32,
    /// `u32`.
    U32 = sys::NVSHMEMRS_DTYPE_U32 as i32,
    /// `u64`.
    U64 = sys::NVSHMEMRS_DTYPE_U64 as i32,
    /// `u8`.
    U8 = sys::NVSHMEMRS_DTYPE_U8 as i32,
}

impl Dtype {
    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::U8 => 1,
        }
    }
}

/// A type a [`crate::SymmetricBuffer`] can hold.
///
/// # Safety
/// Sealed: implemented only in this crate for plain-old-data types where every bit pattern
/// written by another PE is a valid value.
pub unsafe trait Element:
    private::Sealed + Copy + Default + PartialEq + Debug + Send + Sync + 'static
{
    /// The type's name in messages.
    const NAME: &'static str;
    /// Its dtype code for device kernels.
    const DTYPE: Dtype;
}

macro_rules! element {
    ($($t:ty => $name:literal, $dtype:ident;)*) => {
        $(
            impl private::Sealed for $t {}
            // SAFETY: plain old data, every bit pattern valid.
            unsafe impl Element for $t {
                const NAME: &'static str = $name;
                const DTYPE: Dtype = Dtype::$dtype;
            }
        )*

        impl Dtype {
            /// Every dtype, in the order of the element table (for bindings that list them,
            /// such as the Python package's dtype mapping).
            pub const ALL: &'static [Dtype] = &[$(Dtype::$dtype),*];

            /// The element type's name ([`Element::NAME`]).
            pub fn name(self) -> &'static str {
                match self {
                    $(Dtype::$dtype => $name,)*
                }
            }

            /// The dtype of a kernel code (`Dtype as u64`), if there is one.
            pub fn from_code(code: u64) -> Option<Dtype> {
                [$(Dtype::$dtype),*].into_iter().find(|&d| d as u64 == code)
            }
        }
    };
}

element! {
    f32 => "f32", F32;
    f64 => "f64", F64;
    half::f16 => "f16", F16;
    half::bf16 => "bf16", Bf16;
    i32 => "i32", I32;
    i64 => "i64", I64;
    u32 => "u32", U32;
    u64 => "u64", U64;
    u8 => "u8", U8;
}

/// 64-bit integers with NVSHMEM atomics (fetch-add, compare-swap).
pub trait Atomic64: Element {
    #[doc(hidden)]
    fn to_bits(self) -> u64;
    #[doc(hidden)]
    fn from_bits(bits: u64) -> Self;
}

impl Atomic64 for u64 {
    fn to_bits(self) -> u64 {
        self
    }
    fn from_bits(bits: u64) -> Self {
        bits
    }
}

impl Atomic64 for i64 {
    fn to_bits(self) -> u64 {
        self as u64
    }
    fn from_bits(bits: u64) -> Self {
        bits as i64
    }
}

/// Conversion to and from f64 for host-side values: test inputs, references and checks (the
/// soak and the allreduce bench). `from_f64` is Rust's `as` for integers (truncating,
/// saturating) and rounds to nearest for floats; `to_f64` is exact up to f64's 53-bit mantissa.
pub trait HostValue: Element {
    /// `v` as this type: Rust's `as` for integers (truncating, saturating), nearest for floats.
    fn from_f64(v: f64) -> Self;
    /// The value as f64 (exact up to 53 bits of mantissa).
    fn to_f64(self) -> f64;
}

macro_rules! host_value_as {
    ($($t:ty),*) => {$(
        impl HostValue for $t {
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
host_value_as!(f32, f64, i32, i64, u32, u64);

macro_rules! host_value_half {
    ($($t:ty),*) => {$(
        impl HostValue for $t {
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
        }
    )*};
}
host_value_half!(half::f16, half::bf16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_and_codes_come_from_the_element_table() {
        assert_eq!(Dtype::Bf16.name(), <half::bf16 as Element>::NAME);
        assert_eq!(Dtype::from_code(Dtype::U64 as u64), Some(Dtype::U64));
        assert_eq!(Dtype::from_code(0), Some(Dtype::F32));
        assert_eq!(Dtype::from_code(99), None);
        assert_eq!(Dtype::ALL.len(), 9);
        assert!(Dtype::ALL
            .iter()
            .all(|&d| Dtype::from_code(d as u64) == Some(d)));
    }

    #[test]
    fn host_values_round_trip_and_round_like_their_types() {
        assert_eq!(<i32 as HostValue>::from_f64(-2.9), -2);
        assert_eq!(<u32 as HostValue>::from_f64(-1.0), 0);
        assert_eq!(HostValue::to_f64(u64::MAX >> 11), (u64::MAX >> 11) as f64);
        assert_eq!(
            <half::bf16 as HostValue>::from_f64(1.0 + 1.0 / 256.0).to_f64(),
            1.0
        );
        assert_eq!(<half::f16 as HostValue>::from_f64(0.25).to_f64(), 0.25);
        assert_eq!(<f32 as HostValue>::from_f64(0.1).to_f64(), 0.1f32 as f64);
    }
}
