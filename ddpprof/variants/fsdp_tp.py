"""``fsdp_tp``: FSDP2 over one dimension of a 2-D device mesh, tensor parallelism over the other.

The world's ranks form a ``dp`` × ``tp`` mesh (``--tp`` ranks per tensor-parallel group, default
2; rank ``r`` sits at ``(r // tp, r % tp)``). Each tensor-parallel group splits every layer of
the model between its ranks (``parallelize_module``): pairs of ``nn.Linear`` layers, the first
split by its output features (column-wise), the second by its input features (row-wise), as
Megatron-LM does, so that each pair costs one all-reduce of activations in forward and one of
their gradient in backward. An MLP's Linears pair up in order (an odd last layer stays whole);
a Llama-style decoder layer splits its attention by heads (q, k and v column-wise, o row-wise)
and its MLP (gate and up column-wise, down row-wise). Embeddings, norms and the head stay whole.
FSDP2 (``fully_shard``, one unit per block as in ``fsdp``) then shards the result over the
``dp`` dimension: each data-parallel group all-gathers and reduce-scatters the parameters of
its tensor-parallel slice.

The ranks of one tensor-parallel group compute one model replica together, so they train on
the same samples: a rank's data shard is its ``dp`` coordinate (:meth:`FSDPTP.data_shard`),
never its global rank. Gradient accumulation skips FSDP's reduce-scatter as ``fsdp`` does; the
tensor-parallel all-reduces are part of every micro-step's forward and backward.

**Which collective belongs to which dimension.** Every collective the training thread issues
runs inside a ``record_function`` span naming its mesh dimension (:func:`group_span`:
``ddpprof::group dp``, ``ddpprof::group tp``): FSDP's all-gathers and reduce-scatters through
FSDP2's custom-collective hooks, the row-wise layers' forward all-reduce around their output
redistribution, and the column-wise layers' backward all-reduce inside this module's own
replication of their input (:class:`_ReplicateInput`). ``run.json``'s ``mesh`` says which ranks
form each group.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel
from torch.profiler import record_function

from .base import wait_for
from .fsdp import FSDP, decoder_layers
from .mesh import MeshDim, MeshGroup, MeshRecord

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: The mesh's dimensions, outermost first: data parallel (FSDP), tensor parallel.
MESH_DIMS = ("dp", "tp")
Split = Literal["colwise", "rowwise"]
#: Modules an MLP's Linears may have between them: elementwise, so a column-wise layer's split
#: output feeds the next (row-wise) layer as it is.
_ELEMENTWISE = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Identity)
_ATTENTION: dict[str, Split] = {"q_proj": "colwise", "k_proj": "colwise", "v_proj": "colwise",
                                "o_proj": "rowwise"}
_MLP: dict[str, Split] = {"gate_proj": "colwise", "up_proj": "colwise", "down_proj": "rowwise"}


def group_span(dim: str) -> str:
    """The span around every collective this rank issues along mesh dimension ``dim``."""
    return f"ddpprof::group {dim}"


def tensor_parallel_layout(module: nn.Module, tp: int) -> dict[str, Split]:
    """The ``nn.Linear`` layers tensor parallelism splits (by qualified name) and how. Raises
    ``ValueError`` saying what ``tp`` does not divide, or why the model has no layout."""
    layers = decoder_layers(module)
    if layers is not None:
        return _decoder_layout(module, layers, tp)
    if isinstance(module, nn.Sequential) and all(
            isinstance(child, (nn.Linear, *_ELEMENTWISE)) for child in module):
        return _mlp_layout(module, tp)
    raise ValueError(f"no tensor-parallel layout for a {type(module).__name__}: fsdp_tp splits "
                     "an nn.Sequential MLP or Llama-style decoder layers")


def _mlp_layout(module: nn.Sequential, tp: int) -> dict[str, Split]:
    linears = [(name, child) for name, child in module.named_children()
               if isinstance(child, nn.Linear)]
    layout: dict[str, Split] = {}
    for (first, column), (second, _) in zip(linears[0::2], linears[1::2], strict=False):
        if column.out_features % tp:
            raise ValueError(f"layer {first} has {column.out_features} output features, not "
                             f"divisible by {tp} ranks")
        layout[first], layout[second] = "colwise", "rowwise"
    return layout


def _decoder_layout(module: nn.Module, layers: nn.ModuleList, tp: int) -> dict[str, Split]:
    config = getattr(module, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    if heads is None:
        raise ValueError(f"{type(module).__name__} has no config.num_attention_heads")
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    for what, count in (("attention heads", heads), ("key-value heads", kv_heads)):
        if count % tp:
            raise ValueError(f"{count} {what}, not divisible by {tp} ranks")
    layout: dict[str, Split] = {}
    for index, layer in enumerate(layers):
        for block, splits in (("self_attn", _ATTENTION), ("mlp", _MLP)):
            for name, split in splits.items():
                linear = getattr(getattr(layer, block, None), name, None)
                if not isinstance(linear, nn.Linear):
                    raise ValueError(f"decoder layer {index} has no {block}.{name} Linear (a "
                                     "Llama-style layer has q/k/v/o_proj and gate/up/down_proj)")
                if split == "colwise" and linear.out_features % tp:
                    raise ValueError(f"{block}.{name} has {linear.out_features} output "
                                     f"features, not divisible by {tp} ranks")
                layout[f"model.layers.{index}.{block}.{name}"] = split
    return layout


def tensor_parallel_problem(module: nn.Module, world_size: int, tp: int) -> str | None:
    """Why ``module`` cannot run under fsdp_tp with ``tp`` on ``world_size`` ranks, or None.
    Works on a model built on the meta device (the launcher checks before any launch)."""
    if world_size % tp:
        return f"does not divide the world size {world_size}"
    try:
        tensor_parallel_layout(module, tp)
    except ValueError as error:
        return str(error)
    return None


@dataclass
class _Counts:
    """Tensor-parallel all-reduces this rank issued since the last optimizer step."""

    all_reduce: int = 0


class _ReplicateInput(torch.autograd.Function):
    """A column-wise layer's input, whole on every rank of the group: forward, the input as a
    replicated DTensor (no communication); backward, the sum over the group of the partial
    input gradients each rank's columns give (Megatron-LM's ``f``), inside the group's span.
    ``DTensor.from_local`` does the same, but its backward runs where no span can reach it."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, mesh: DeviceMesh, counts: _Counts
                ) -> DTensor:
        ctx.mesh, ctx.counts = mesh, counts
        return DTensor.from_local(local, mesh, (Replicate(),), run_check=False)

    @staticmethod
    def backward(ctx: Any, grad: DTensor) -> tuple[torch.Tensor, None, None]:
        if not isinstance(grad, DTensor) or grad.placements == (Replicate(),):
            return (grad.to_local() if isinstance(grad, DTensor) else grad), None, None
        with record_function(group_span("tp")):
            ctx.counts.all_reduce += 1
            whole = grad.redistribute(ctx.mesh, (Replicate(),)).to_local()
            return _waited(whole), None, None


def _waited(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor, its collective finished (an ``AsyncCollectiveTensor`` waits lazily)."""
    wait = getattr(tensor, "wait", None)
    return wait() if callable(wait) else tensor


class _Colwise(ColwiseParallel):
    """``ColwiseParallel`` whose input's backward all-reduce runs inside the tp span."""

    def __init__(self, counts: _Counts) -> None:
        super().__init__()
        self.counts = counts

    # torch declares it a staticmethod, and calls it through the instance: a method works and
    # reaches self.counts
    def _prepare_input_fn(  # type: ignore[override]
            self, input_layouts: Any, desired_input_layouts: Any, mod: nn.Module,
            inputs: tuple[Any, ...], device_mesh: DeviceMesh) -> DTensor:
        # torch's Function.apply carries no annotations; mypy names it after this subclass, so
        # untyped_calls_exclude (pyproject.toml) does not reach it
        result: DTensor = _ReplicateInput.apply(  # type: ignore[no-untyped-call]
            inputs[0], device_mesh, self.counts)
        return result


class _Rowwise(RowwiseParallel):
    """``RowwiseParallel`` whose output all-reduce (partial sums to the whole output) is
    launched inside the tp span; its wait is where the output is first used."""

    def __init__(self, counts: _Counts) -> None:
        super().__init__()
        self.counts = counts

    def _prepare_output_fn(  # type: ignore[override]  # a method, as _Colwise's
            self, output_layouts: Any, use_local_output: bool, mod: nn.Module, outputs: DTensor,
            device_mesh: DeviceMesh) -> torch.Tensor:
        with record_function(group_span("tp")):
            if outputs.placements != tuple(output_layouts):
                self.counts.all_reduce += 1
            result: torch.Tensor = RowwiseParallel._prepare_output_fn(
                output_layouts, use_local_output, mod, outputs, device_mesh)
            return result


def _labelled_fsdp_collectives() -> tuple[Any, Any]:
    """FSDP2's default all-gather and reduce-scatter, each inside the dp span (FSDP2's
    ``set_custom_all_gather``/``set_custom_reduce_scatter`` take them). Launched
    asynchronously; where FSDP asks for a blocking one, the wait is a ``ddpprof::wait`` span
    inside the label, so that the time blocked on gloo reads as waiting, not as the label's own
    work."""
    # torch: only where a rank trains or a run is checked for it
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    def labelled(launch: Any, async_op: bool) -> dist.Work | None:
        with record_function(group_span("dp")):
            work = launch()
            if async_op:
                result: dist.Work | None = work
                return result
            wait_for(work)
            return None

    class AllGather(DefaultAllGather):
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: dist.ProcessGroup, async_op: bool = False) -> dist.Work | None:
            return labelled(lambda: super(AllGather, self).__call__(
                output_tensor, input_tensor, group, async_op=True), async_op)

    class ReduceScatter(DefaultReduceScatter):
        # None when blocking, as AllGather's (torch types this one's Work, but FSDP2 uses
        # the result only when it asked for async_op)
        def __call__(  # type: ignore[override]
                self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                group: dist.ProcessGroup, op: Any, async_op: bool = False) -> dist.Work | None:
            return labelled(lambda: super(ReduceScatter, self).__call__(
                output_tensor, input_tensor, group, op, async_op=True), async_op)

    return AllGather(), ReduceScatter()


class FSDPTP(FSDP):
    def __init__(self, module: nn.Module, tp: int = 2) -> None:
        # torch: only where a rank trains or a run is checked for it
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.tensor.parallel import parallelize_module

        world_size = dist.get_world_size()
        problem = tensor_parallel_problem(module, world_size, tp)
        if problem:  # every rank finds the same, before any collective
            raise ValueError(f"fsdp_tp with --tp {tp}: {problem}")
        device = next(module.parameters()).device.type
        mesh = init_device_mesh(device, (world_size // tp, tp), mesh_dim_names=MESH_DIMS)
        counts = _Counts()
        styles: dict[str, type[_Colwise | _Rowwise]] = {"colwise": _Colwise,
                                                         "rowwise": _Rowwise}
        plan: dict[str, ParallelStyle] = {name: styles[split](counts) for name, split in
                tensor_parallel_layout(module, tp).items()}
        # A column-wise layer's output is a view of its DTensor's local shard; FSDP2 warns that
        # an in-place op on it would skip its backward hooks. The models' next op (activation,
        # attention reshape) is out of place.
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* view tensor",
                                category=UserWarning)
        super().__init__(module, mesh=mesh["dp"],
                         split_layers=lambda: parallelize_module(module, mesh["tp"], plan))
        self.mesh, self.tp, self._counts = mesh, tp, counts
        self._tp_last_step: dict[str, int | None] = {"all_reduce": 0}
        for fsdp_module in module.modules():
            if isinstance(fsdp_module, FSDPModule):
                all_gather, reduce_scatter = _labelled_fsdp_collectives()
                fsdp_module.set_custom_all_gather(all_gather)
                fsdp_module.set_custom_reduce_scatter(reduce_scatter)

    def data_shard(self) -> tuple[int, int]:
        return self.mesh.get_local_rank("dp"), self.mesh["dp"].size()

    def _sync_gradients(self) -> None:
        super()._sync_gradients()
        self._tp_last_step = {"all_reduce": self._counts.all_reduce}
        self._counts.all_reduce = 0

    def collectives_per_dim(self) -> dict[str, dict[str, int | None]]:
        """Per mesh dimension, the collectives one optimizer step issued, by kind: FSDP's
        over dp (as ``fsdp`` counts them), the tensor-parallel all-reduces over tp (counted as
        they were issued, the last step's)."""
        return {"dp": super().collectives_per_sync(), "tp": dict(self._tp_last_step)}

    def collectives_per_sync(self) -> dict[str, int | None]:
        """Every collective of one optimizer step, both dimensions together (their kinds
        differ: FSDP all-gathers and reduce-scatters, tensor parallelism all-reduces)."""
        total: dict[str, int | None] = {}
        for counts in self.collectives_per_dim().values():
            for kind, count in counts.items():
                if count:
                    total[kind] = (total.get(kind) or 0) + count
        return total

    def _tp_split(self, param: nn.Parameter) -> bool:
        """Whether tensor parallelism splits ``param`` (a Shard placement on the tp dimension;
        parameters it leaves whole live on the dp dimension only)."""
        sharded = cast(DTensor, param)      # FSDP2 made every parameter a DTensor
        names = sharded.device_mesh.mesh_dim_names or ()
        return "tp" in names and isinstance(sharded.placements[names.index("tp")], Shard)

    def gradient_bytes(self, param: nn.Parameter) -> int:
        whole = param.numel() * param.element_size()
        return whole // self.tp if self._tp_split(param) else whole

    def mesh_record(self) -> MeshRecord:
        """The mesh, with every group's c10d name and description, gathered from the ranks
        (each knows only its own groups' names)."""
        mine = {dim: (self.mesh.get_group(dim).group_name, self.mesh.get_group(dim).group_desc)
                for dim in MESH_DIMS}
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        ranks = self.mesh.mesh
        counts = self.collectives_per_dim()
        dims = []
        for axis, dim in enumerate(MESH_DIMS):
            # rows of ranks that differ only in their coordinate along ``axis``
            groups = ranks.transpose(axis, -1).reshape(-1, ranks.shape[axis]).tolist()
            dims.append(MeshDim(
                name=dim, size=ranks.shape[axis], span=group_span(dim),
                collectives_per_step=counts[dim],
                groups=[MeshGroup(name=f"{dim}{index}", ranks=members,
                                  pg_name=everyone[members[0]][dim][0],
                                  pg_desc=everyone[members[0]][dim][1])
                        for index, members in enumerate(groups)]))
        split = sum(p.numel() for p in self.module.parameters() if self._tp_split(p))
        return MeshRecord(dims=dims, ranks=ranks.flatten().tolist(), tp_split_parameters=split)
