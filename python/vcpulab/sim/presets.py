"""Workloads approximating the benchmarks of the published threads (docs/sources.md).

Each preset is a :class:`~vcpulab.sim.Workload` whose phases stand for what
the benchmark stresses in a guest kernel under overcommit. They are shaped
after what the benchmarks do, **not tuned to the published numbers**; compare
directions and rough magnitudes, not values.
"""

from __future__ import annotations

from vcpulab.sim._config import Barrier, Compute, Ipi, Lock, Sleep, Workload

__all__ = ["NAMES", "by_name", "ebizzy_like", "kernbench_like", "parsec_barrier_like", "spinlock_microbench", "sysbench_oltp_like"]


def ebizzy_like(*, lock_kind: str = "ticket", iterations: int = 0) -> Workload:
    """ebizzy ([S1], records/s): threads allocate, search and free memory
    records; in a guest the cost is the mm's spinlocks (page-table/mmap
    locks, ticket spinlocks in the 2012 guests) and TLB-shootdown IPIs.

    Phases: 15 µs user compute (exp) → a short kernel spinlock (2 µs hold, one
    lock shared by the VM) → with probability 0.02 a TLB shootdown IPI to all
    other vCPUs (1 µs handler). Run it with 2 threads per vCPU (as measured).
    Throughput = iterations ("records") per second.
    """
    return Workload(
        name="ebizzy_like",
        phases=(
            Compute(15_000, dist="exp"),
            Lock(0, lock_kind, 2_000),
            Ipi(0, 1_000, prob=0.02),
        ),
        iterations=iterations,
    )


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


#: The preset workloads by name (each its constructor's name).
NAMES = ("ebizzy_like", "kernbench_like", "parsec_barrier_like", "spinlock_microbench", "sysbench_oltp_like")


def by_name(name: str) -> Workload:
    """The preset ``name`` with its defaults (one of :data:`NAMES`)."""
    if name not in NAMES:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(NAMES)}, or pass a Workload")
    return globals()[name]()  # type: ignore[no-any-return]
