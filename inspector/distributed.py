"""Whole-dataset sweeps under torchrun: shard samples by rank, gather the counts on rank 0.

    torchrun --nproc_per_node 8 -m inspector eval CKPT SAMPLES --json

NCCL on GPUs (each rank takes cuda:LOCAL_RANK), gloo on CPU. Counts are exact sums, so the merged
report equals a single-process run. `sweep RUN_DIR` shards the run's checkpoints instead (each
rank evaluates whole checkpoints over every sample; rank 0 puts them back in training order).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from inspector.evaluate import Report, WiringReport
from inspector.metrics import sum_steps
from inspector.metrics.rounds import AcceptStats


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, n: int) -> list[int]:
        """Round-robin, so long and short samples spread evenly over ranks."""
        return list(range(self.rank, n, self.world_size))


def init_from_env(device: str) -> tuple[DistContext | None, str]:
    """Join the process group torchrun set up, if any; returns the context and the device to use."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None, device
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        device = f"cuda:{local}"
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistContext(dist.get_rank(), dist.get_world_size(), local), device


def gather_report(ctx: DistContext, report: Report) -> Report | None:
    """All ranks' reports merged on rank 0 (None elsewhere)."""
    import torch.distributed as dist

    parts: list[Report | None] = [None] * ctx.world_size
    dist.all_gather_object(parts, report)
    _close()
    if not ctx.is_main:
        return None
    return merge_reports([p for p in parts if p is not None])


def _close() -> None:
    """Every rank has the reports: leave the group together and shut it down before the process
    exits (a gloo group torn down at interpreter exit, while a peer is already gone, can abort
    a rank with SIGABRT)."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def merge_reports(parts: list[Report]) -> Report:
    first = parts[0]
    wirings: list[WiringReport] = []
    for w_idx, w in enumerate(first.wirings):
        per_sample = sorted(
            (s for p in parts for s in p.wirings[w_idx].per_sample), key=lambda s: s[0]
        )
        positions = sorted(
            (r for p in parts for r in p.wirings[w_idx].positions),
            key=lambda r: (r["sample"], r["step"], r["pos"]),
        )
        accept = None
        if w.accept is not None:
            accept = AcceptStats(w.accept.depth)
            for p in parts:
                if p.wirings[w_idx].accept is not None:
                    accept.add(p.wirings[w_idx].accept)
        wirings.append(
            WiringReport(
                wiring=w.wiring,
                label=w.label,
                name=w.name,
                steps=sum_steps(s for _, _, s in per_sample),
                per_sample=per_sample,
                positions=positions,
                accept=accept,
            )
        )
    return replace(first, **Report.merged_fields(parts), wirings=wirings)


def gather_accept(ctx: DistContext, report):
    """The serving replay's per-rank reports merged on rank 0 (None elsewhere): the same rounds
    as one process, so the pooled numbers are exact sums."""
    import torch.distributed as dist

    parts: list = [None] * ctx.world_size
    dist.all_gather_object(parts, report)
    _close()
    if not ctx.is_main:
        return None
    return merge_accept([p for p in parts if p is not None])


def merge_accept(parts: list):
    first = parts[0]
    wirings = [
        replace(
            w,
            per_sample=sorted(
                (s for p in parts for s in p.wirings[w_idx].per_sample), key=lambda s: s.index
            ),
        )
        for w_idx, w in enumerate(first.wirings)
    ]
    return replace(first, **first.merged_fields(parts), wirings=wirings)


def gather_sweep(ctx: DistContext, report, order: Sequence[str]):
    """The ranks' sweep reports (each over its shard of the checkpoints) merged on rank 0, in
    the run's order (`order`: the checkpoint folders); None elsewhere."""
    import torch.distributed as dist

    parts: list = [None] * ctx.world_size
    dist.all_gather_object(parts, report)
    _close()
    if not ctx.is_main:
        return None
    return merge_sweep([p for p in parts if p is not None], order)


def merge_sweep(parts: list, order: Sequence[str]):
    """One `SweepRunReport` from the ranks' (rank 0 first, which alone carries the folders the
    scan refused): the results and the refused checkpoints in the run's order, as one process
    lists them."""
    rank = {p: i for i, p in enumerate(order)}
    first = parts[0]
    results = sorted((r for p in parts for r in p.results), key=lambda r: rank[r.path])
    refused = [(p, why) for part in parts for p, why in part.refused]
    scanned = [x for x in refused if x[0] not in rank]  # the scan's, before any checkpoint ran
    ran = sorted((x for x in refused if x[0] in rank), key=lambda x: rank[x[0]])
    return replace(
        first,
        samples=max(p.samples for p in parts),
        results=results,
        refused=[*scanned, *ran],
    )
