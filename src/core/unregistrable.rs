//! Why memory cannot be registered into the symmetric heap ([`crate::core::registered`]): the
//! reason an [`crate::Error::NotRegistrable`] carries, apart from the registration code so that
//! the error type needs nothing of it.

/// Why memory cannot be registered ([`crate::Error::NotRegistrable`]); its code travels in a PE's
/// vote, so every PE can say why a peer refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unregistrable {
    /// NVSHMEM's heap is not CUDA VMM memory (`NVSHMEM_DISABLE_CUDA_VMM=1`): this machine's
    /// NVSHMEM cannot register anything.
    HeapNotVmm = 1,
    /// Not a CUDA VMM allocation (cudaMalloc, cuMemAllocAsync, cudarc): stage it instead.
    NotVmm,
    /// Not device memory of this PE's GPU.
    OtherGpu,
    /// Allocated with another shareable handle type than NVSHMEM's heap.
    HandleType,
    /// The size is not a positive multiple of NVSHMEM's heap granularity.
    Granularity,
    /// This GPU has no read-write access mapped to it.
    NoAccess,
    /// The PEs asked for different sizes.
    SizeDiffers,
    /// The heap's address range cannot hold it.
    HeapFull,
    /// NVSHMEM's optional checks would refuse PEs sharing PE 0's device ordinal.
    SharedGpuChecks,
}

impl Unregistrable {
    pub(crate) const ALL: [Unregistrable; 9] = [
        Unregistrable::HeapNotVmm,
        Unregistrable::NotVmm,
        Unregistrable::OtherGpu,
        Unregistrable::HandleType,
        Unregistrable::Granularity,
        Unregistrable::NoAccess,
        Unregistrable::SizeDiffers,
        Unregistrable::HeapFull,
        Unregistrable::SharedGpuChecks,
    ];

    pub(crate) fn from_code(code: u64) -> Option<Unregistrable> {
        Unregistrable::ALL.into_iter().find(|r| *r as u64 == code)
    }

    /// The reason in general terms (a peer's refusal; the refusing PE says more).
    pub fn reason(self) -> &'static str {
        match self {
            Unregistrable::HeapNotVmm => {
                "NVSHMEM's symmetric heap is not CUDA VMM memory (NVSHMEM_DISABLE_CUDA_VMM=1?), \
                 and NVSHMEM registers buffers only into its VMM heap"
            }
            Unregistrable::NotVmm => {
                "the memory is not a CUDA VMM allocation (cuMemCreate + cuMemMap): \
                 cuMemRetainAllocationHandle refuses it"
            }
            Unregistrable::OtherGpu => "the memory is not device memory of this PE's GPU",
            Unregistrable::HandleType => {
                "the allocation's shareable handle type differs from NVSHMEM's heap's"
            }
            Unregistrable::Granularity => {
                "the size is not a positive multiple of NVSHMEM's heap granularity \
                 (NVSHMEM_CUMEM_GRANULARITY, default 512 MiB)"
            }
            Unregistrable::NoAccess => "this GPU has no read-write access mapped to the memory",
            Unregistrable::SizeDiffers => "the PEs asked to register different sizes",
            Unregistrable::HeapFull => {
                "the heap's address range (NVSHMEM_MAX_MEMORY_PER_GPU, default 128 GiB) cannot \
                 hold it beside what is allocated and registered"
            }
            Unregistrable::SharedGpuChecks => {
                "NVSHMEM_ENABLE_ERROR_CHECKS is on and PEs of this node share PE 0's device \
                 ordinal, which NVSHMEM's check refuses (unset NVSHMEM_ENABLE_ERROR_CHECKS)"
            }
        }
    }
}
