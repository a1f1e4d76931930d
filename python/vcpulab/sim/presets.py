"""Workloads approximating the benchmarks of the published threads (docs/sources.md).

Each preset is a :class:`~vcpulab.sim.Workload` whose phases stand for what
the benchmark stresses in a guest kernel under overcommit. They are shaped
after what the benchmarks do, **not tuned to the published numbers**; compare
directions and rough magnitudes, not values.
"""

from __future__ import annotations

from vcpulab.sim._config import Barrier, Compute, Ipi, Lock, Recv, Send, Sleep, Workload

#: The preset workloads by name (each its constructor's name).
NAMES = (
    "ebizzy_like",
    "kernbench_like",
    "parsec_barrier_like",
    "parsec_lock_heavy_like",
    "parsec_pipeline_like",
    "parsec_task_queue_like",
    "spinlock_microbench",
    "sysbench_oltp_like",
)

__all__ = ["NAMES", "by_name", *NAMES]


def ebizzy_like(*, lock_kind: str = "ticket", iterations: int = 0, mmap_sem: bool | str = False) -> Workload:
    """ebizzy ([S1], records/s): threads allocate, search and free memory
    records; in a guest the cost is the mm's spinlocks (page-table/mmap
    locks, ticket spinlocks in the 2012 guests) and TLB-shootdown IPIs.

    Phases: 15 µs user compute (exp) → a short kernel spinlock (2 µs hold, one
    lock shared by the VM) → with probability 0.02 a TLB shootdown IPI to all
    other vCPUs (1 µs handler; a TLB shootdown, which PV TLB flush can skip
    for preempted targets). Run it with 2 threads per vCPU (as measured).
    Throughput = iterations ("records") per second.

    ``mmap_sem=True`` adds where the real benchmark blocks: with probability
    0.1 an iteration maps or unmaps a record (ebizzy's allocations above
    glibc's mmap threshold), holding the mm's ``mmap_sem`` for writing for
    5 µs — a sleeping lock (rw_semaphore; optimistic spinning since 3.16,
    modelled as a ``mutex``), so waiting threads sleep and another thread of
    the vCPU runs. ``mmap_sem="rwsem"`` models both sides of the semaphore
    (``rwsem_read`` / ``rwsem_write``): each iteration's page fault on the
    fresh record takes it for reading (1 µs) and the map/unmap above for
    writing. The probability and the holds are vcpulab assumptions (shaped
    after the benchmark, not fitted). Default False (as before).
    """
    if mmap_sem not in (False, True, "rwsem"):
        raise ValueError(f"ebizzy_like: mmap_sem must be False, True or 'rwsem', got {mmap_sem!r}")
    phases: tuple = (Compute(15_000, dist="exp"), Lock(0, lock_kind, 2_000), Ipi(0, 1_000, prob=0.02, tlb_flush=True))
    if mmap_sem == "rwsem":
        phases += (Lock(1, "rwsem_read", 1_000), Lock(1, "rwsem_write", 5_000, prob=0.1))
    elif mmap_sem:
        phases += (Lock(1, "mutex", 5_000, prob=0.1),)
    return Workload(name="ebizzy_like", phases=phases, iterations=iterations)


def kernbench_like(*, lock_kind: str = "queued", iterations: int = 0) -> Workload:
    """kernbench ([S1], seconds to build a kernel): many short processes
    doing user compute, kernel work under short spinlocks (dcache/inode,
    page allocation), and some I/O waits.

    Phases: 40 µs user compute (exp) → 8 µs kernel compute → two spinlocks
    (1 µs holds) → with probability 0.05 a 200 µs sleep (I/O).
    """
    return Workload(
        name="kernbench_like",
        phases=(
            Compute(40_000, dist="exp"),
            Compute(8_000, dist="exp", mode="kernel"),
            Lock(0, lock_kind, 1_000),
            Lock(1, lock_kind, 1_000),
            Sleep(200_000, dist="exp", prob=0.05),
        ),
        iterations=iterations,
    )


def sysbench_oltp_like(*, iterations: int = 0) -> Workload:
    """sysbench OLTP (transactions/s): a database's worker threads; row and
    table locks are sleeping mutexes with optimistic spinning (the users of
    owner_on_cpu / vcpu_is_preempted, [S2]), plus short kernel
    spinlocks and I/O (log flush) waits.

    Phases: 30 µs user compute → mutex held 5 µs → PV queued spinlock 1 µs →
    with probability 0.2 a 100 µs sleep.
    """
    return Workload(
        name="sysbench_oltp_like",
        phases=(
            Compute(30_000, dist="exp"),
            Lock(0, "mutex", 5_000),
            Lock(1, "pv_queued", 1_000),
            Sleep(100_000, dist="exp", prob=0.2),
        ),
        iterations=iterations,
    )


def parsec_barrier_like(*, compute_ns: int = 200_000, iterations: int = 50) -> Workload:
    """PARSEC barrier-style kernels ([S3]: streamcluster, fluidanimate,
    ocean_cp…): data-parallel steps separated by barriers; the wall time is
    set by the slowest thread of each step, and the wake-up placement of the
    threads released by a barrier matters.

    Phases: compute ``compute_ns`` (uniform ±50 %) → barrier; ``iterations``
    steps (wall time).
    """
    return Workload(
        name="parsec_barrier_like",
        phases=(Compute(compute_ns, dist="uniform"), Barrier()),
        iterations=iterations,
    )


def spinlock_microbench(
    *, compute_ns: int = 20_000, hold_ns: int = 1_000, lock_kind: str = "ticket", iterations: int = 0
) -> Workload:
    """A guest-kernel lock microbenchmark: each thread alternates user compute
    (``compute_ns``, exponential) and one hot kernel spinlock held ``hold_ns``.
    The contention of a VM of V vCPUs is about V × hold / (compute + hold):
    0.95 for 20 vCPUs and 0.48 for 10 with the defaults. Used for the
    sched-map scenario of [S4], whose workload the thread does not name.
    """
    return Workload(
        name="spinlock_microbench",
        phases=(Compute(compute_ns, dist="exp"), Lock(0, lock_kind, hold_ns)),
        iterations=iterations,
    )


def parsec_pipeline_like(*, compute_ns: int = 200_000, iterations: int = 50) -> Workload:
    """PARSEC pipeline kernels (dedup, ferret: stages connected by work
    queues): each thread is a stage that computes an item (``compute_ns``,
    exponential), hands it to the next stage (the thread after it, a futex
    wake-up) and sleeps until its own next input arrives. Wake-ups between
    stages dominate; the next stage's vCPU placement decides the latency.
    Wall time for ``iterations`` items per stage. Shape: vcpulab assumption
    after the benchmarks' structure (Bienia et al., "The PARSEC benchmark
    suite", PACT 2008), not fitted."""
    return Workload(
        name="parsec_pipeline_like",
        phases=(Compute(compute_ns, dist="exp"), Send(1), Recv()),
        iterations=iterations,
    )


def parsec_task_queue_like(*, task_ns: int = 50_000, iterations: int = 200) -> Workload:
    """PARSEC task-queue kernels with work stealing (bodytrack's and
    facesim's thread pools): a thread takes a task from its queue under a
    short queue lock (a pthread mutex: spin, then futex sleep; modelled as a
    ``mutex``, 1 µs), runs it (``task_ns``, exponential), and with
    probability 0.1 steals from the shared victim queue (a second ``mutex``,
    2 µs); the wall time is the slowest thread's ``iterations`` tasks. Shape:
    vcpulab assumption after the benchmarks' structure (Bienia et al., PACT
    2008), not fitted."""
    return Workload(
        name="parsec_task_queue_like",
        phases=(
            Lock(0, "mutex", 1_000),
            Compute(task_ns, dist="exp"),
            Lock(1, "mutex", 2_000, prob=0.1),
        ),
        iterations=iterations,
    )


def parsec_lock_heavy_like(*, compute_ns: int = 20_000, hold_ns: int = 2_000, iterations: int = 200) -> Workload:
    """PARSEC lock-heavy kernels (fluidanimate's per-cell locks, canneal):
    short computations between fine-grained pthread mutexes (spin, then
    futex sleep: ``mutex``), two cells per step, a barrier every step.
    Shape: vcpulab assumption after the benchmarks' structure (Bienia et
    al., PACT 2008), not fitted."""
    return Workload(
        name="parsec_lock_heavy_like",
        phases=(
            Compute(compute_ns, dist="exp"),
            Lock(0, "mutex", hold_ns),
            Compute(compute_ns, dist="exp"),
            Lock(1, "mutex", hold_ns),
            Barrier(),
        ),
        iterations=iterations,
    )


def by_name(name: str) -> Workload:
    """The preset ``name`` with its defaults (one of :data:`NAMES`)."""
    if name not in NAMES:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(NAMES)}, or pass a Workload")
    return globals()[name]()  # type: ignore[no-any-return]
