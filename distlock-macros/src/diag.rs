//! Error accumulation and "did you mean" suggestions.
//!
//! Every check pushes into one [`Errors`] instead of returning early, so a user
//! who got three arguments wrong sees three errors in one build.

/// Accumulates `syn::Error`s; `finish` turns them into one combined error.
#[derive(Default)]
pub struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Records the error of `result`, if any, and hands back its value.
    pub fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    pub fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The closest candidate to `input`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let input = input.to_lowercase();
    // One edit per three characters: `tll` -> `ttl`, `watchdg` -> `watchdog`,
    // but `id` does not suggest `ab`.
    let budget = (input.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(&input, &candidate.to_lowercase()), candidate))
        .filter(|&(distance, _)| distance <= budget)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// Optimal string alignment distance: Levenshtein plus adjacent transpositions,
/// because swapped letters (`wiat`) are the most common typo.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + substitution);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// `a, b, c` with each item wrapped in backticks.
pub fn list_code(items: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    items
        .into_iter()
        .map(|item| format!("`{}`", item.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARGS: &[&str] = &["key", "ttl", "wait", "mode", "watchdog", "on_busy"];

    #[test]
    fn distance_counts_edits_and_transpositions() {
        assert_eq!(edit_distance("ttl", "ttl"), 0);
        assert_eq!(edit_distance("tll", "ttl"), 1);
        assert_eq!(edit_distance("wiat", "wait"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggests_close_names() {
        assert_eq!(did_you_mean("tll", ARGS.iter().copied()), Some("ttl"));
        assert_eq!(did_you_mean("wiat", ARGS.iter().copied()), Some("wait"));
        assert_eq!(
            did_you_mean("watchdg", ARGS.iter().copied()),
            Some("watchdog")
        );
        assert_eq!(did_you_mean("TTL", ARGS.iter().copied()), Some("ttl"));
        assert_eq!(
            did_you_mean("on_bussy", ARGS.iter().copied()),
            Some("on_busy")
        );
    }

    #[test]
    fn does_not_suggest_unrelated_names() {
        assert_eq!(did_you_mean("timeout", ARGS.iter().copied()), None);
        assert_eq!(did_you_mean("xyz", ARGS.iter().copied()), None);
        assert_eq!(did_you_mean("anything", std::iter::empty()), None);
    }

    #[test]
    fn errors_accumulate_in_order() {
        let mut errors = Errors::default();
        assert_eq!(errors.ok(Ok::<_, syn::Error>(1)), Some(1));
        let span = proc_macro2::Span::call_site();
        errors.push(syn::Error::new(span, "first"));
        assert_eq!(errors.ok::<()>(Err(syn::Error::new(span, "second"))), None);
        let messages: Vec<String> = errors
            .finish()
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(messages, ["first", "second"]);
    }

    #[test]
    fn lists_in_backticks() {
        assert_eq!(list_code(["a", "b"]), "`a`, `b`");
    }
}
