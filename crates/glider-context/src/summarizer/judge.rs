//! Whether a summary the model wrote is one, beyond naming what it must: a small or
//! base local model often repeats the summarizer's own instructions, or copies its
//! input back, and a check that only looks for the required files and errors accepts
//! both (for a session with nothing required, anything). Measured as the share of the
//! summary's word sequences found in the instructions or in the input.

use std::collections::HashSet;

use super::compaction::SYSTEM_PROMPT;

/// Fewer words than this say nothing a record could keep.
pub const MIN_WORDS: usize = 5;
/// Word sequences of this length are compared with the instructions …
const INSTRUCTION_GRAM: usize = 4;
/// … and this share of the summary's sequences found there is a restatement.
pub const MAX_INSTRUCTION_SHARE: f64 = 0.3;
/// Longer sequences are compared with the input: a summary shares short phrases with
/// what it summarises, never most of its long ones.
const INPUT_GRAM: usize = 8;
/// This share of the summary's long sequences found in the input is a copy of it.
pub const MAX_INPUT_SHARE: f64 = 0.8;

/// Why `summary` (written from `input`, which holds the `previous` narrative it
/// updates, if any) is no summary, or `None` when it is one. Keeping the previous
/// narrative's words is no copy: a range that added little leaves it as it was.
pub fn rejection(summary: &str, input: &str, previous: Option<&str>) -> Option<String> {
    let said = words(summary);
    if said.len() < MIN_WORDS {
        return Some(format!(
            "the summary says nothing ({} words, fewer than {MIN_WORDS})",
            said.len()
        ));
    }
    let restated = share_found(&said, &words(SYSTEM_PROMPT), INSTRUCTION_GRAM);
    if restated >= MAX_INSTRUCTION_SHARE {
        return Some(format!(
            "the summary restates its instructions ({:.0} % of its {INSTRUCTION_GRAM}-word phrases are the prompt's)",
            restated * 100.0
        ));
    }
    let input = match previous.filter(|p| !p.trim().is_empty()) {
        Some(previous) => input.replace(previous, " "),
        None => input.to_owned(),
    };
    let copied = share_found(&said, &words(&input), INPUT_GRAM);
    if copied >= MAX_INPUT_SHARE {
        return Some(format!(
            "the summary copies its input ({:.0} % of its {INPUT_GRAM}-word phrases are found there verbatim): it says nothing the record does not",
            copied * 100.0
        ));
    }
    None
}

/// Lowercased words, punctuation dropped.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '/' && c != '.' && c != '_')
        .map(|w| w.trim_matches('.').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The share of `words`' `n`-word sequences that occur in `within` (0 when it has
/// none: shorter than `n`).
fn share_found(words: &[String], within: &[String], n: usize) -> f64 {
    if words.len() < n {
        return 0.0;
    }
    let known: HashSet<&[String]> = within.windows(n).collect();
    let grams = words.windows(n);
    let total = grams.len();
    let found = grams.filter(|g| known.contains(g)).count();
    found as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const INPUT: &str = "Goals:\n- rename foo to bar in src/lib.rs\nFiles:\n- src/lib.rs: edited\n\
        New turns:\nuser: rename foo to bar in src/lib.rs\nassistant: Renamed foo to bar because the API calls it bar.";

    #[test]
    fn a_real_summary_is_accepted() {
        let summary = "The user asked to rename foo to bar in src/lib.rs. The assistant read \
                       the file, edited it, and explained that the API calls it bar. Nothing is open.";
        assert_eq!(rejection(summary, INPUT, None), None);
        // The narrative it updates, kept as it was, is no copy of the input.
        let with_previous = format!("Summary so far:\n{summary}\n{INPUT}");
        assert_eq!(rejection(summary, &with_previous, Some(summary)), None);
    }

    #[test]
    fn a_summary_that_restates_its_instructions_is_rejected() {
        // What a small model wrote in the first hour, for a session whose requests had
        // all failed.
        let echoed = "Write the updated summary: what the user wants, what was done and why, \
                      what was decided, and what is still open. Plain prose, at most 300 words, no preamble.";
        let why = rejection(echoed, INPUT, None).expect("rejected");
        assert!(why.contains("restates its instructions"), "{why}");
    }

    #[test]
    fn a_copy_of_the_input_and_an_empty_answer_are_rejected() {
        let why = rejection(INPUT, INPUT, None).expect("rejected");
        assert!(why.contains("copies its input"), "{why}");
        let why = rejection("Okay.", INPUT, None).expect("rejected");
        assert!(why.contains("says nothing"), "{why}");
    }
}
