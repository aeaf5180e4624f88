//! Pretend nodes (NVSH_PRETEND_NODE_SIZE): 4 PEs as
//! 2 nodes x 2 on 4 GPUs. Run by scripts/gpu_test.sh (tests named peN_* run as N-PE jobs);
//! each sets the variable before init, so it applies to that process only. Where the PEs share
//! GPUs (fewer than 4), init refuses pretend nodes and the tests skip.

mod common;

use common::gpu_test;
use nvshmem::Nvshmem;

/// The runtime of 4 PEs as pretend nodes of `g`, or None (after a skip line).
fn pretend_runtime(g: i32) -> Option<Nvshmem> {
    common::pretend_runtime(4, g)
}

gpu_test!(4, pretend_nodes_map_peers_only_inside_them);
/// The host's view: peer mappings only inside a pretend node, node and rail teams of the
/// pretend layout.
fn pretend_nodes_map_peers_only_inside_them() {
    let Some(nv) = pretend_runtime(2) else { return };
    let me = nv.my_pe();
    let layout = nv.node_layout().expect("a node layout under pretend nodes");
    assert_eq!((layout.size(), layout.nodes()), (2, 2));
    assert_eq!(nv.pretend_nodes(), Some(layout));
    let buf = nv.alloc_zeroed::<u64>(16).unwrap();
    for pe in 0..4 {
        let mapped = buf.peer_ptr(pe).unwrap().is_some();
        assert_eq!(mapped, pe / 2 == me / 2, "PE {me} maps PE {pe}: {mapped}");
    }
    let world = nv.team_world();
    let members = |t: &nvshmem::Team<'_>| -> Vec<i32> {
        (0..t.n_pes())
            .map(|r| t.translate_pe(r, &world).unwrap().unwrap())
            .collect()
    };
    let node = nv.team_node();
    assert_eq!(members(&node), [me / 2 * 2, me / 2 * 2 + 1]);
    assert_eq!(members(&nv.team_shared()), members(&node));
    let rail = nv.team_rail().expect("a rail team over 2 nodes");
    assert_eq!(members(&rail), [me % 2, me % 2 + 2]);
    nv.barrier_all().unwrap();
}
