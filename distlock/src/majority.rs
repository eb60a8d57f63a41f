//! The majority rule of a Redlock quorum, in one place: N/2 + 1 of N nodes must agree, and a
//! majority is out of reach once more than N - (N/2 + 1) nodes said no for good. A single node
//! is the case N = 1.

/// How many of a deployment's nodes must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Majority {
    nodes: usize,
}

impl Majority {
    /// The majority of `nodes` nodes.
    pub(crate) fn of(nodes: usize) -> Majority {
        Majority { nodes }
    }

    /// How many nodes there are.
    pub(crate) fn nodes(self) -> usize {
        self.nodes
    }

    /// How many must agree: N/2 + 1.
    pub(crate) fn needed(self) -> usize {
        self.nodes / 2 + 1
    }

    /// True when `yes` nodes are a majority.
    pub(crate) fn reached(self, yes: usize) -> bool {
        yes >= self.needed()
    }

    /// True when, with `no` nodes refusing, no majority can agree any more.
    pub(crate) fn out_of_reach(self, no: usize) -> bool {
        no > self.nodes.saturating_sub(self.needed())
    }

    /// What a majority agrees on at least: of the values the agreeing nodes gave (at least
    /// a majority of them), the [`needed`](Self::needed)-th largest.
    pub(crate) fn least_agreed<T: Ord + Copy>(self, values: &mut [T]) -> Option<T> {
        values.sort_unstable_by(|a, b| b.cmp(a));
        values.get(self.needed() - 1).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_of_n() {
        for (n, needed) in [(1, 1), (3, 2), (4, 3), (5, 3)] {
            let m = Majority::of(n);
            assert_eq!(m.needed(), needed);
            assert!(m.reached(needed) && !m.reached(needed - 1));
            assert!(m.out_of_reach(n - needed + 1) && !m.out_of_reach(n - needed));
        }
        assert_eq!(Majority::of(3).least_agreed(&mut [5, 9, 7]), Some(7));
        assert_eq!(Majority::of(3).least_agreed(&mut [5]), None);
    }
}
