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
    pub(crate) fn least_agreed<T: Ord + Copy>(self, values: &[T]) -> Option<T> {
        self.least_agreed_of(|| values.iter().copied())
    }

    /// [`least_agreed`](Self::least_agreed) of the values `values` yields (each time it is
    /// called: the same ones), found without sorting or collecting them: the watchdog
    /// judges a lease this way at every node's answer, and a node's worth of values is a few.
    pub(crate) fn least_agreed_of<T: Ord, I: Iterator<Item = T>>(
        self,
        values: impl Fn() -> I,
    ) -> Option<T> {
        let needed = self.needed();
        // The needed-th largest counting repeats: fewer than `needed` values lie above it,
        // and at least `needed` at or above it.
        values().find(|v| {
            let (mut above, mut from) = (0, 0);
            for w in values() {
                above += usize::from(w > *v);
                from += usize::from(w >= *v);
            }
            above < needed && from >= needed
        })
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
        assert_eq!(Majority::of(3).least_agreed(&[5, 9, 7]), Some(7));
        assert_eq!(Majority::of(3).least_agreed(&[5]), None);
        // Repeats count once each.
        assert_eq!(Majority::of(3).least_agreed(&[9, 5, 9]), Some(9));
        assert_eq!(Majority::of(5).least_agreed(&[1, 9, 4, 9, 4]), Some(4));
        assert_eq!(Majority::of(5).least_agreed(&[1, 9, 4, 8]), Some(4));
        assert_eq!(Majority::of(1).least_agreed(&[3]), Some(3));
    }
}
