//! Fair shares of the pools every container draws from: the container API's workers and
//! report slots, the device's scheduled runs (issue 32). Without them the first containers to
//! ask (or the first in a list) could hold a pool while the others wait. The rule is max-min
//! fairness, work-conserving: a free slot goes to a waiting container that holds the fewest
//! (the one waiting longest among equals), never to one that holds more while such a one
//! waits; and a free slot is never left idle while someone who may take it waits. A pool
//! nobody else wants stays whole for whoever wants it. Pure: the daemon counts, this decides.

/// One container's claim on a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Slots it holds.
    pub held: usize,
    /// It has requests (or runs) waiting for a slot.
    pub waiting: bool,
}

/// Whether the container `me` (an index into `claims`, which lists every container holding
/// or wanting slots) may take a free slot now: the pool has one (`in_use < cap`), it is
/// under its own cap, and no other container that waits (and could take a slot) holds fewer
/// than it does. Some waiting container always may, so no slot idles while one waits.
pub fn may_take(claims: &[Claim], me: usize, own_cap: usize, in_use: usize, cap: usize) -> bool {
    let Some(mine) = claims.get(me) else {
        return false;
    };
    if in_use >= cap || mine.held >= own_cap {
        return false;
    }
    !claims
        .iter()
        .enumerate()
        .any(|(i, c)| i != me && c.waiting && c.held < own_cap && c.held < mine.held)
}

/// Water-filling, the model `schedule::start_fair` is held to: how many of `free` slots
/// each container gets, container `i` holding `held[i]` and wanting `wanted[i]` more, at
/// most `own_cap` each in all. One slot at a time to the container holding the fewest (given
/// ones included), the one waiting since the earliest (`since[i]`, any ordered key) among
/// equals, then the lowest index. (In the tests only: the scheduler does the same in place.)
#[cfg(test)]
pub fn allot<T: Ord>(
    held: &[usize],
    wanted: &[usize],
    since: &[T],
    own_cap: usize,
    free: usize,
) -> Vec<usize> {
    let n = held.len();
    let mut give = vec![0usize; n];
    for _ in 0..free {
        let mut best: Option<usize> = None;
        for i in 0..n {
            let has = held[i] + give[i];
            if give[i] >= wanted.get(i).copied().unwrap_or(0) || has >= own_cap {
                continue;
            }
            let better = match best {
                None => true,
                Some(b) => {
                    let hb = held[b] + give[b];
                    has < hb || (has == hb && since.get(i) < since.get(b))
                }
            };
            if better {
                best = Some(i);
            }
        }
        match best {
            Some(i) => give[i] += 1,
            None => break,
        }
    }
    give
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(held: usize, waiting: bool) -> Claim {
        Claim { held, waiting }
    }

    /// Work-conserving: with every contender waiting, however many there are, the free
    /// slots are taken until the pool is full (a share by floor division once left workers
    /// idle: 5 containers used 15 of 16, 9 used 9).
    #[test]
    fn no_slot_idles_while_a_container_that_may_take_it_waits() {
        for n in 1..=20 {
            let mut claims = vec![c(0, true); n];
            let mut in_use = 0;
            loop {
                let taker = (0..n).find(|&i| may_take(&claims, i, 4, in_use, 16));
                let Some(i) = taker else { break };
                claims[i].held += 1;
                in_use += 1;
            }
            assert_eq!(in_use, (4 * n).min(16), "{n} containers");
            let (lo, hi) = (
                claims.iter().map(|c| c.held).min().unwrap(),
                claims.iter().map(|c| c.held).max().unwrap(),
            );
            assert!(hi - lo <= 1, "{n}: {claims:?}");
        }
    }

    #[test]
    fn a_container_beyond_its_share_takes_nothing_while_another_waits() {
        // alone: the whole pool, up to its own cap
        assert!(may_take(&[c(3, true)], 0, 4, 3, 16));
        assert!(!may_take(&[c(4, true)], 0, 4, 4, 16), "its own cap");
        // a full pool: nobody
        assert!(!may_take(&[c(0, true), c(4, false)], 0, 4, 16, 16));
        // 16 slots, 8 containers holding 2 each: a ninth, holding none, waits; those holding
        // more take no freed slot while it waits, the ninth does
        let mut claims = vec![c(2, true); 8];
        claims.push(c(0, true));
        for i in 0..8 {
            assert!(!may_take(&claims, i, 4, 15, 16), "{i}");
        }
        assert!(may_take(&claims, 8, 4, 15, 16));
        // nobody else waits: a container may go beyond its share
        let claims = [c(2, true), c(2, false), c(2, false)];
        assert!(may_take(&claims, 0, 4, 6, 16));
        // another waits, but is at its own cap (it could not take a slot anyway)
        let claims = [c(3, true), c(4, true)];
        assert!(may_take(&claims, 0, 4, 7, 8));
    }

    #[test]
    fn water_filling_gives_the_least_served_first_and_never_beyond_the_caps() {
        // 16 slots, nothing running: three containers wanting 10, 2, 10 get 3, 2, 3 of 8
        assert_eq!(
            allot(&[0, 0, 0], &[10, 2, 10], &[0, 0, 0], 3, 8),
            vec![3, 2, 3]
        );
        // one runs 3 already: the others are filled first
        assert_eq!(
            allot(&[3, 0, 0], &[5, 5, 5], &[0, 0, 0], 3, 4),
            vec![0, 2, 2]
        );
        // ties: the one waiting since earlier, not the first in the list
        assert_eq!(allot(&[0, 0], &[1, 1], &[50, 10], 3, 1), vec![0, 1]);
        // not more than wanted, not more than free
        assert_eq!(allot(&[0, 0], &[1, 0], &[0, 0], 3, 5), vec![1, 0]);
        assert_eq!(allot(&[0, 0], &[9, 9], &[0, 0], 3, 0), vec![0, 0]);
    }

    /// A property: however the numbers fall, nobody is given beyond its caps or its wants,
    /// the free slots are used as far as wants allow, and no container ends more than one
    /// slot ahead of another that still wants (max-min).
    #[test]
    fn water_filling_is_max_min_fair() {
        let mut x: u32 = 12345;
        let mut rnd = |m: usize| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as usize % m
        };
        for _ in 0..2000 {
            let n = 1 + rnd(6);
            let own_cap = 1 + rnd(4);
            let held: Vec<usize> = (0..n).map(|_| rnd(own_cap + 1)).collect();
            let wanted: Vec<usize> = (0..n).map(|_| rnd(5)).collect();
            let since: Vec<usize> = (0..n).map(|_| rnd(100)).collect();
            let free = rnd(10);
            let g = allot(&held, &wanted, &since, own_cap, free);
            let room: usize = (0..n)
                .map(|i| wanted[i].min(own_cap.saturating_sub(held[i])))
                .sum();
            assert_eq!(
                g.iter().sum::<usize>(),
                free.min(room),
                "{held:?} {wanted:?} {free}"
            );
            for i in 0..n {
                assert!(g[i] <= wanted[i] && held[i] + g[i] <= own_cap.max(held[i]));
                for j in 0..n {
                    let j_wants_more = g[j] < wanted[j] && held[j] + g[j] < own_cap;
                    if g[i] > 0 && j_wants_more {
                        assert!(
                            held[i] + g[i] <= held[j] + g[j] + 1,
                            "{held:?} {wanted:?} {g:?}"
                        );
                    }
                }
            }
        }
    }
}
