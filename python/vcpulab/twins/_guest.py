"""Guest programs counted: the emulated instructions of one iteration of a spin-lock program
(``src/kvm/guest/program.rs``), split as the twin needs them
([`guest_path`][vcpulab.twins.guest_path])."""

from __future__ import annotations

from vcpulab.experiment import PvSpinLock, SpinLock, Workload


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
    raise ValueError(f"guest_path counts SpinLock / PvSpinLock programs; {type(workload).__name__} is measured instead")


def _iteration_insns(workload: SpinLock, vcpus: int) -> int:
    p = guest_path(workload, vcpus)
    return p["hold_loop"] + p["hold_path"] + p["think_loop"] + p["think_path"]
