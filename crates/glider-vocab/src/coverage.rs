//! What a summary of a conversation must name, and whether a text names it: each item
//! (an edited file, an open error) with the words that count as naming it, compared
//! case and spacing aside. The context store builds the lists from its graph — its
//! summarizer's acceptance check, and ([`crate::ContextSink::must_cover`]) a shadow
//! comparison of a CLI's compaction — and both sides read a text by the same rule.

use serde::{Deserialize, Serialize};

/// Something a summary must name, and the words that count as naming it.
#[derive(Debug, Clone, PartialEq)]
pub struct MustName {
    /// How it is listed (for a model, and in what a text leaves out).
    pub label: String,
    /// Any one of these (case and spacing aside) in the text names it.
    pub names: Vec<String>,
}

impl MustName {
    /// A file, named by its path or its file name.
    pub fn file(path: &str) -> MustName {
        let mut names = vec![path.to_owned()];
        if let Some(base) = path.rsplit(['/', '\\']).next()
            && !base.is_empty()
            && base != path
        {
            names.push(base.to_owned());
        }
        MustName {
            label: path.to_owned(),
            names,
        }
    }

    /// Whether `normalised` (a text through [`normalise`]) names it.
    pub fn named_in(&self, normalised: &str) -> bool {
        self.names
            .iter()
            .any(|name| normalised.contains(&normalise(name)))
    }
}

/// Lowercase with runs of whitespace as one space (how names are compared).
pub fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The labels of the `items` that `text` leaves out, in order.
pub fn missing<'a>(items: impl IntoIterator<Item = &'a MustName>, text: &str) -> Vec<String> {
    let text = normalise(text);
    items
        .into_iter()
        .filter(|item| !item.named_in(&text))
        .map(|item| item.label.clone())
        .collect()
}

/// Most labels a [`Coverage`] lists as left out (the count is always whole).
pub const MAX_MISSED_LISTED: usize = 8;

/// How two summaries of one conversation cover what it must name: a compaction's
/// shadow answer against the one the client got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    /// The items the conversation's graph says a summary must name.
    pub required: usize,
    /// Of those, how many the client's answer named.
    pub primary_named: usize,
    /// Of those, how many the compared answer named.
    pub shadow_named: usize,
    /// How many the client's answer named and the compared one left out.
    pub missed: usize,
    /// Their labels, the first [`MAX_MISSED_LISTED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed_labels: Vec<String>,
}

impl Coverage {
    /// `shadow` against `primary` over `items`.
    pub fn of(items: &[MustName], primary: &str, shadow: &str) -> Coverage {
        let (primary, shadow) = (normalise(primary), normalise(shadow));
        let mut coverage = Coverage {
            required: items.len(),
            ..Coverage::default()
        };
        for item in items {
            let (by_primary, by_shadow) = (item.named_in(&primary), item.named_in(&shadow));
            coverage.primary_named += usize::from(by_primary);
            coverage.shadow_named += usize::from(by_shadow);
            if by_primary && !by_shadow {
                coverage.missed += 1;
                if coverage.missed_labels.len() < MAX_MISSED_LISTED {
                    coverage.missed_labels.push(item.label.clone());
                }
            }
        }
        coverage
    }

    /// The compared answer names everything the client's named.
    pub fn holds(&self) -> bool {
        self.missed == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_named_by_its_path_or_its_name_case_and_spacing_aside() {
        let file = MustName::file("/p/src/Parse.rs");
        assert_eq!(file.names, ["/p/src/Parse.rs", "Parse.rs"]);
        assert!(file.named_in(&normalise("We changed  PARSE.RS.")));
        assert!(!file.named_in(&normalise("We changed the parser.")));
        let error = MustName {
            label: "cargo test".into(),
            names: vec!["cargo  test".into()],
        };
        assert_eq!(
            missing([&file, &error], "parse.rs is done; CARGO TEST fails"),
            Vec::<String>::new()
        );
        assert_eq!(
            missing([&file, &error], "Nothing."),
            ["/p/src/Parse.rs", "cargo test"]
        );
    }

    #[test]
    fn coverage_counts_each_side_and_lists_what_only_the_client_named() {
        let items = [
            MustName::file("/w/a.rs"),
            MustName::file("/w/b.rs"),
            MustName::file("/w/c.rs"),
        ];
        let coverage = Coverage::of(&items, "edited a.rs and b.rs", "edited b.rs and c.rs");
        assert_eq!(
            coverage,
            Coverage {
                required: 3,
                primary_named: 2,
                shadow_named: 2,
                missed: 1,
                missed_labels: vec!["/w/a.rs".into()],
            }
        );
        assert!(!coverage.holds());
        // Naming more than the client did holds; so does naming what it named.
        assert!(Coverage::of(&items, "a.rs", "a.rs, b.rs and c.rs").holds());
        assert!(Coverage::of(&items, "nothing", "nothing either").holds());
    }
}
