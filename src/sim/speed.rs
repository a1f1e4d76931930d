//! The speed at which a vCPU's useful work runs on its host CPU: the SMT
//! speed while a sibling is busy (`Host.smt_speed_pct`) times the CPU's
//! state of `Host.speed` (a two-state process per CPU, [`HostSpeed`]).
//!
//! Work in progress (`Act::Exec`) records the speed it was planned at; when
//! a CPU's speed changes (a sibling starts or stops, the CPU's state flips)
//! the running vCPU's work is accounted at the old speed and re-planned at
//! the new one, so a stretch of work is exact across any number of changes.
//!
//! Simplification: speeds are whole percent (a phase's length is exact to
//! within 1 % of its stretch).

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::config::HostSpeed;
use super::engine::Sim;
use super::queue::Ev;
use super::state::*;

/// `Host.speed` as it runs: each CPU's state, and the process's own RNG
/// stream (the third: the other streams' draws do not move when it is on).
#[derive(Clone, Debug)]
pub struct SpeedProc {
    /// The process runs (`HostSpeed::is_on`).
    pub on: bool,
    /// Per host CPU: in the slow state.
    pub slow: Vec<bool>,
    pub rng: Pcg64Mcg,
}

impl SpeedProc {
    pub fn new(cfg: &HostSpeed, n_pcpus: usize, seed: u64) -> Self {
        SpeedProc {
            on: cfg.is_on(),
            slow: vec![false; if cfg.is_on() { n_pcpus } else { 0 }],
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x5851_f42d_4c95_7f2d),
        }
    }

    /// An exponential dwell of mean `mean` ns (at least 1 ns, at most 50 means).
    fn dwell(&mut self, mean: Ns) -> Ns {
        let u: f64 = self.rng.random::<f64>();
        ((-(1.0 - u).ln() * mean as f64).min(mean as f64 * 50.0) as Ns).max(1)
    }
}

impl Sim {
    /// Each CPU's first state, drawn from the process's stationary shares
    /// (slow with probability slow_dwell / (fast_dwell + slow_dwell)), and
    /// its first change (dwells are memoryless, so the time left in the
    /// state is one more draw of its mean).
    pub(crate) fn start_speed(&mut self) {
        if !self.speed.on {
            return;
        }
        let h = self.cfg.host.speed.clone();
        let p_slow = h.slow_dwell_ns as f64 / (h.fast_dwell_ns + h.slow_dwell_ns) as f64;
        for cpu in 0..self.speed.slow.len() {
            let slow = self.speed.rng.random::<f64>() < p_slow;
            self.speed.slow[cpu] = slow;
            let at = self.speed.dwell(if slow { h.slow_dwell_ns } else { h.fast_dwell_ns });
            self.push(at, Ev::Speed(cpu as u32));
        }
    }

    /// `Ev::Speed`: CPU `cpu` changes state; its running vCPU's work goes on
    /// at the new speed.
    pub(crate) fn speed_switch(&mut self, cpu: usize) {
        let slow = !self.speed.slow[cpu];
        self.speed.slow[cpu] = slow;
        let h = &self.cfg.host.speed;
        let mean = if slow { h.slow_dwell_ns } else { h.fast_dwell_ns };
        let at = self.now + self.speed.dwell(mean);
        self.push(at, Ev::Speed(cpu as u32));
        self.speed_changed(cpu);
    }

    /// `cpu`'s speed in its `Host.speed` state now, percent (100 with the process off).
    #[inline]
    fn state_pct(&self, cpu: usize) -> u32 {
        let h = &self.cfg.host.speed;
        if !self.speed.on {
            100
        } else if self.speed.slow[cpu] {
            h.slow_pct
        } else {
            h.fast_pct
        }
    }

    /// The speed of useful work on `cpu` now, percent of the nominal speed.
    pub(crate) fn cpu_speed_pct(&self, cpu: usize) -> u32 {
        let pct = self.state_pct(cpu);
        if self.topo.smt_slow && self.sibling_busy(cpu) {
            (pct * self.cfg.host.smt_speed_pct).div_ceil(100).max(1)
        } else {
            pct
        }
    }

    /// Wall time of `dur` ns of useful work starting now on vCPU `v`'s CPU,
    /// and the speed it runs at (percent; 100 off any CPU).
    pub(crate) fn work_duration(&self, v: usize, dur: Ns) -> (Ns, u32) {
        if !self.topo.smt_slow && !self.speed.on {
            return (dur, 100);
        }
        match self.vcpus[v].running {
            Some(cpu) => {
                let pct = self.cpu_speed_pct(cpu as usize);
                if pct == 100 {
                    (dur, 100)
                } else {
                    ((dur * 100).div_ceil(pct as u64), pct)
                }
            }
            None => (dur, 100),
        }
    }

    /// Work done in `el` ns of wall time at `pct` percent speed.
    #[inline]
    pub(crate) fn work_progress(&self, el: Ns, pct: u32) -> Ns {
        if pct == 100 {
            el
        } else {
            el * pct as u64 / 100
        }
    }

    /// The wall time of a host path of `ns` nominal ns on `cpu` now: stretched
    /// by its state's speed where `HostSpeed.host_paths` says the state slows
    /// the host's own work too (a wake-up's latency, a context switch in, a
    /// blocked halt's return).
    #[inline]
    pub(crate) fn host_path_ns(&self, cpu: usize, ns: Ns) -> Ns {
        if !self.speed.on || !self.cfg.host.speed.host_paths || ns == 0 {
            return ns;
        }
        let pct = self.state_pct(cpu);
        if pct == 100 {
            ns
        } else {
            (ns * 100).div_ceil(pct as u64)
        }
    }

    /// `cpu`'s speed may have changed: a vCPU doing useful work there goes
    /// on at the new speed (its work so far accounted, the rest re-planned).
    pub(crate) fn speed_changed(&mut self, cpu: usize) {
        let Some(t) = self.rqs[cpu].curr else { return };
        let TaskKind::Vcpu(v) = self.tasks[t as usize].kind else { return };
        let v = v as usize;
        if let Act::Exec { pct, .. } = self.vcpus[v].act {
            if pct != self.cpu_speed_pct(cpu) {
                self.pause_act(v);
                self.vcpu_step(v);
            }
        }
    }
}

#[cfg(test)]
#[path = "speed_tests.rs"]
mod tests;
