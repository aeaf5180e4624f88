//! One PE on one GPU: init, buffers of every element type, puts to itself, double init.
//! Run by scripts/gpu_test.sh as plain processes (tests named pe1_*).

mod common;

use common::{gpu_test, runtime};
use half::{bf16, f16};
use nvshmem::{Element, Error, Nvshmem};

fn round_trip<T: Element>(nv: &Nvshmem, make: impl Fn(usize) -> T) {
    let len = 777;
    let a = nv.alloc::<T>(len).unwrap();
    let b = nv.alloc_zeroed::<T>(len).unwrap();
    let data: Vec<T> = (0..len).map(&make).collect();
    assert_eq!(
        b.to_vec().unwrap(),
        vec![T::default(); len],
        "{}: calloc zeroes",
        T::NAME
    );
    a.copy_from_host(&data).unwrap();
    assert_eq!(a.to_vec().unwrap(), data, "{}", T::NAME);
    nv.put(&b, &a, 0).unwrap();
    nv.quiet();
    assert_eq!(b.to_vec().unwrap(), data, "{}: put to self", T::NAME);
    b.view(100..200).unwrap().zero().unwrap();
    let got = b.to_vec().unwrap();
    assert!(got[100..200].iter().all(|x| *x == T::default()));
    assert_eq!(got[99], data[99]);
    assert_eq!(got[200], data[200]);
}

gpu_test!(1, buffers_of_every_element_type_round_trip);
fn buffers_of_every_element_type_round_trip() {
    let nv = runtime(1);
    round_trip(&nv, |i| i as f32 * 1.5);
    round_trip(&nv, |i| i as f64 / 3.0);
    round_trip(&nv, |i| f16::from_f32(i as f32));
    round_trip(&nv, |i| bf16::from_f32(i as f32 * 0.5));
    round_trip(&nv, |i| i as i32 - 400);
    round_trip(&nv, |i| (i as i64) << 33);
    round_trip(&nv, |i| i as u32 * 3);
    round_trip(&nv, |i| (i as u64) << 40);
    round_trip(&nv, |i| i as u8);
    let aligned = nv.alloc_aligned::<u8>(100, 1 << 16).unwrap();
    assert_eq!(aligned.as_device_ptr() as usize % (1 << 16), 0);
}

gpu_test!(1, second_init_is_an_error_and_device_api_works);
fn second_init_is_an_error_and_device_api_works() {
    let nv = runtime(1);
    assert!(matches!(
        Nvshmem::init_single_pe(),
        Err(Error::AlreadyInitialized)
    ));
    nv.device_self_check().unwrap();
    assert_eq!((nv.my_pe(), nv.n_pes()), (0, 1));
}

gpu_test!(1, heap_exhaustion_is_an_error_naming_the_variable);
fn heap_exhaustion_is_an_error_naming_the_variable() {
    let nv = runtime(1);
    let err = nv.alloc::<u8>(1 << 40).unwrap_err();
    // Refused before NVSHMEM's collective malloc (the free-memory check every PE agrees on), or
    // by NVSHMEM itself: both name the heap variable.
    assert!(
        matches!(err, Error::AllocRefused { .. } | Error::AllocFailed { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("NVSHMEM_SYMMETRIC_SIZE"));
    // The heap still works afterwards.
    let b = nv.alloc::<u32>(10).unwrap();
    b.copy_from_host(&[7; 10]).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![7; 10]);
}
