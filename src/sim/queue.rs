//! The event queue: events in integer ns, ordered by (time, sequence number),
//! in a calendar queue (a ring of 32-ns buckets for the near future and a
//! binary heap beyond it). The engine pushes and pops; nothing else sees it.

use super::state::{Ns, Why};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    Tick(u32),
    /// A vCPU's current activity reaches its planned end (generation-checked).
    Vcpu(u32, u32),
    /// Re-evaluate a running vCPU (a condition it waits on may have changed).
    Poke(u32),
    BgEnd(u32, u32),
    BgWake(u32),
    ThreadWake(u32, u32),
    Resched(u32, Why),
    Gang,
    /// A guest tick of a VM with stacked threads: nohz idle balancing (`Guest.load_balance`).
    GuestBalance(u32),
    /// A vCPU thread arrives (`Host.start_gap_ns`): its first wake-up.
    Start(u32),
    /// A run token's slice ends on a CPU (`Scheduler::RoundRobin`; generation-checked).
    Token(u32, u32),
    /// A host CPU's speed changes state (`Host.speed`).
    Speed(u32),
}
/// A queued event. `key` is (time, seq) as one 128-bit number: one integer
/// comparison orders two entries, and keys are unique (seq is).
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) key: u128,
    pub(crate) ev: Ev,
}
impl Entry {
    #[inline]
    pub(crate) fn time(&self) -> Ns {
        (self.key >> 64) as Ns
    }
}
// `BinaryHeap` is a max-heap: order entries by reversed key.
impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.key.cmp(&self.key)
    }
}

/// Width of a bucket of the event queue's ring, log2 ns, for up to
/// `VCPUS_PER_BASE_RING` vCPUs (32 ns).
const BASE_SHIFT: u32 = 5;
/// Buckets in the ring for up to `VCPUS_PER_BASE_RING` vCPUs (a power of
/// two): it spans 4096 × 32 ns ≈ 131 µs.
const BASE_BUCKETS: usize = 4096;
/// vCPUs the base ring is sized for. Events come at a rate proportional to
/// the vCPUs (~0.23 per vCPU per µs under PLE, 8 × 20 and its scaled
/// copies): about 1.2 events land in a 32-ns bucket at 160 vCPUs, 6.7 at
/// 1024. A push walks its bucket's sorted list, so past this many vCPUs
/// each doubling halves the bucket and doubles the buckets (the span stays
/// 131 µs, the events per bucket stay about what 256 vCPUs put in one).
const VCPUS_PER_BASE_RING: u64 = 256;
/// The finest bucket, log2 ns (2 ns), and so the most buckets (2^16).
const MIN_SHIFT: u32 = 1;
const NIL: u32 = u32::MAX;

/// An entry of the ring, linked to the next one of its bucket.
#[derive(Clone, Copy)]
struct Node {
    key: u128,
    ev: Ev,
    next: u32,
}

/// The event queue: a calendar queue. Entries due within the ring's span
/// (`mask + 1` buckets of 2^`shift` ns from bucket `cur`, when they are
/// pushed; [`EventQueue::for_vcpus`] sizes them) go to the bucket of their
/// time, a list kept sorted by key; later ones go to a binary heap (`far`).
/// Pushing near events (almost all of them: exits, spins, hand-offs) and
/// popping cost O(1) instead of a heap's O(log n) sift while the buckets
/// hold an entry or two each, which the sizing keeps at any number of
/// vCPUs; a bitmap finds the first non-empty bucket.
///
/// Keys are unique, so it pops exactly the (time, seq) order of any correct
/// priority queue: the earliest entry is the smaller of the first non-empty
/// bucket's head and the heap's top. `cur` is the bucket of the last popped
/// entry; no entry or later push is earlier (times never go backwards), so
/// every ring entry lies in [cur, cur + mask + 1) and the slots, scanned
/// cyclically from `cur`, come in time order.
pub(crate) struct EventQueue {
    /// Ring entries; a popped node goes to the free list (`free`, through `next`).
    nodes: Vec<Node>,
    free: u32,
    /// First node of each bucket (NIL: empty), and one bit per non-empty bucket.
    head: Vec<u32>,
    occupied: Vec<u64>,
    /// Width of a bucket, log2 ns, and the number of buckets - 1 (a power of two, minus one).
    shift: u32,
    mask: usize,
    /// Entries in the ring.
    near: usize,
    cur: u64,
    far: std::collections::BinaryHeap<Entry>,
}
impl Default for EventQueue {
    fn default() -> Self {
        EventQueue::for_vcpus(0)
    }
}
impl EventQueue {
    /// A queue for a run of `vcpus` vCPUs: the base ring (4096 buckets of
    /// 32 ns) up to `VCPUS_PER_BASE_RING`, finer and more buckets beyond
    /// (1024 vCPUs: 16384 of 8 ns). The order it pops is the same whatever
    /// the sizes: only the cost of a push changes.
    pub(crate) fn for_vcpus(vcpus: u64) -> Self {
        let doublings = vcpus.div_ceil(VCPUS_PER_BASE_RING).max(1).next_power_of_two().trailing_zeros();
        let doublings = doublings.min(BASE_SHIFT - MIN_SHIFT);
        let buckets = BASE_BUCKETS << doublings;
        EventQueue {
            nodes: Vec::new(),
            free: NIL,
            head: vec![NIL; buckets],
            occupied: vec![0; buckets / 64],
            shift: BASE_SHIFT - doublings,
            mask: buckets - 1,
            near: 0,
            cur: 0,
            far: std::collections::BinaryHeap::new(),
        }
    }
    // Always inlined: out of line, its prologue and epilogue (saving and
    // restoring registers) were a quarter of its instructions (callgrind);
    // inlined, 8 × 20 under PLE runs ~4 % faster.
    #[inline(always)]
    pub(crate) fn push(&mut self, time: Ns, seq: u64, ev: Ev) {
        let key = ((time as u128) << 64) | seq as u128;
        let b = time >> self.shift;
        debug_assert!(b >= self.cur, "an event before the last popped one");
        if b - self.cur > self.mask as u64 {
            self.far.push(Entry { key, ev });
            return;
        }
        let node = Node { key, ev, next: NIL };
        let n = if self.free != NIL {
            let n = self.free;
            self.free = self.nodes[n as usize].next;
            self.nodes[n as usize] = node;
            n
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        let slot = b as usize & self.mask;
        // sorted insertion; a new entry usually goes last (seq grows)
        let (mut prev, mut at) = (NIL, self.head[slot]);
        while at != NIL && self.nodes[at as usize].key < key {
            prev = at;
            at = self.nodes[at as usize].next;
        }
        self.nodes[n as usize].next = at;
        if prev == NIL {
            self.head[slot] = n;
            self.occupied[slot / 64] |= 1 << (slot % 64);
        } else {
            self.nodes[prev as usize].next = n;
        }
        self.near += 1;
    }
    /// The first non-empty slot of the ring, scanning cyclically from `cur`.
    #[inline]
    fn first_slot(&self) -> Option<usize> {
        if self.near == 0 {
            return None;
        }
        let words = self.occupied.len();
        let s = self.cur as usize & self.mask;
        let (w0, bit) = (s / 64, s % 64);
        let m = self.occupied[w0] & (!0u64 << bit);
        if m != 0 {
            return Some(w0 * 64 + m.trailing_zeros() as usize);
        }
        for i in 1..=words {
            let w = (w0 + i) % words;
            let m = self.occupied[w];
            if m != 0 {
                // at i == words (w == w0) only the bits below `bit` are left
                return Some(w * 64 + m.trailing_zeros() as usize);
            }
        }
        unreachable!("near > 0 means a non-empty bucket")
    }
    /// Remove and return the earliest entry if its time is before `limit`.
    #[inline]
    pub(crate) fn pop_before(&mut self, limit: Ns) -> Option<Entry> {
        let slot = self.first_slot();
        let near_key = slot.map(|s| self.nodes[self.head[s] as usize].key);
        let far_key = self.far.peek().map(|e| e.key);
        let from_ring = match (near_key, far_key) {
            (Some(n), Some(f)) => n < f,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let e = if from_ring {
            let (s, key) = (slot.expect("near"), near_key.expect("near"));
            if (key >> 64) as Ns >= limit {
                return None;
            }
            let n = self.head[s];
            let node = self.nodes[n as usize];
            self.head[s] = node.next;
            // clear the bucket's bit if it is now empty (without a branch)
            self.occupied[s / 64] &= !(((node.next == NIL) as u64) << (s % 64));
            self.nodes[n as usize].next = self.free;
            self.free = n;
            self.near -= 1;
            Entry { key, ev: node.ev }
        } else {
            if (far_key.expect("far") >> 64) as Ns >= limit {
                return None;
            }
            self.far.pop().expect("far")
        };
        self.cur = e.time() >> self.shift;
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64Mcg;

    use super::super::state::NEVER;
    use super::*;

    /// The calendar queue pops exactly the (time, seq) order of a sorted
    /// reference, with near, far (beyond the ring) and same-time events, and
    /// pushes interleaved with pops as the engine makes them (never earlier
    /// than the last popped time), at every ring size (the base ring, one
    /// for 1024 vCPUs, and the finest).
    #[test]
    fn event_queue_pops_in_key_order() {
        for vcpus in [0, 1024, 1 << 20] {
            pops_in_key_order(EventQueue::for_vcpus(vcpus));
        }
    }

    #[test]
    fn the_ring_grows_finer_with_the_vcpus() {
        let sizes = |v| {
            let q = EventQueue::for_vcpus(v);
            (q.shift, q.mask + 1)
        };
        assert_eq!(sizes(0), (5, 4096));
        assert_eq!(sizes(256), (5, 4096));
        assert_eq!(sizes(257), (4, 8192));
        assert_eq!(sizes(1024), (3, 16384));
        assert_eq!(sizes(1 << 20), (1, 65536));
        for v in [0, 256, 1024, 1 << 20] {
            let (shift, n) = sizes(v);
            // the span stays 131 µs: events as far ahead go to the ring at every size
            assert_eq!((n as u64) << shift, 131_072, "{v} vCPUs");
        }
    }

    fn pops_in_key_order(mut q: EventQueue) {
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let mut reference = std::collections::BTreeSet::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for round in 0..200_000u32 {
            if reference.is_empty() || rng.random_range(0..100) < 52 {
                let dt = match rng.random_range(0..10) {
                    0 => 0,
                    1 => rng.random_range(0..4_000_000),
                    2 => rng.random_range(0..300_000),
                    _ => rng.random_range(0..3_000),
                };
                seq += 1;
                q.push(now + dt, seq, Ev::Tick(round));
                reference.insert((now + dt, seq, round));
            } else {
                let limit = if rng.random_range(0..10) == 0 { now + 100 } else { NEVER };
                let want = reference.first().copied().filter(|&(t, _, _)| t < limit);
                let got = q.pop_before(limit);
                assert_eq!(got.map(|e| (e.time(), e.key as u64)), want.map(|(t, s, _)| (t, s)));
                if let (Some(e), Some(w)) = (got, want) {
                    assert_eq!(e.ev, Ev::Tick(w.2));
                    reference.pop_first();
                    now = e.time();
                }
            }
        }
        while let Some(w) = reference.pop_first() {
            let e = q.pop_before(NEVER).expect("entry");
            assert_eq!((e.time(), e.key as u64), (w.0, w.1));
        }
        assert!(q.pop_before(NEVER).is_none());
    }
}
