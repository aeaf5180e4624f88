//! The build script's binding of entry points from their definitions
//! (nvshmem-sys/build_support/entries.rs).

#[path = "../build_support/entries.rs"]
mod entries;

use entries::*;

#[test]
fn definitions_read_as_declarations() {
    let src = r#"
// A kernel and its launcher.
namespace {
__global__ void k(nvshmemrs_family_args a) {}
}  // namespace

// The launcher: extern "C" int not_this(int) { in a comment }
extern "C" int nvshmemrs_toy(nvshmemrs_family_args args, int blocks, int threads,
                             cudaStream_t stream) {
    return 0;
}

extern "C" uint64_t nvshmemrs_words(void) { return 2; }
/* extern "C" int commented_out(int x) { return x; } */
extern "C" const char *nvshmemrs_name(int code) { return "x"; }
"#;
    let got = definitions(src);
    let want = [
        (
            "nvshmemrs_toy",
            "int nvshmemrs_toy(nvshmemrs_family_args args, int blocks, int threads, cudaStream_t stream);",
        ),
        ("nvshmemrs_words", "uint64_t nvshmemrs_words(void);"),
        ("nvshmemrs_name", "const char *nvshmemrs_name(int code);"),
    ];
    let got: Vec<(&str, &str)> = got.iter().map(|(n, d)| (n.as_str(), d.as_str())).collect();
    assert_eq!(got, want);
}

#[test]
fn blocks_and_declarations_are_not_definitions() {
    let src = "extern \"C\" {\nint a(int);\n}\nextern \"C\" int b(int x);\n";
    assert!(definitions(src).is_empty());
}

#[test]
fn a_header_declares_a_name_only_as_a_whole_word_before_a_parenthesis() {
    let h = "/* nvshmemrs_gone(int) */\nint nvshmemrs_toy(int);\nint nvshmemrs_toy_more (int);\n";
    assert!(declares(h, "nvshmemrs_toy"));
    assert!(declares(h, "nvshmemrs_toy_more"));
    assert!(!declares(h, "nvshmemrs_gone"));
    assert!(!declares(h, "toy"));
    assert!(!declares("int my_nvshmemrs_x(int);", "nvshmemrs_x"));
}
