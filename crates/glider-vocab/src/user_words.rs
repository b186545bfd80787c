//! The user's own words in a user message, without the blocks a CLI injects there:
//! Claude Code's `<system-reminder>` blocks (skills and command lists — Glider's own
//! `/local`, `/cloud` among them —, task lists, notes on changed files), its slash
//! command expansions (`<command-name>`, `<command-message>`, `<command-args>`, a local
//! command's output), and Codex's `<environment_context>` and `<user_instructions>`.
//! The continuity record keeps goals and episode titles from this, never the
//! boilerplate: a real Claude Code turn opens with several KiB of reminders.

use std::borrow::Cow;

/// The tags whose whole block (opening tag to closing tag) a CLI injects.
const INJECTED_BLOCKS: &[&str] = &[
    "system-reminder",
    "command-name",
    "command-message",
    "command-args",
    "command-contents",
    "local-command-stdout",
    "local-command-stderr",
    "local-command-caveat",
    "environment_context",
    "user_instructions",
];

/// `text` without the injected blocks (see the module's doc), trimmed; borrowed when
/// there were none. A block left open runs to the end of the text.
pub fn user_words(text: &str) -> Cow<'_, str> {
    let mut parts = OutsideBlocks::of(text);
    let first = parts.next().unwrap_or_default();
    if parts.removed.is_none() {
        return Cow::Borrowed(first.trim());
    }
    let mut kept = String::from(first);
    parts.for_each(|part| kept.push_str(part));
    match kept.trim() {
        trimmed if trimmed.len() == kept.len() => Cow::Owned(kept),
        trimmed => Cow::Owned(trimmed.to_owned()),
    }
}

/// Whether `text` holds any of the user's own words ([`user_words`] not empty), found
/// without building them.
pub fn has_user_words(text: &str) -> bool {
    OutsideBlocks::of(text).any(|part| !part.trim().is_empty())
}

/// The parts of a text outside the injected blocks, in order.
struct OutsideBlocks<'a> {
    rest: Option<&'a str>,
    /// Set once a block was found (the text is then not one part).
    removed: Option<()>,
}

impl<'a> OutsideBlocks<'a> {
    fn of(text: &'a str) -> Self {
        OutsideBlocks {
            rest: Some(text),
            removed: None,
        }
    }
}

impl<'a> Iterator for OutsideBlocks<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        let mut from = 0;
        while let Some(found) = rest[from..].find('<') {
            let at = from + found;
            let Some((tag, opening)) = opening_tag(&rest[at..]) else {
                from = at + 1;
                continue;
            };
            self.removed = Some(());
            self.rest = Some(after_block(&rest[at + opening..], tag));
            return Some(&rest[..at]);
        }
        self.rest = None;
        Some(rest)
    }
}

/// What follows the closing tag of a `tag` block whose body starts `body` (nothing when
/// the block is never closed).
fn after_block<'a>(body: &'a str, tag: &str) -> &'a str {
    let mut from = 0;
    while let Some(found) = body[from..].find("</") {
        let at = from + found + 2;
        if let Some(after) = body[at..]
            .strip_prefix(tag)
            .and_then(|t| t.strip_prefix('>'))
        {
            return after;
        }
        from = at;
    }
    ""
}

/// The injected tag `text` opens with, and the bytes its opening tag takes.
fn opening_tag(text: &str) -> Option<(&'static str, usize)> {
    INJECTED_BLOCKS.iter().find_map(|tag| {
        let rest = text.strip_prefix('<')?.strip_prefix(tag)?;
        // `<tag>` or `<tag attr="…">`, never a longer name that starts alike.
        let end = match rest.as_bytes().first()? {
            b'>' => 0,
            b' ' | b'\n' | b'\t' => rest.find('>')?,
            _ => return None,
        };
        Some((*tag, 1 + tag.len() + end + 1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_s_reminders_and_command_blocks_are_not_the_user_s_words() {
        let turn = "<system-reminder>\nThe following skills are available: /local, /cloud\n</system-reminder>\n\
                    Fix the flaky parser test in src/parse.rs";
        assert_eq!(
            user_words(turn),
            "Fix the flaky parser test in src/parse.rs"
        );
        let command = "<command-message>local is running…</command-message>\n\
                       <command-name>/local</command-name>\n<command-args>what did we change?</command-args>";
        assert_eq!(user_words(command), "");
        let only = "<system-reminder>As you answer the user's questions…</system-reminder>";
        assert_eq!(user_words(only), "");
        let codex = "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>";
        assert_eq!(user_words(codex), "");
    }

    #[test]
    fn other_angle_brackets_and_unclosed_blocks_are_handled() {
        assert!(matches!(
            user_words("  plain words "),
            Cow::Borrowed("plain words")
        ));
        let code = "why is a < b && <T> wrong in <system-reminders-fake>?";
        assert!(matches!(user_words(code), Cow::Borrowed(_)));
        assert_eq!(user_words(code), code);
        assert_eq!(
            user_words("keep this <system-reminder attr=\"x\">cut</system-reminder> and this"),
            "keep this  and this"
        );
        assert_eq!(user_words("before <system-reminder>never closed"), "before");
        assert!(!has_user_words("<system-reminder>a</system-reminder>\n "));
        assert!(has_user_words("<system-reminder>a</system-reminder> hi"));
        assert!(has_user_words("a < b"));
    }
}
