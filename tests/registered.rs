//! Collectives on the caller's own memory registered into the symmetric heap
//! (`Nvshmem::alloc_registrable`, `Nvshmem::register_symmetric`): zero-copy, so no workspace
//! stages anything (`staging_bytes()` stays 0). Inputs are written and outputs read through the
//! buffer's own address, every row of the table that moves data runs on the registered
//! symmetric address of the same memory (tests/common/table.rs); every element on the
//! receiving PE against the row's CPU reference with the test values of tests/common/
//! reference.rs, outputs poisoned before each call. Registration is undone and done again;
//! memory NVSHMEM cannot register (cudarc's) is refused with a typed error on every PE, and the
//! runtime works afterwards. Where this machine's NVSHMEM cannot register at all (heap without
//! CUDA VMM, or its error checks on with PEs sharing a GPU) the tests SKIP, saying why.
//! Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs).

mod common;

use common::data::me_n;
use common::reference::{RefElem, Tag};
use common::table::{data_rows, roots, run_sync, world, Call, Values, Workspace};
use common::{gpu_test, runtime, skip};
use cudarc::driver::DevicePtr;
use nvshmem::{
    Allreduce, AllreduceAlgo, CollectiveRow, Error, Nvshmem, ReduceOp, Registered,
    RegistrableBuffer, Unregistrable,
};

const COUNTS: [usize; 3] = [1, 1000, 65537];
const SLOT_BYTES: usize = 64 << 10;

/// Whether a refusal says this machine cannot register at all (SKIP), rather than that the
/// runtime refused memory it should take (FAIL).
fn machine_cannot(e: &Error) -> Option<String> {
    match e {
        Error::NotRegistrable {
            reason:
                reason @ (Unregistrable::HeapNotVmm
                | Unregistrable::SharedGpuChecks
                | Unregistrable::HeapFull),
            ..
        } => Some(format!(
            "registration refused on this machine ({reason:?}): {e}"
        )),
        _ => None,
    }
}

/// A workspace of every row of the table that moves data, over the world, called through the
/// table; and allreduce's own, for what only it has (its algorithms, `run_in_place`).
struct All<'nv> {
    rows: Vec<(&'static CollectiveRow, Workspace<'nv>)>,
    ar: Allreduce<'nv>,
}

impl<'nv> All<'nv> {
    fn world(nv: &'nv Nvshmem) -> All<'nv> {
        All {
            rows: world(nv, data_rows(), SLOT_BYTES),
            ar: nv.allreduce_workspace(SLOT_BYTES).unwrap(),
        }
    }

    /// Bytes staged by any of them so far: none on registered memory.
    fn staging_bytes(&self) -> usize {
        let rows: usize = self.rows.iter().map(|(_, w)| w.staging_bytes()).sum();
        rows + self.ar.staging_bytes()
    }
}

/// The input written through the buffer's own address: `f(i)` for the first elements, the
/// poison after them.
fn write_input(buf: &RegistrableBuffer<'_, f32>, len: usize, f: impl Fn(usize) -> f32) {
    let host: Vec<f32> = (0..buf.len())
        .map(|i| {
            if i < len {
                f(i)
            } else {
                <f32 as Tag>::poison()
            }
        })
        .collect();
    buf.copy_from_host(&host).unwrap();
}

/// The output poisoned through the buffer's own address.
fn poison(buf: &RegistrableBuffer<'_, f32>, value: f32) {
    buf.copy_from_host(&vec![value; buf.len()]).unwrap();
}

/// The first `len` elements of the output, read through the buffer's own address, after
/// checking that nothing past them was written.
fn read_output(buf: &RegistrableBuffer<'_, f32>, len: usize, poison: f32, what: &str) -> Vec<f32> {
    let all = buf.to_vec().unwrap();
    assert!(
        all[len..].iter().all(|v| v.to_bits() == poison.to_bits()),
        "{what}: written past the output's {len} elements"
    );
    all[..len].to_vec()
}

fn reduced(n: usize, i: usize, salt: usize, op: ReduceOp) -> f32 {
    let vals: Vec<f32> = (0..n).map(|p| f32::gen(p, i, salt, op)).collect();
    f32::reduce(&vals, op)
}

fn check_reduced(what: &str, got: &[f32], want: impl Fn(usize) -> f32) {
    for (i, g) in got.iter().enumerate() {
        let w = want(i);
        assert!(f32::same(*g, w), "{what}: element {i} is {g:?}, want {w:?}");
    }
}

/// Every row of the table that moves data (every root of the rooted ones, sum where it reduces)
/// with `count` elements per block on the registered buffers, each output checked against the
/// row's reference; then allreduce in place by every algorithm.
fn every_collective(
    nv: &Nvshmem,
    all: &mut All<'_>,
    (own_in, own_out): (&RegistrableBuffer<'_, f32>, &RegistrableBuffer<'_, f32>),
    (reg_in, reg_out): (&Registered<'_, f32>, &Registered<'_, f32>),
    count: usize,
    salt: usize,
) {
    let (me, n) = me_n(nv);
    let stream = nv.stream().clone();
    for (row, w) in all.rows.iter_mut() {
        for root in roots(row, n) {
            let call = Call::blocks(row, me, n, count, root);
            let v = Values::of(row, n, salt + root, ReduceOp::Sum);
            write_input(own_in, call.in_len, |i| v.input(me, i));
            let before: f32 = v.poison();
            poison(own_out, before);
            let (i, o) = (
                reg_in.view(..call.in_len).unwrap(),
                reg_out.view(..call.out_len).unwrap(),
            );
            run_sync(w, call.any(&v, i, o), &stream);
            let what = call.describe::<f32>(&v);
            let got = read_output(own_out, call.out_len, before, &what);
            call.check(&what, &v, &got, |_| before);
            nv.barrier_all().unwrap();
        }
    }

    // Allreduce in place by every algorithm (its own API).
    let op = ReduceOp::Sum;
    for algo in AllreduceAlgo::ALL {
        write_input(own_in, count, |i| f32::gen(me, i, salt + 1, op));
        let buf = reg_in.view(..count).unwrap();
        all.ar.run_in_place(buf, op, algo, &stream).unwrap();
        all.ar.sync(&stream).unwrap();
        let what = format!("allreduce f32 x {count} in place by {algo:?}");
        let got = read_output(own_in, count, <f32 as Tag>::poison(), &what);
        check_reduced(&what, &got, |i| reduced(n, i, salt + 1, op));
    }
    nv.barrier_all().unwrap();
}

/// Registers two buffers, runs every row at every count on them with nothing staged,
/// unregisters, registers again and runs once more.
fn collectives_on_registered_memory(pes: i32) {
    let nv = runtime(pes);
    let n = nv.n_pes() as usize;
    let len = n * COUNTS[COUNTS.len() - 1];
    let own_in = match nv.alloc_registrable::<f32>(len) {
        Ok(b) => b,
        Err(e) => match machine_cannot(&e) {
            Some(why) => return skip(&why),
            None => panic!("alloc_registrable: {e}"),
        },
    };
    let own_out = nv.alloc_registrable::<f32>(len).unwrap();
    let gran = nv.registration_granularity().unwrap();
    assert_eq!(own_in.mapped_bytes() % gran, 0);
    assert!(own_in.mapped_bytes() >= own_in.num_bytes());
    let mut all = All::world(&nv);
    for round in 0..2 {
        let reg_in = match nv.register_symmetric(&own_in) {
            Ok(r) => r,
            Err(e) => match machine_cannot(&e) {
                Some(why) if round == 0 => return skip(&why),
                _ => panic!("register_symmetric (round {round}): {e}"),
            },
        };
        let reg_out = nv.register_symmetric(&own_out).unwrap();
        assert_eq!(reg_in.registered_bytes(), own_in.mapped_bytes());
        assert_ne!(
            reg_in.as_device_ptr() as usize,
            own_in.as_device_ptr() as usize,
            "the symmetric address is a second mapping of the memory"
        );
        let counts: &[usize] = if round == 0 { &COUNTS } else { &COUNTS[1..2] };
        for (k, &count) in counts.iter().enumerate() {
            every_collective(
                &nv,
                &mut all,
                (&own_in, &own_out),
                (&reg_in, &reg_out),
                count,
                7 * round + k,
            );
        }
        assert_eq!(
            all.staging_bytes(),
            0,
            "registered memory went through a staging area"
        );
        // Unregistered here, output first (any order works: both are collective, every PE
        // drops them in the same order).
        drop(reg_out);
        drop(reg_in);
    }
    // The buffers stay ordinary own memory: staged when passed as they are.
    let stream = nv.stream().clone();
    let (me, n) = me_n(&nv);
    let count = 1000;
    let mut own_out = own_out;
    write_input(&own_in, own_in.len(), |i| f32::gen(me, i, 9, ReduceOp::Sum));
    all.ar
        .run(
            &own_in,
            &mut own_out,
            ReduceOp::Sum,
            AllreduceAlgo::Auto,
            &stream,
        )
        .unwrap();
    all.ar.sync(&stream).unwrap();
    assert!(all.ar.staging_bytes() > 0, "unregistered memory is staged");
    let got = own_out.to_vec().unwrap();
    check_reduced("allreduce staged after unregistering", &got[..count], |i| {
        reduced(n, i, 9, ReduceOp::Sum)
    });
    nv.barrier_all().unwrap();
}

gpu_test!(1, registered_memory_on_one_pe);
fn registered_memory_on_one_pe() {
    collectives_on_registered_memory(1);
}

gpu_test!(2, registered_memory_on_two_pes);
fn registered_memory_on_two_pes() {
    collectives_on_registered_memory(2);
}

gpu_test!(3, registered_memory_on_three_pes);
fn registered_memory_on_three_pes() {
    collectives_on_registered_memory(3);
}

gpu_test!(2, memory_nvshmem_cannot_register_is_refused_on_every_pe);
/// cudarc's memory (cuMemAllocAsync) on every PE, then on one PE beside registrable memory on
/// the other: `Error::NotRegistrable` on every PE, naming the PE that refused, before NVSHMEM
/// is called; a size that is not a multiple of the granularity likewise. The runtime works
/// afterwards: a staged allreduce of the same cudarc memory, checked, and a registration.
fn memory_nvshmem_cannot_register_is_refused_on_every_pe() {
    let nv = runtime(2);
    let (me, n) = me_n(&nv);
    let stream = nv.stream().clone();
    let len = 1 << 16;
    let gran = nv.registration_granularity().unwrap_or(2 << 20);
    let data: Vec<f32> = (0..len)
        .map(|i| f32::gen(me, i, 4, ReduceOp::Sum))
        .collect();
    let mut slice = stream.clone_htod(&data).unwrap();
    let addr = slice.device_ptr(&stream).0 as usize;
    stream.synchronize().unwrap();
    // SAFETY: refused before NVSHMEM sees it (the test checks that it is).
    match unsafe { nv.register_symmetric_raw(addr as *mut f32, len, gran) } {
        Err(e @ Error::NotRegistrable { pe: 0, .. }) => {
            let text = e.to_string();
            assert!(text.contains("staged") || text.contains("stages"), "{text}");
            if let Error::NotRegistrable { reason, .. } = e {
                if reason != Unregistrable::HeapNotVmm {
                    assert_eq!(reason, Unregistrable::NotVmm, "{text}");
                }
            }
        }
        r => panic!("cudarc memory on every PE: {r:?}"),
    }
    // One PE with registrable memory, the other with cudarc's: both refuse, naming PE 1.
    match nv.alloc_registrable::<f32>(len) {
        Ok(own) => {
            let ptr = if me == 0 {
                own.as_device_ptr()
            } else {
                addr as *mut f32
            };
            // SAFETY: PE 0's is the start of its own allocation of `mapped_bytes`; PE 1's is
            // refused before NVSHMEM sees it.
            let r = unsafe { nv.register_symmetric_raw(ptr, len, own.mapped_bytes()) };
            match r {
                Err(Error::NotRegistrable {
                    pe: 1,
                    reason: Unregistrable::NotVmm,
                    ..
                }) => {}
                Err(e) if machine_cannot(&e).is_some() => {}
                r => panic!("mixed memory: {r:?}"),
            }
            // A size that is not a multiple of the granularity: refused before NVSHMEM
            // (NVSHMEM would round it up and map past the allocation).
            // SAFETY: refused before NVSHMEM sees it.
            let r = unsafe { nv.register_symmetric_raw(own.as_device_ptr(), len, gran / 2) };
            match r {
                Err(Error::NotRegistrable {
                    reason: Unregistrable::Granularity,
                    ..
                }) => {}
                Err(e) if machine_cannot(&e).is_some() => {}
                r => panic!("half a granule: {r:?}"),
            }
            // And the runtime still registers what it can.
            match nv.register_symmetric(&own) {
                Ok(reg) => assert_eq!(reg.len(), len),
                Err(e) => assert!(machine_cannot(&e).is_some(), "{e}"),
            }
        }
        Err(e) => assert!(machine_cannot(&e).is_some(), "alloc_registrable: {e}"),
    }
    // The same cudarc memory, staged.
    let mut ar = nv.allreduce_workspace(SLOT_BYTES).unwrap();
    ar.run_in_place(&mut slice, ReduceOp::Sum, AllreduceAlgo::Auto, &stream)
        .unwrap();
    ar.sync(&stream).unwrap();
    let got = stream.clone_dtoh(&slice).unwrap();
    check_reduced("staged allreduce after the refusals", &got, |i| {
        reduced(n, i, 4, ReduceOp::Sum)
    });
    nv.barrier_all().unwrap();
}
