"""The table of device kernel names that mean communication, each with where the name comes
from: data, read by the predicates of :mod:`ddpprof.trace.classify`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommPattern:
    """A regular expression, searched in a device kernel's name, that means communication."""

    library: str
    regex: str
    source: str


#: The one table of kernel names that are communication, each with where the name comes from.
#: HTA 0.5.0 knows only the first; ``--hta-compat`` uses only that one.
COMM_KERNEL_PATTERNS: tuple[CommPattern, ...] = (
    CommPattern("NCCL", r"^nccl.*Kernel",
                "NCCL ncclKernel_*/ncclDevKernel_*; HTA 0.5.0 hta/utils/utils.py NCCL_KERNEL_RE"),
    CommPattern("RCCL", r"^rccl|^nccl.*Kernel",
                "ROCm RCCL keeps NCCL's kernel names (ncclDevKernel_Generic, ...); rccl* too"),
    CommPattern("DeepEP", r"deep_ep::",
                "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu: "
                "dispatch, combine, notify_dispatch, cached_notify, ... in namespace deep_ep"),
    CommPattern("NVSHMEM", r"nvshmem",
                "NVIDIA NVSHMEM device collectives and proxies (nvshmemi_*, nvshmem_*)"),
    CommPattern("vLLM custom all-reduce", r"cross_device_reduce_(?:1|2)stage",
                "vllm-project/vllm csrc/custom_all_reduce.cuh (also used by SGLang)"),
    CommPattern("MSCCL++", r"mscclpp",
                "microsoft/mscclpp kernels (mscclpp::...)"),
    CommPattern("HCCL", r"^hcom_|^hccl",
                "Ascend HCCL device tasks (hcom_allReduce_..., hccl...)"),
)

#: Kernels that are communication but that HTA, TraceLens and tb_plugin count as compute, so
#: counting them here would move compute % away from every reference tool. They are reported
#: in a note that says how to count them (``--comm-kernel``).
SUSPECTED_COMM_KERNELS: tuple[CommPattern, ...] = (
    CommPattern("PyTorch symmetric memory", r"multimem_all_reduce|one_shot_all_reduce|"
                r"two_shot_all_reduce|multimem_all_gather|multimem_reduce_scatter",
                "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu"),
    CommPattern("TensorRT-LLM custom all-reduce", r"allreduce_fusion_kernel|"
                r"oneShotAllReduceKernel|twoShotAllReduceKernel",
                "NVIDIA TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu"),
)
