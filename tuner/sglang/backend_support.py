"""Which attention backends SGLang's kernels are built for, by the GPU's compute capability (CUDA).

    built_for(backend, sm_major) -> True / False / None (not known here)

Facts from SGLang's source and its issues (reference/sglang.md §2, §6), not measurements: FlashAttention
3 is Hopper/Ampere code (`fa3` asserts SM80-SM90; on SM100 and SM120 it fails to import or
launch); FlashMLA's sparse and dense kernels ship SM90 and SM100 builds; the trtllm-gen kernels
(`trtllm`, `trtllm_mla`, `trtllm_mha`) and CUTLASS MLA ship SM100/103 cubins only ("TllmGenFmhaRunner
... Unsupported architecture" elsewhere); FlashInfer's sparse MLA runs on SM90, SM100 and SM120;
TileLang, Triton, FlashInfer and torch_native compile for the GPU they run on; aiter and wave are ROCm
code, ascend is Ascend NPU code. A backend this table does not name is not known: no fact is assumed.

The search uses this as a prior of the support mechanism (tuner.search.feasible), never as a rule:
a build can add an architecture, and a launch that runs always wins over the table.
"""

from __future__ import annotations

ANY_CUDA = (7, 8, 9, 10, 11, 12)
BUILT_FOR: dict[str, tuple[int, ...]] = {
    "fa3": (8, 9),
    "flashmla": (9, 10),
    "flashmla_sparse": (9, 10),
    "flashmla_kv": (9, 10),
    "flashmla_auto": (9, 10),
    "trtllm": (10,),
    "trtllm_mla": (10,),
    "trtllm_mha": (10,),
    "cutlass_mla": (10,),
    "flashinfer_sparse_mla": (9, 10, 12),
    "tilelang": (8, 9, 10, 12),
    "triton": ANY_CUDA,
    "flashinfer": ANY_CUDA,
    "torch_native": ANY_CUDA,
    "aiter": (),
    "wave": (),
    "ascend": (),
}


def sm_major(compute_capability: str | None) -> int | None:
    """The major of a CUDA compute capability ("9.0" -> 9); None for anything else (ROCm, NPU, unknown)."""
    if not compute_capability:
        return None
    head = str(compute_capability).split(".", 1)[0].strip()
    return int(head) if head.isdigit() else None


def built_for(backend: str | None, major: int | None) -> bool | None:
    """Whether SGLang ships `backend`'s kernels for this CUDA major (None: not known)."""
    if backend is None or major is None or backend not in BUILT_FOR:
        return None
    return major in BUILT_FOR[backend]
