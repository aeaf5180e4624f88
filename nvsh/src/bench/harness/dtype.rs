//! The element types the benches run: the command line's names for them, which collectives take
//! which, and how a bench generic over them reaches the library's and NCCL's typed calls.

use cudarc::nccl::NcclType;
use nvshmem::tools::HostValue;
use nvshmem::Reducible;
use nvshmem::SymView;
use nvshmem::{Dtype, Element};
use nvshmem::{Error, Result};

/// Element types the benches run (the command line's names, with nccl-tests' and NCCL's names
/// as aliases; clap lists the names in `--help`). Every element type of the library: the
/// reductions take all but u8, data movement (broadcast, allgather, alltoall) all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum BenchDtype {
    #[value(name = "f32", alias = "float32", alias = "float")]
    F32,
    #[value(name = "bf16", alias = "bfloat16")]
    Bf16,
    #[value(name = "f16", alias = "float16", alias = "half")]
    F16,
    #[value(name = "f64", alias = "float64", alias = "double")]
    F64,
    #[value(name = "i32", alias = "int32", alias = "int")]
    I32,
    #[value(name = "u32", alias = "uint32")]
    U32,
    #[value(name = "i64", alias = "int64")]
    I64,
    #[value(name = "u64", alias = "uint64")]
    U64,
    #[value(name = "u8", alias = "uint8")]
    U8,
}

impl BenchDtype {
    /// Every type, in `--help`'s order: what data movement takes.
    pub const ALL: [BenchDtype; 9] = [
        BenchDtype::F32,
        BenchDtype::Bf16,
        BenchDtype::F16,
        BenchDtype::F64,
        BenchDtype::I32,
        BenchDtype::U32,
        BenchDtype::I64,
        BenchDtype::U64,
        BenchDtype::U8,
    ];

    /// The library's eight reducible types ([`Reducible`]): what the reductions take.
    pub const REDUCIBLE: [BenchDtype; 8] = [
        BenchDtype::F32,
        BenchDtype::Bf16,
        BenchDtype::F16,
        BenchDtype::F64,
        BenchDtype::I32,
        BenchDtype::U32,
        BenchDtype::I64,
        BenchDtype::U64,
    ];

    /// What `-d` defaults to: the training types, as before the other types were added.
    pub const DEFAULT: [BenchDtype; 2] = [BenchDtype::F32, BenchDtype::Bf16];

    /// The types a collective takes: [`BenchDtype::REDUCIBLE`] for a reduction, else all.
    pub fn taken_by(reduces: bool) -> &'static [BenchDtype] {
        if reduces {
            &Self::REDUCIBLE
        } else {
            &Self::ALL
        }
    }

    /// The library's dtype of the same element type.
    pub fn library(self) -> Dtype {
        match self {
            BenchDtype::F32 => Dtype::F32,
            BenchDtype::Bf16 => Dtype::Bf16,
            BenchDtype::F16 => Dtype::F16,
            BenchDtype::F64 => Dtype::F64,
            BenchDtype::I32 => Dtype::I32,
            BenchDtype::U32 => Dtype::U32,
            BenchDtype::I64 => Dtype::I64,
            BenchDtype::U64 => Dtype::U64,
            BenchDtype::U8 => Dtype::U8,
        }
    }

    /// The library's name ([`Dtype::name`]), which is also the command line's.
    pub fn name(self) -> &'static str {
        self.library().name()
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.library().size()
    }

    /// Whether the reductions take it (all but u8).
    pub fn reducible(self) -> bool {
        self != BenchDtype::U8
    }

    /// f32, bf16, f16 and f64.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            BenchDtype::F32 | BenchDtype::Bf16 | BenchDtype::F16 | BenchDtype::F64
        )
    }

    /// Signed integers (the float types are signed too, but take other patterns).
    pub fn is_signed_int(self) -> bool {
        matches!(self, BenchDtype::I32 | BenchDtype::I64)
    }

    /// Every integer up to this is exact in the type (2^significand bits for floats; for the
    /// 64-bit integers 2^53, since the host reference goes through f64).
    pub fn exact_integer_limit(self) -> f64 {
        match self {
            BenchDtype::F32 => (1u64 << 24) as f64,
            BenchDtype::Bf16 => 256.0,
            BenchDtype::F16 => 2048.0,
            BenchDtype::F64 | BenchDtype::I64 | BenchDtype::U64 => (1u64 << 53) as f64,
            BenchDtype::I32 => (1u64 << 31) as f64,
            BenchDtype::U32 => (1u64 << 32) as f64,
            BenchDtype::U8 => 256.0,
        }
    }

    /// Relative rounding error of one operation (half an ulp at 1); 0 for integers, whose
    /// operations on the benches' data are exact.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            BenchDtype::F32 => 2f64.powi(-24),
            BenchDtype::Bf16 => 2f64.powi(-8),
            BenchDtype::F16 => 2f64.powi(-11),
            BenchDtype::F64 => 2f64.powi(-53),
            _ => 0.0,
        }
    }

    /// The byte outputs are filled with before a timed group: one whose element no correct
    /// output holds, so an element left unwritten is always caught. All ones: NaN in every
    /// float type and the maximum of an unsigned one (the patterns stay below it); 0x80 for
    /// the signed integers, a value near their minimum that the patterns never reach (all
    /// ones would be -1, a common sum).
    pub fn poison_byte(self) -> u8 {
        if self.is_signed_int() {
            0x80
        } else {
            0xff
        }
    }
}

/// Why a collective refuses `dtype`, in the command line's terms; None when it takes it.
pub fn dtype_refusal(collective: &str, reduces: bool, dtype: BenchDtype) -> Option<String> {
    if BenchDtype::taken_by(reduces).contains(&dtype) {
        return None;
    }
    let names: Vec<&str> = BenchDtype::REDUCIBLE.iter().map(|d| d.name()).collect();
    Some(format!(
        "{collective} reduces {}; {} is data movement only (broadcast, allgather and alltoall \
         take it)",
        names.join(", "),
        dtype.name()
    ))
}

/// An error naming the first of `dtypes` that `collective` does not take.
pub fn check_dtypes(
    collective: &str,
    reduces: bool,
    dtypes: &[BenchDtype],
) -> std::result::Result<(), String> {
    match dtypes
        .iter()
        .find_map(|&d| dtype_refusal(collective, reduces, d))
    {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// A call of a reduction on a reducible element type: how a bench generic over every
/// [`BenchElement`] reaches the library's and NCCL's reductions, which take [`Reducible`]
/// types only ([`BenchElement::reduction`]).
pub trait Reduction {
    type Output;
    fn run<T: BenchElement + Reducible>(
        self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
    ) -> Result<Self::Output>;
}

/// Element types of the benches: ours, NCCL's, and host conversion.
pub trait BenchElement: Element + NcclType {
    const BENCH_DTYPE: BenchDtype;

    /// The element of a host value (exact for the benches' values, which the types hold).
    fn from_value(v: f64) -> Self;

    /// The element as a host value (exact below 2^53).
    fn value(self) -> f64;

    /// `r` run on this type where it is reducible; an error for u8, which no reduction takes
    /// (the benches refuse it before they start, so this is a backstop).
    fn reduction<R: Reduction>(
        r: R,
        input: SymView<'_, Self>,
        output: SymView<'_, Self>,
    ) -> Result<R::Output>;
}

/// The reducible types: the library's own host conversion, and the reduction runs.
macro_rules! reducible_bench_element {
    ($($t:ty => $d:ident),*) => {$(
        impl BenchElement for $t {
            const BENCH_DTYPE: BenchDtype = BenchDtype::$d;
            fn from_value(v: f64) -> Self {
                <$t as HostValue>::from_f64(v)
            }
            fn value(self) -> f64 {
                HostValue::to_f64(self)
            }
            fn reduction<R: Reduction>(
                r: R,
                input: SymView<'_, Self>,
                output: SymView<'_, Self>,
            ) -> Result<R::Output> {
                r.run(input, output)
            }
        }
    )*};
}
reducible_bench_element!(
    f32 => F32, half::bf16 => Bf16, half::f16 => F16, f64 => F64,
    i32 => I32, u32 => U32, i64 => I64, u64 => U64
);

impl BenchElement for u8 {
    const BENCH_DTYPE: BenchDtype = BenchDtype::U8;
    fn from_value(v: f64) -> Self {
        v as u8
    }
    fn value(self) -> f64 {
        self as f64
    }
    fn reduction<R: Reduction>(
        _r: R,
        _input: SymView<'_, Self>,
        _output: SymView<'_, Self>,
    ) -> Result<R::Output> {
        Err(Error::Io {
            what: "benchmark".into(),
            message: "u8 is data movement only: no reduction takes it".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `-d` takes (clap's ValueEnum, any case): the report's names and the aliases, for
    /// every type, and nothing else.
    #[test]
    fn dtype_names_and_aliases_parse() {
        use clap::ValueEnum;
        let names: Vec<String> = BenchDtype::value_variants()
            .iter()
            .map(|d| d.to_possible_value().unwrap().get_name().to_string())
            .collect();
        // --help's order, which is ALL's.
        assert_eq!(
            names,
            ["f32", "bf16", "f16", "f64", "i32", "u32", "i64", "u64", "u8"]
        );
        assert_eq!(BenchDtype::value_variants(), BenchDtype::ALL);
        for d in BenchDtype::ALL {
            assert_eq!(BenchDtype::from_str(d.name(), true), Ok(d));
            assert_eq!(d.to_possible_value().unwrap().get_name(), d.name());
        }
        for (s, d) in [
            ("float32", BenchDtype::F32),
            ("Float", BenchDtype::F32),
            ("BF16", BenchDtype::Bf16),
            ("bfloat16", BenchDtype::Bf16),
            ("float16", BenchDtype::F16),
            ("half", BenchDtype::F16),
            ("float64", BenchDtype::F64),
            ("double", BenchDtype::F64),
            ("int32", BenchDtype::I32),
            ("int", BenchDtype::I32),
            ("uint32", BenchDtype::U32),
            ("int64", BenchDtype::I64),
            ("uint64", BenchDtype::U64),
            ("uint8", BenchDtype::U8),
            ("UINT8", BenchDtype::U8),
        ] {
            assert_eq!(BenchDtype::from_str(s, true), Ok(d), "{s}");
        }
        // Types the library does not have, and `all` (the command line's, not a type).
        for bad in ["int8", "i8", "fp8", "f8e4m3", "char", "all", ""] {
            assert!(BenchDtype::from_str(bad, true).is_err(), "{bad}");
        }
    }

    /// (dtype, the library's name, size) of a bench element type.
    fn described<T: BenchElement>() -> (BenchDtype, &'static str, usize) {
        (T::BENCH_DTYPE, T::NAME, std::mem::size_of::<T>())
    }

    /// Each Rust type's dtype agrees with the library's element table, and the lists are the
    /// library's: eight reducible types, u8 on top for data movement.
    #[test]
    fn dtypes_are_the_librarys_element_types() {
        let all = [
            described::<f32>(),
            described::<half::bf16>(),
            described::<half::f16>(),
            described::<f64>(),
            described::<i32>(),
            described::<u32>(),
            described::<i64>(),
            described::<u64>(),
            described::<u8>(),
        ];
        for (d, name, size) in all {
            assert_eq!((d.name(), d.size()), (name, size), "{d:?}");
            assert_eq!(d.library().name(), name);
        }
        let dtypes: Vec<BenchDtype> = all.iter().map(|t| t.0).collect();
        assert_eq!(dtypes, BenchDtype::ALL);
        assert_eq!(BenchDtype::REDUCIBLE, BenchDtype::ALL[..8]);
        assert!(BenchDtype::ALL
            .iter()
            .all(|d| d.reducible() != (*d == BenchDtype::U8)));
        assert_eq!(BenchDtype::taken_by(true), BenchDtype::REDUCIBLE);
        assert_eq!(BenchDtype::taken_by(false), BenchDtype::ALL);
        assert_eq!(BenchDtype::DEFAULT, [BenchDtype::F32, BenchDtype::Bf16]);
        let floats: Vec<&str> = BenchDtype::ALL
            .iter()
            .filter(|d| d.is_float())
            .map(|d| d.name())
            .collect();
        assert_eq!(floats, ["f32", "bf16", "f16", "f64"]);
        let signed: Vec<&str> = BenchDtype::ALL
            .iter()
            .filter(|d| d.is_signed_int())
            .map(|d| d.name())
            .collect();
        assert_eq!(signed, ["i32", "i64"]);
    }
}
