"""Guest programs counted: the emulated instructions of one iteration of a spin-lock program, or
of one item of the wake-placement program (``src/kvm/guest/program.rs``), split as the twin needs
them ([`guest_path`][vcpulab.twins.guest_path])."""

from __future__ import annotations

from vcpulab.experiment import PvSpinLock, SpinLock, WakePlacement, Workload

#: instructions of one interrupt taken by a guest program: the vector's stub (``push``, ``jmp``),
#: the common handler (three pushes, the vector's load and check, the counter's ``lock inc``, the
#: EOI store and its address, three pops, ``add rsp``, ``iretq``): ``idt_stubs`` in program.rs
IRQ_STUB_INSNS = 16
#: instructions of one failed mailbox check of a WakePlacement worker's poll loop (``cmp; jne`` the
#: mailbox, ``cmp; jne`` the stop flag, ``pause``, ``dec; jnz``: ``wake_placement`` in program.rs)
WAKE_POLL_ITER_INSNS = 7
#: instructions of one pv halt bracket (``mov eax; mov edx; out``: ``halt_bracket`` in program.rs)
HALT_BRACKET_INSNS = 3


def guest_path(workload: Workload, vcpus: int, pv_exits: bool = False) -> dict[str, int]:
    """Emulated guest instructions of one iteration of ``workload``'s program
    (``src/kvm/guest/program.rs``), split as the twin needs them.

    SpinLock (ticket, TAS) with ``iterations = 0``, uncontended (a
    ``delay(n)`` loop is ``mov; n × (dec; jnz)``, nothing when n = 0):

    * ``hold_loop`` = 2·hold + 1, ``hold_path`` = 15: from the acquiring
      instruction's result to the release: the branch to ``got`` (2), RDTSC
      and the wait accounting (7), the holder store (1), the critical
      section's load, increment, store and acquisition count (4), the release (1);
    * ``think_loop`` = 2·think + 1, ``think_path`` = 9: ``jmp top``, the
      stop-flag check (2), RDTSC (4), the acquire's ``mov``/``xchg`` (TAS) or
      ``mov``/``lock xadd`` (ticket) (2); ``iterations > 0`` adds 3
      (``mov; cmp; jae``);
    * ``wait_path`` = 8: instructions between the two RDTSCs of the timed wait
      when the lock is free (so the real mean wait is never below 8
      instructions; the simulated wait gets them added).

    PvSpinLock adds the ``check_every`` counter set-up (1) to the think path,
    the releasing ``xor; xchg`` (1) to the hold path, and the unlocker's scan
    of every vCPU's waiting flag (1 + 7 per vCPU, after the release) to the
    think path. ``pv_exits`` (a run under vcpulab's scheduler) adds the reset
    of the wait's failed-iteration count (1) to the wait path, and for a
    ticket lock the store of the ticket's owner (3: ``mov; and; mov``) (a failed
    iteration then costs [`PV_SPIN_ITER_INSNS`][vcpulab.twins.PV_SPIN_ITER_INSNS]). MsiPingPong / IdleTicks: the round's instructions are measured
    by the calibration from KVM's ``insn_emulation`` stat (the interrupt stub
    and EOI dominate them), not counted here. Checked against
    ``insn_emulation`` by [`calibrate`][vcpulab.twins.calibrate] (``insns_per_acq_measured`` vs
    ``insns_per_acq_counted``) and by tests/test_twins.py.

    WakePlacement, one item, ``rounds = 0``, the rule's first
    pass finding the previous item's worker (a scan that passes over a
    worker adds 5-6 instructions per worker passed, not counted):

    * ``waker_path`` = 83: the round's stop check (2), one scan pass that
      finds the first worker it looks at (12), the choice, its bytes and its
      log (18), RDTSC and the mailbox stores (6), the IPI (6), the halt loop
      (10) with the completion interrupt ([`IRQ_STUB_INSNS`][vcpulab.twins.IRQ_STUB_INSNS]), the
      completion's RDTSC and log (10), ``prev`` and the count (3);
    * ``waker_outside`` = 41: the waker's instructions outside its timed
      round (after the completion's RDTSC, up to the next wake-up's);
    * ``worker_path`` = 52: the idle loop and the halt (11) with the item's
      interrupt (16), the wake-up's RDTSC and log (9), the mailbox and the
      count (2), the idle flag, the completion's ``lock inc`` and the IPI
      (9), the loop's jumps and the delay's ``mov`` (5);
    * ``work_loop`` = 2·work (the delay's ``dec; jnz``);
    * with ``rule="pcpu_is_idle"`` under the host's scheduler (``pv_exits``
      False: KVM never writes ``is_idle``, so the rule's first pass finds no
      byte set and the next pass chooses), the waker's path adds that failed
      pass over every worker (all idle: one item at a time): its set-up (2),
      13 per worker (the idle check, the steal area's address, the byte's
      test, the step to the next) and one wrap (1): 13·(vcpus − 1) + 3,
      ``wake_scan`` in program.rs (29 for 3 vCPUs; measured here 113-115
      instructions per item on the waker against 84-86 under
      ``available_idle``, 2026-12-06). Under vcpulab's schedulers the first
      worker looked at has its byte set in the grid's layouts (the
      ``chose_is_idle`` share ~1), and the pass is not counted;
    * ``waker_after_ipi`` = 4 and ``worker_after_ipi`` = 9, parts of the two
      paths: the instructions after a side's IPI up to its ``hlt`` (the
      waker's wait check and ``sti``; the worker's jump back, its idle loop's
      checks, the halt count and ``sti``), which run beside the other side's
      wake-up.

    ``pv_exits`` adds two halt brackets per halt ([`HALT_BRACKET_INSNS`][vcpulab.twins.HALT_BRACKET_INSNS] each) to
    both paths, one of them after the IPI. With ``poll > 0`` the worker's idle
    loop polls its mailbox first: ``poll_iter`` = 7 instructions per failed
    check (the mailbox and stop-flag tests with their branches, PAUSE, the
    count's ``dec; jnz``; [`WAKE_POLL_ITER_INSNS`][vcpulab.twins.WAKE_POLL_ITER_INSNS]), its set-up (``mov``)
    in place of the ``nop`` of ``poll = 0``, so the counts above are those
    of an item that ends in a halt; an item found while polling skips the
    halt (about 10 instructions: the halt loop's checks, ``hlt`` and the
    jumps back) for the hit's 3 (test, branch, ``poll_hits`` count). Items past the 4,096 logged skip 5 stores (not counted).
    Checked against ``insn_emulation`` by tests/test_wake_placement.py.
    """
    if isinstance(workload, SpinLock):
        pv = isinstance(workload, PvSpinLock)
        return {
            "hold_loop": 2 * workload.hold + 1 if workload.hold > 0 else 0,
            "hold_path": 15 + (1 if pv else 0),
            "think_loop": 2 * workload.think + 1 if workload.think > 0 else 0,
            "think_path": 9 + (3 if workload.iterations > 0 else 0) + ((2 + 7 * vcpus) if pv else 0),
            "wait_path": 8 + ((1 + (3 if workload.kind == "ticket" else 0)) if pv_exits else 0),
        }
    if isinstance(workload, WakePlacement):
        if workload.rounds:
            raise ValueError("guest_path counts WakePlacement items with rounds = 0")
        brackets = 2 * HALT_BRACKET_INSNS if pv_exits else 0
        # pcpu_is_idle under the host's scheduler: a first pass that finds no is_idle byte
        failed_pass = 13 * (vcpus - 1) + 3 if workload.rule == "pcpu_is_idle" and not pv_exits else 0
        return {
            "waker_path": 67 + IRQ_STUB_INSNS + brackets + failed_pass,
            "waker_outside": 41,
            "worker_path": 36 + IRQ_STUB_INSNS + brackets,
            "work_loop": 2 * workload.work,
            "waker_after_ipi": 4 + brackets // 2,
            "worker_after_ipi": 9 + brackets // 2,
            "poll_iter": WAKE_POLL_ITER_INSNS,
        }
    raise ValueError(
        f"guest_path counts SpinLock / PvSpinLock / WakePlacement programs; {type(workload).__name__} is measured "
        "instead"
    )


def _iteration_insns(workload: SpinLock, vcpus: int) -> int:
    p = guest_path(workload, vcpus)
    return p["hold_loop"] + p["hold_path"] + p["think_loop"] + p["think_path"]


#: guest instructions of one failed spin iteration of the spin-lock programs
#: with pv_exits and the record's ``spin_window`` 0 (no pv spin exits: ``test,
#: jz`` skip the window's ``cmp, jb``; with a window it is
#: [`PV_SPIN_ITER_INSNS`][vcpulab.twins.PV_SPIN_ITER_INSNS] = 11), as the calibration's
#: ``spin_iter_ns`` measures it under ``sched.round_robin``: 9 instructions
#: (measured here 8.97 per PAUSE from ``insn_emulation``, against 11.00 in a
#: directed-yield run of the same program, 2026-12-06)
PV_SPIN_ITER_INSNS_NO_WINDOW = 9
