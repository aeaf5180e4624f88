//! Interop with cudarc: a symmetric buffer is a cudarc device pointer, so cudarc copies and a
//! user's own kernel work on it, and NVSHMEM then moves the result. Run by scripts/gpu_test.sh
//! under `nvsh run -n 2`.

mod common;

use common::{gpu_test, runtime};
use cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

/// A user kernel, as PTX: p[i] += 1 for i < n.
const INC_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry inc_u32(
    .param .u64 p,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    add.s32 %r7, %r6, 1;
    st.global.u32 [%rd4], %r7;
DONE:
    ret;
}
"#;

gpu_test!(2, cudarc_copies_and_a_user_kernel_work_on_symmetric_memory);
fn cudarc_copies_and_a_user_kernel_work_on_symmetric_memory() {
    let nv = runtime(2);
    let me = nv.my_pe();
    let stream = nv.stream().clone();
    let n = 100_003usize;
    let mut buf = nv.alloc::<u32>(n).unwrap();
    let dst = nv.alloc::<u32>(n).unwrap();

    // cudarc's own copies through the DevicePtr traits.
    let data: Vec<u32> = (0..n as u32).map(|i| i * 3 + me as u32).collect();
    stream.memcpy_htod(&data, &mut buf).unwrap();
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), data);

    // A user kernel launched with cudarc on the symmetric buffer.
    let module = nv.context().load_module(Ptx::from_src(INC_PTX)).unwrap();
    let inc = module.load_function("inc_u32").unwrap();
    let (ptr, _sync) = buf.device_ptr(&stream);
    let len = n as u32;
    let mut launch = stream.launch_builder(&inc);
    launch.arg(&ptr).arg(&len);
    // SAFETY: the kernel writes n u32 starting at ptr, all inside the buffer.
    unsafe { launch.launch(LaunchConfig::for_num_elems(len)) }.unwrap();

    // NVSHMEM moves the kernel's result to the peer, in stream order after the kernel.
    nv.put_device(&dst, &buf, 1 - me, &stream).unwrap();
    nv.quiet_on_stream(&stream);
    stream.synchronize().unwrap();
    nv.barrier_all().unwrap();
    let want: Vec<u32> = (0..n as u32).map(|i| i * 3 + (1 - me) as u32 + 1).collect();
    assert_eq!(dst.to_vec().unwrap(), want);
}
