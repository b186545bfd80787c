//! A request's tool definitions as one shared list ([`ToolList`]): a coding CLI sends
//! 20-30 tools with long JSON schemas on every turn, and a request is copied per
//! candidate and kept across turns (the decoder's kept lists), so the list is shared
//! by reference and copied only when changed.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{ToolDef, json_len};

/// The tools of a request. Reads go through `Deref` to the `Vec`; a change
/// (`DerefMut`) copies the list first if it is shared, as `Arc::make_mut` does, and
/// forgets the remembered text length.
#[derive(Debug, Clone, Default)]
pub struct ToolList(Arc<Shared>);

#[derive(Debug, Clone, Default)]
struct Shared {
    tools: Vec<ToolDef>,
    /// [`ToolList::text_len`], once asked.
    text_len: OnceLock<usize>,
}

impl ToolList {
    /// Bytes of the tools' text as a model reads it (names, descriptions, schemas as
    /// compact JSON), counted once per list: a token estimate reads it on every
    /// request, and walking 60 KB of schemas costs ~200k instructions.
    pub fn text_len(&self) -> usize {
        *self.0.text_len.get_or_init(|| {
            self.0
                .tools
                .iter()
                .map(|tool| {
                    tool.name.len()
                        + tool.description.as_ref().map_or(0, String::len)
                        + json_len(&tool.parameters)
                })
                .sum()
        })
    }
}

impl Deref for ToolList {
    type Target = Vec<ToolDef>;

    fn deref(&self) -> &Vec<ToolDef> {
        &self.0.tools
    }
}

impl DerefMut for ToolList {
    fn deref_mut(&mut self) -> &mut Vec<ToolDef> {
        let shared = Arc::make_mut(&mut self.0);
        shared.text_len = OnceLock::new();
        &mut shared.tools
    }
}

impl From<Vec<ToolDef>> for ToolList {
    fn from(tools: Vec<ToolDef>) -> Self {
        ToolList(Arc::new(Shared {
            tools,
            text_len: OnceLock::new(),
        }))
    }
}

impl FromIterator<ToolDef> for ToolList {
    fn from_iter<I: IntoIterator<Item = ToolDef>>(iter: I) -> Self {
        Vec::from_iter(iter).into()
    }
}

impl<'a> IntoIterator for &'a ToolList {
    type Item = &'a ToolDef;
    type IntoIter = std::slice::Iter<'a, ToolDef>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.tools.iter()
    }
}

impl PartialEq for ToolList {
    fn eq(&self, other: &Self) -> bool {
        self.0.tools == other.0.tools
    }
}

impl Serialize for ToolList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.tools.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(ToolList::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ToolDef {
        ToolDef::plain(name)
    }

    #[test]
    fn a_change_to_a_shared_list_is_its_own() {
        let original = ToolList::from(vec![tool("Read"), tool("Bash")]);
        let mut copy = original.clone();
        assert!(Arc::ptr_eq(&original.0, &copy.0), "a clone shares the list");
        copy.retain(|t| t.name == "Read");
        assert_eq!(copy.len(), 1);
        assert_eq!(original.len(), 2, "the original is unchanged");
        assert_ne!(copy, original);
    }

    #[test]
    fn the_text_length_is_remembered_and_forgotten_on_a_change() {
        let mut list = ToolList::from(vec![tool("Read")]);
        let read = "Read".len() + r#"{"type":"object"}"#.len();
        assert!(list.0.text_len.get().is_none());
        assert_eq!(list.text_len(), read);
        assert_eq!(list.0.text_len.get(), Some(&read), "remembered");
        let shared = list.clone();
        list.push(tool("Grep"));
        assert!(list.0.text_len.get().is_none(), "forgotten on a change");
        assert_eq!(list.text_len(), 2 * read);
        assert_eq!(shared.text_len(), read, "the shared copy keeps its own");
    }

    #[test]
    fn it_serialises_as_the_plain_list() {
        let list = ToolList::from(vec![tool("Read")]);
        let text = serde_json::to_string(&list).expect("serialises");
        assert_eq!(text, r#"[{"name":"Read","parameters":{"type":"object"}}]"#);
        let back: ToolList = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, list);
    }
}
