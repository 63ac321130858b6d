"""Processes of a job: where this process stands in it, how the processes talk, and how they are started.

One code path serves every layout. A single process is a world of size 1; `--nproc N` (CPU, gloo)
and `--gpus N` (CUDA, NCCL) spawn N workers on this machine that meet on a free port of 127.0.0.1
(`spawn`); under torchrun (or SLURM through torchrun) each process joins the job from its
environment (`env://`: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; `torchrun_env`).
Each process joins the group (`process_group`) and gets a `Comm`, the few collectives training
needs, and a `StopSignal`, so that Ctrl-C stops every rank together after the same update.

Process plumbing only: what each process computes is the caller's (`nmt.training.launch` passes its entry
point to `spawn`), and nothing here imports the training code.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any, Callable, Optional, TypeVar, cast

import torch
import torch.distributed as dist
from torch import Tensor

from nmt.config import MAX_THREADS
from nmt.core.errors import ConfigError, NmtError, TrainingDiverged, TrainingInterrupted, ref
from nmt.core.progress import ProgressFn, ignore

T = TypeVar("T")

# Ranks wait for rank 0 while it validates (BLEU decoding can be slow on big valid sets).
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=60)


# -- communication -------------------------------------------------------------------------------


class Comm:
    """This process's place in the job and the few collectives training needs (no-ops for one process)."""

    def __init__(self, rank: int = 0, world: int = 1, device: torch.device = torch.device("cpu")):
        self.rank, self.world, self.device = rank, world, device

    def all_sum(self, values: Tensor) -> Tensor:
        if self.world > 1:
            dist.all_reduce(values)
        return values

    def broadcast(self, values: list[float]) -> list[float]:
        """Rank 0's `values` on every rank."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        if self.world > 1:
            dist.broadcast(t, src=0)
        return t.tolist()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def from_rank0(self, fn: Callable[[], T]) -> T:
        """fn() computed on rank 0 and handed to every rank; an NmtError there is raised everywhere."""
        box: list[Any] = [None]
        if self.rank == 0:
            try:
                box[0] = ("ok", fn())
            except NmtError as e:
                box[0] = ("error", e)
        if self.world > 1:
            dist.broadcast_object_list(box, src=0)
        kind, value = box[0]
        if kind == "error":
            raise value
        return cast(T, value)  # fn()'s result, broadcast from rank 0

    def all_succeed(self, fn: Callable[[], T]) -> T:
        """fn() on every rank; an NmtError on any rank is raised on every rank, naming the rank and its
        machine (the lowest failing rank's), so that no rank waits in its next collective for one that has
        exited (gloo notices; NCCL waits for COLLECTIVE_TIMEOUT).

        On several machines a rank may fail where rank 0 does not: --data or the checkpoint to resume
        from missing on that machine."""
        value: Optional[T]
        error: Optional[NmtError]
        try:
            value, error = fn(), None
        except NmtError as e:
            value, error = None, e
        outcomes = self.gather((error, socket.gethostname()))
        failed = [(rank, e, host) for rank, (e, host) in enumerate(outcomes) if e is not None]
        if not failed:
            return cast(T, value)  # fn() returned it: no rank failed, this one included
        rank, error, host = failed[0]
        if self.world > 1:
            error.args = (f"rank {rank} (on {host}): {error}", *error.args[1:])
        raise error


# SIGTERM is what schedulers (SLURM, Kubernetes) and `kill` send before they kill: save, like Ctrl-C.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignal:
    """Ctrl-C (SIGINT) or SIGTERM during training: stop after the current update, with a checkpoint, then
    TrainingInterrupted. In a lone process a second Ctrl-C aborts at once (`escalate`). Workers
    never escalate: they may get SIGINT twice for one request (from the terminal and from their
    launcher, or as parent-death signal), and their launcher is the one that ends them by force.
    `shared` is an Event the launching process sets, so that every rank sees a request."""

    def __init__(self, shared: Any = None, escalate: bool = True):
        self.requested = False
        self.signum: int = signal.SIGINT  # the signal that asked to stop (SIGTERM: a scheduler or `kill`)
        self.shared, self.escalate = shared, escalate

    def is_set(self) -> bool:
        return self.requested or (self.shared is not None and self.shared.is_set())

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and self.escalate:
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


# -- launching -----------------------------------------------------------------------------------


def workers(gpus: int, nproc: int) -> tuple[int, bool]:
    """Processes to start on this machine, and whether they use CUDA."""
    if nproc < 1:
        raise ConfigError(f"{ref('nproc')} must be at least 1, got {nproc}")
    if nproc > MAX_THREADS:  # a process per core at most, on any machine there is
        raise ConfigError(f"{ref('nproc')} must be at most {MAX_THREADS}, got {nproc}")
    if gpus < 0:
        raise ConfigError(f"{ref('gpus')} must not be negative, got {gpus}")
    if gpus == 0:
        return nproc, False
    if nproc > 1:
        raise ConfigError(f"{ref('nproc')} {nproc} starts CPU workers; {ref('gpus')} {gpus} already starts one "
                          f"process per GPU; drop {ref('nproc')}")
    if not torch.cuda.is_available():
        raise ConfigError(f"{ref('gpus')} {gpus}: no CUDA device is available; use {ref('gpus')} 0 (CPU; "
                          f"{ref('nproc')} N for N workers)")
    if gpus > torch.cuda.device_count():
        raise ConfigError(f"{ref('gpus')} {gpus}: only {torch.cuda.device_count()} CUDA devices are visible; use "
                          f"{ref('gpus')} "
                          f"{torch.cuda.device_count()} or fewer")
    return gpus, True


def torchrun_env() -> Optional[tuple[int, int, int]]:
    """(rank, world size, local rank) when launched by torchrun (or SLURM through torchrun), else None."""
    if not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now, for the single-machine rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # getsockname() is Any: its shape depends on the family
        return port


@contextlib.contextmanager
def process_group(rank: int, world: int, local_rank: int, use_cuda: bool, init_method: Optional[str],
                  threads: int = 0) -> Iterator[Comm]:
    """This process as rank `rank` of `world`: its device and threads set, the group joined (world > 1)."""
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if threads > 0:
        torch.set_num_threads(threads)
    elif world > 1 and not use_cuda and init_method != "env://":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # CPU workers share this machine's cores
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo", init_method=init_method, rank=rank,
                                world_size=world, timeout=COLLECTIVE_TIMEOUT)
    try:
        yield Comm(rank, world, device)
        if world > 1:
            # Every rank leaves together: a rank that tears gloo down while another still talks to it kills that
            # one (C++ "terminate called without an active exception", SIGABRT), and its torchrun node then waits
            # for a restart that never comes (seen on a loaded 2-core machine, 1 run in 3)
            dist.barrier()
    finally:
        if world > 1:
            dist.destroy_process_group()


# What a spawned process runs: entry(rank, init_method, progress, stop, *args) -> rank 0's result.
Entry = Callable[..., Any]


def _spawned_worker(rank: int, entry: Entry, args: tuple[Any, ...], init_method: str, queue: Any,
                    stop_event: Any) -> None:
    """A worker started by `spawn`; talks to the launcher through `queue`."""
    progress: ProgressFn = (lambda event: queue.put(("progress", event))) if rank == 0 else ignore
    try:
        result = entry(rank, init_method, progress, StopSignal(stop_event, escalate=False), *args)
    except (TrainingInterrupted, TrainingDiverged) as e:
        # Every rank stops together here; rank 0's message names the checkpoint.
        if rank == 0:
            queue.put(("error", e))
        return
    except NmtError as e:
        queue.put(("error", e))
        sys.exit(1)  # a non-zero exit makes the launcher stop the other ranks, which would wait for this one
    if rank == 0:
        queue.put(("result", result))


def spawn(entry: Entry, args: tuple[Any, ...], world: int, progress: ProgressFn) -> Optional[Any]:
    """Run `entry` in `world` processes on this machine; relay rank 0's progress, return its result
    (None if the workers ended without one) or raise its error.

    Ctrl-C or SIGTERM asks the workers to stop together (they raise TrainingInterrupted, which
    carries that signal); a second Ctrl-C kills them and raises KeyboardInterrupt.
    """
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessContext, ProcessExitedException, ProcessRaisedException
    from torch.multiprocessing.spawn import start_processes as untyped_start

    ctx = mp.get_context("spawn")
    queue, stop_event = ctx.Queue(), ctx.Event()
    init_method = f"tcp://127.0.0.1:{free_port()}"
    found: dict[str, Any] = {}
    stopped_by: dict[str, int] = {}

    def drain() -> None:
        _relay(queue, progress, found)

    def on_signal(signum: int, frame: Any) -> None:
        if stop_event.is_set():
            raise KeyboardInterrupt
        stop_event.set()  # the workers stop together after the current update
        stopped_by["signum"] = signum

    # torch leaves start_processes unannotated; with join=False it returns the workers' ProcessContext.
    start_processes: Callable[..., ProcessContext] = untyped_start
    context = start_processes(_spawned_worker, args=(entry, args, init_method, queue, stop_event), nprocs=world,
                              join=False, start_method="spawn")
    in_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS} if in_main else {}
    try:
        while not context.join(timeout=0.2):
            drain()
    except KeyboardInterrupt:
        for p in context.processes:
            if p.is_alive():
                p.kill()  # not terminate(): the workers treat SIGTERM as a request to save and stop
        raise
    except (ProcessRaisedException, ProcessExitedException):
        drain()
        if "error" in found:
            raise found["error"] from None
        raise  # not a user error: the worker's traceback says what went wrong
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    drain()
    return _outcome(found, stopped_by)


def _relay(queue: Any, progress: ProgressFn, found: dict[str, Any]) -> None:
    """Pass on what the workers have put in `queue` so far: their progress to `progress`, the first
    result and the first error into `found`."""
    import queue as queue_module

    while True:
        try:
            kind, value = queue.get_nowait()
        except queue_module.Empty:
            return
        if kind == "progress":
            progress(value)
        else:
            found.setdefault(kind, value)


def _outcome(found: dict[str, Any], stopped_by: dict[str, int]) -> Optional[Any]:
    """Rank 0's result once the workers have ended, or its error raised (with the signal that stopped it)."""
    if "error" in found:
        error = found["error"]
        if isinstance(error, TrainingInterrupted) and "signum" in stopped_by:
            error.signum = stopped_by["signum"]  # the workers saw the request, not the signal
        raise error
    return found.get("result")
