"""The names of work: which host ops and kernels are matrix products (the loader's FLOPs, the
critical path's ``--faster gemm``), and the categories of compute that ``ddpprof diff``
attributes step time to, by name. Data, read by the predicates of
:mod:`ddpprof.trace.classify`."""

from __future__ import annotations

import re

#: Matrix products whose FLOPs the loader computes from their shapes (``simulate`` compares the
#: same product's speed with and without a collective in flight): the position of the first
#: factor among the inputs (``addmm``'s first input is the added bias).
MATMUL_OPS = {"aten::mm": 0, "aten::addmm": 1, "aten::bmm": 0, "aten::baddbmm": 1}
#: Work classes that ``critical-path --faster CLASS=PCT`` speeds up: matrix products (host
#: ops of :data:`MATMUL_OPS` and ``aten::matmul``/``aten::linear``, GEMM kernels of cuBLAS,
#: CUTLASS and their xmma/wgmma generations), and any compute.
GEMM = re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear)$|gemm|cutlass|xmma|wgmma",
                  re.IGNORECASE)
WORK_CLASSES: dict[str, re.Pattern[str]] = {"gemm": GEMM, "compute": re.compile(r"")}


#: Categories of compute (kernels on a GPU, host ops on a CPU run) for the step-time
#: attribution of ``ddpprof diff``: the first whose pattern is found in the name. Convolutions
#: and embeddings come before GEMM (cuDNN's implicit-GEMM kernels are convolutions, FBGEMM's
#: embedding kernels are not matrix products), norms before reductions (a layer norm's
#: moments are its own), copies before elementwise.
WORK_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
        ("optimizer", r"multi_tensor_apply|fused_adam|adamw?_|_foreach_|lamb_|sgd_"),
        ("attention", r"flash|fmha|attention|attn|sdpa|scaled_dot_product|\bmha"),
        ("conv", r"conv|fprop|dgrad|wgrad|winograd|cudnn"),
        ("embedding", r"embedding|fbgemm_gpu::|index_?select|gather|scatter|index_add|"
                      r"^aten::index(?:_put_?)?$"),
        ("gemm", GEMM.pattern + r"|gemv|splitkreduce|cublas|triton_tem"),
        ("norm", r"norm|softmax|moments"),
        ("reduction", r"reduce|scan|sum\b|sum_|mean|nll_loss|cross_entropy|argmax|argmin|topk|"
                      r"sort|triton_red|triton_per|aten::(?:max|min|amax|amin|prod|all|any)$"),
        ("copy", r"copy|catarray|^aten::(?:cat|contiguous|to|_to_copy|clone|stack)$"),
        ("elementwise", r"elementwise|pointwise|triton_poi|functor|^aten::(?:add|sub|rsub|mul|div|"
                        r"neg|abs|exp|log|pow|sqrt|rsqrt|reciprocal|sign|relu|gelu|silu|"
                        r"sigmoid|tanh|erf|threshold|hardtanh|leaky_relu|softplus|mish|dropout|"
                        r"native_dropout|clamp|where|masked_fill|fill|zero|addcmul|addcdiv|lerp|"
                        r"maximum|minimum|eq|ne|lt|le|gt|ge|logical_\w+|bitwise_\w+)"
                        r"(?:_backward)?_?$"),
    ))
#: Categories that are not read from a name: work inside an ``Optimizer.*`` span (the
#: optimizer's step, or a kernel launched from it), work inside the data loader's span, and
#: everything no pattern names.
OPTIMIZER_CATEGORY, DATALOADER_CATEGORY, OTHER_CATEGORY = "optimizer", "data loading", "other"
