"""Workloads approximating the benchmarks of the published threads (docs/sources.md).

Each preset is a [`Workload`][vcpulab.sim.Workload] whose phases stand for what
the benchmark stresses in a guest kernel under overcommit. They are shaped
after what the benchmarks do, **not tuned to the published numbers**; compare
directions and rough magnitudes, not values.
"""

from __future__ import annotations

from vcpulab.sim._workload import Barrier, Compute, Ipi, Lock, Recv, Send, Sleep, TaskQueue, Workload

#: The preset workloads by name (each its constructor's name).
NAMES = (
    "ebizzy_like",
    "ebizzy_no_mmap_like",
    "kernbench_like",
    "parsec_barrier_like",
    "parsec_lock_heavy_like",
    "parsec_pipeline_like",
    "parsec_task_queue_like",
    "spinlock_microbench",
    "sysbench_oltp_like",
)

__all__ = [
    "EBIZZY_2019_LRU_SECTIONS",
    "EBIZZY_2019_RECORD_NS",
    "FUTEX_HASH_BUCKETS_3X",
    "NAMES",
    "SYSBENCH_ROW_SITES",
    "by_name",
    *NAMES,
]


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


#: Work per ebizzy record on the 2019 Skylake server, ns of one hardware
#: thread running alone on its core: 80 vCPUs × 0.65 (the 2019 era's
#: ``Host.smt_speed_pct``: both Hyper-Threads of each core were busy) /
#: 21443 records/s (1 VM of 80 vCPUs on 80 CPUs, not overcommitted, before
#: d73eb57b80b9; see [`ebizzy_no_mmap_like`][vcpulab.sim.presets.ebizzy_no_mmap_like]) = 2 425 034 ns.
EBIZZY_2019_RECORD_NS = round(80 * 0.65 / 21443 * 1e9)


#: LRU-lock sections of one ebizzy -M record on a 5.2 guest: its 128 fresh pages
#: join the LRU in pagevecs of ``PAGEVEC_SIZE`` = 15 (``__pagevec_lru_add``:
#: ceil(128 / 15) = 9 sections while they are faulted in), and the trim frees them
#: in ``release_pages`` batches of ``SWAP_CLUSTER_MAX`` = 32 (128 / 32 = 4 sections
#: after the shootdown); include/linux/pagevec.h, include/linux/swap.h, mm/swap.c
EBIZZY_2019_LRU_SECTIONS = (9, 4)


def ebizzy_no_mmap_like(
    *,
    lock_kind: str = "pv_queued",
    iterations: int = 0,
    lru_hold_ns: int | None = None,
    record_ns: int = EBIZZY_2019_RECORD_NS,
) -> Workload:
    """ebizzy ``-M`` ("never use mmap") as the 2019 KVM sources ran it
    (records/s): one iteration of the workload is one ebizzy record.

    What ebizzy does per record (ebizzy.c ``search_mem``; Valerie Henson,
    2006-2008, https://sourceforge.net/projects/ebizzy/): allocate a buffer
    of the chunk size, copy a random chunk into it, binary-search it, free
    it. With ``-M`` the buffer comes from glibc's per-thread heap, and the
    free trims that heap with ``madvise(MADV_DONTNEED)``: ``zap_page_range``
    → ``flush_tlb_mm_range`` → ``smp_call_function_many`` to every other CPU
    the mm has run on (the call trace of Wanpeng Li, "KVM: Fix leak vCPU's
    VMCS value into other pCPU", commit 17e433b54393, 2019, taken while
    running ebizzy in three 80-vCPU VMs). The sender spins until every
    target has run its handler, so a preempted target stalls the sender:
    the guest profile in commit d73eb57b80b9 ("KVM: Boost vCPUs that are
    delivering interrupts", 2019) shows 72.33 % of guest time in
    ``smp_call_function_many`` and 4.22 % in ``call_function_interrupt``
    without the boost.

    Phases and where each number comes from:

    * ``Compute(EBIZZY_2019_RECORD_NS)`` = 2 425 034 ns, fixed (ebizzy
      copies a chunk of constant size unless ``-R``): derived from the
      *baseline* of the not-overcommitted row of d73eb57b80b9 — 1 VM of 80
      vCPUs on the 80-thread (40-core) host, 21 443 records/s, CPU-bound:
      80 vCPU·s / 21 443 records = 3.73 ms of vCPU time per record, on
      hardware threads whose sibling was busy too; the simulator's
      ``Compute`` is time on a core alone and the host slows it to
      ``smt_speed_pct`` = 65 % (the 2019 era's value, Marr et al. 2002)
      when the sibling runs, so 3.73 ms × 0.65 = 2.43 ms. The IPI round in
      that row costs the model a few µs (< 0.5 % of a record), not
      subtracted. The gains of that or any row are not used. The 8-thread
      Haswell desktop of the same commit gets the same record (no per-CPU
      figure for it; its case compares ratios only).
    * ``Lock(0, lock_kind, 2_000, irqs_off=True)``: one mm spinlock section per record
      (page allocator / LRU locks of the faults and the free), 2 µs held —
      the hold and the count per record are carried over from
      [`ebizzy_like`][vcpulab.sim.presets.ebizzy_like] and are **not derived**. The count could be
      (128 faulted and 128 freed pages per record against the 2019 kernel's
      15-page pagevecs for the LRU lock and per-cpu page batches for the
      zone lock: of the order of 10-20 acquisitions), but the hold times
      cannot: the sources do not give them, so no number is put here. With 3.73 ms records this lock is lightly
      contended (80 × 2 µs / 3.73 ms ≈ 4 % per VM). Both lock classes are taken with interrupts off
      (``irqs_off=True``; mm/page_alloc.c: the zone lock under ``local_irq_save`` in the 5.x free and
      refill paths; mm/swap.c: ``spin_lock_irqsave`` of the LRU lock in ``pagevec_lru_move_fn``): a
      TLB-shootdown IPI to a vCPU whose thread waits for or holds it waits for the release, and a waiter
      halted in ``pv_wait`` (``kvm_wait``'s ``halt()`` with IF=0) is woken by its kick only.
    * ``Ipi(targets=0, handler_ns=1_000, prob=1.0, tlb_flush=True)``: one
      TLB shootdown to all other vCPUs per record (the trim of each free:
      ebizzy's default chunk is ``record_size * 64 * 1024`` = 512 KiB = 128
      pages, above glibc's 128 KiB ``M_TRIM_THRESHOLD`` and above x86's
      ``tlb_single_page_flush_ceiling`` of 33 pages, so one full-flush round),
      flush handler 1 µs ([`ebizzy_like`][vcpulab.sim.presets.ebizzy_like]'s handler; the round's
      send/deliver/exit costs are the cost profile's). The sources ran the
      boost tests with PV TLB flush off (Wanpeng Li, 2019-07-12, "I disable
      pv tlb shootdown during testing"), which the cases set.

    Not modelled: ``mmap_sem`` — with ``-M`` it is taken for reading only
    (page faults, ``madvise(MADV_DONTNEED)``; glibc's heap regrowth after a
    ``madvise`` trim does not ``mprotect``), so readers do not wait for each
    other. 2 threads per vCPU (ebizzy's default of 2 × CPUs threads) change
    nothing here: threads do not block.

    The 72 % profile share is **not** an input: it is a check (the base
    variants' guest time in IPI waits, ``spin_ns``, under 2-3 × overcommit).

    ``lru_hold_ns`` (default None: the one section above): a record's LRU
    traffic instead, its count derived from the 5.2 kernel's constants
    (``EBIZZY_2019_LRU_SECTIONS``): the record's work in 9 equal parts,
    each followed by one ``__pagevec_lru_add`` section (15 fresh pages
    joining the LRU), then the shootdown, then the 4 ``release_pages``
    sections of the trim (32 pages each, after the flush as in
    ``tlb_finish_mmu``). All take lock 0, the guest's one node's
    ``lru_lock`` (one node: an assumption, the sources do not describe the
    VMs' NUMA layout), with interrupts off (``spin_lock_irqsave``), for a
    drawn (exponential) hold of mean ``lru_hold_ns``: no source gives the
    hold, which the 2019 era's declared calibration fits
    (``programs.ebizzy_lru_hold_ns``, docs/validation.md). The zone lock
    is not taken in steady state: a record frees to the per-CPU list the
    128 pages it took from it, inside its 31 / 186-page refill and drain
    thresholds (``pcp->batch`` and ``pcp->high``).

    ``record_ns`` (default ``EBIZZY_2019_RECORD_NS``, the derivation
    above): the record's work in ns of a core alone, for studies of that
    derivation (``benches/ebizzy2019_anchor.py``); the validation cases use
    the default.
    """
    if isinstance(record_ns, bool) or not isinstance(record_ns, int) or record_ns <= 0:
        raise ValueError(f"ebizzy_no_mmap_like: record_ns must be a positive int (ns), got {record_ns!r}")
    if lru_hold_ns is None:
        phases: tuple = (
            Compute(record_ns),
            Lock(0, lock_kind, 2_000, irqs_off=True),
            Ipi(0, 1_000, prob=1.0, tlb_flush=True),
        )
    else:
        if isinstance(lru_hold_ns, bool) or not isinstance(lru_hold_ns, int) or lru_hold_ns <= 0:
            raise ValueError(
                f"ebizzy_no_mmap_like: lru_hold_ns must be a positive int (ns) or None, got {lru_hold_ns!r}"
            )
        adds, frees = EBIZZY_2019_LRU_SECTIONS
        part = record_ns // adds
        parts = [part] * (adds - 1) + [record_ns - part * (adds - 1)]
        lru = Lock(0, lock_kind, lru_hold_ns, dist="exp", irqs_off=True)
        phases = (
            *(p for ns in parts for p in (Compute(ns), lru)),
            Ipi(0, 1_000, prob=1.0, tlb_flush=True),
            *(lru for _ in range(frees)),
        )
    return Workload(name="ebizzy_no_mmap_like", phases=phases, iterations=iterations)


def kernbench_like(*, lock_kind: str = "queued", iterations: int = 0) -> Workload:
    """kernbench ([S1], seconds to build a kernel): many short processes
    doing user compute, kernel work under short spinlocks (dcache/inode,
    page allocation), and some I/O waits.

    Phases: 40 µs user compute (exp) → 8 µs kernel compute → two spinlocks
    (1 µs mean holds, exp) → with probability 0.05 a 200 µs sleep (I/O).

    The holds are drawn (exponential around the mean) because a kernel build
    takes these locks at many sites whose sections differ. With fixed 1 µs
    holds every wait is a whole number of holds, and whether a waiter
    reaches the PLE window depends on where the window falls between them:
    the 2012 kernbench 1x comparison (dy_eligible vs the 2011 handler) was
    −70 % at a 4096-cycle window and −2.8 % at 8192 cycles; with drawn holds
    −71 % and −59 % (the validation's ``knife_edge_ple_window`` probe).
    """
    return Workload(
        name="kernbench_like",
        phases=(
            Compute(40_000, dist="exp"),
            Compute(8_000, dist="exp", mode="kernel"),
            Lock(0, lock_kind, 1_000, dist="exp"),
            Lock(1, lock_kind, 1_000, dist="exp"),
            Sleep(200_000, dist="exp", prob=0.05),
        ),
        iterations=iterations,
    )


#: the hot rows of sysbench 0.4's OLTP test at its defaults: 1 % (``--oltp-dist-pct``) of the
#: 10,000-row table (``--oltp-table-size``) takes 75 % of the accesses (``--oltp-dist-res``)
SYSBENCH_ROW_SITES = 100
#: the futex hash's buckets in the 3.x kernels (``1 << FUTEX_HASHBITS``, kernel/futex.c)
FUTEX_HASH_BUCKETS_3X = 256


def sysbench_oltp_like(*, iterations: int = 0) -> Workload:
    """sysbench OLTP (transactions/s): a database's worker threads; row and
    table locks are sleeping mutexes with optimistic spinning (the users of
    owner_on_cpu / vcpu_is_preempted, [S2]), plus short kernel
    spinlocks and I/O (log flush) waits.

    Phases: 30 µs user compute → a row's mutex held 5 µs → a PV queued
    kernel spinlock held 1 µs → with probability 0.2 a 100 µs sleep. The
    holds are means of exponential draws (many row, table and kernel lock
    sites; fixed holds put waits at whole multiples of a hold, a knife edge
    against the PLE window: see
    [`kernbench_like`][vcpulab.sim.presets.kernbench_like]).

    The locks are classes taken at many instances (``Lock.sites``), each
    acquisition one of them drawn uniformly:

    * the mutex: **100 sites**, the hot rows of sysbench 0.4's OLTP test,
      whose defaults send 75 % of the row accesses to 1 % of a 10,000-row
      table (``--oltp-table-size=10000 --oltp-dist-type=special
      --oltp-dist-pct=1 --oltp-dist-res=75``, sysbench/tests/oltp/sb_oltp.c,
      Alexey Kopytov, https://github.com/akopytov/sysbench, 0.4 branch). The
      other quarter, spread over 9,900 rows, is folded into the hot ones:
      an upper bound on the contention;
    * the kernel spinlock: **256 sites**, the futex hash's bucket locks that
      a database's sleeping and waking threads take (``FUTEX_HASHBITS`` 8 in
      kernel/futex.c of the 3.x kernels).

    Until 0.3.11 both were one lock each: 64 threads wanting a 5 µs hold
    every ~56 µs asked for 5.7 times what one lock can give, so the whole
    VM ran at one mutex's pace (a serial program, where sysbench OLTP
    scales with CPUs), and the PLE handler's choices set its throughput.
    Any count from 8 up gives the same validation results (measured, see
    docs/validation.md); 4 still saturates.
    """
    return Workload(
        name="sysbench_oltp_like",
        phases=(
            Compute(30_000, dist="exp"),
            Lock(0, "mutex", 5_000, dist="exp", sites=SYSBENCH_ROW_SITES),
            Lock(SYSBENCH_ROW_SITES, "pv_queued", 1_000, dist="exp", sites=FUTEX_HASH_BUCKETS_3X),
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


def parsec_task_queue_like(*, task_ns: int = 50_000, tasks: int = 64, frames: int = 40) -> Workload:
    """Task-queue kernels (SPLASH-2's volrend and raytrace, whose frames are
    split into tiles that threads take from task queues, stealing when their
    own is empty; Woo et al., ISCA 1995): a thread takes the next task under
    the queue's lock (a pthread mutex: spin, then futex sleep; modelled as a
    ``mutex``, 1 µs), runs it (``task_ns``, exponential) and takes the next;
    threads that finish early take more (``TaskQueue``: one shared queue per
    VM stands for the per-thread queues and their stealing). A frame of
    ``tasks`` tasks ends when every thread found the queue empty; the wall
    time is that of ``frames`` frames. Shape: vcpulab assumption after the
    programs' structure, not fitted."""
    return Workload(
        name="parsec_task_queue_like",
        phases=(
            Lock(0, "mutex", 1_000),
            TaskQueue(tasks, frames=frames),
            Compute(task_ns, dist="exp"),
        ),
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
    """The preset ``name`` with its defaults (one of [`NAMES`][vcpulab.sim.presets.NAMES])."""
    if name not in NAMES:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(NAMES)}, or pass a Workload")
    return globals()[name]()  # type: ignore[no-any-return]
