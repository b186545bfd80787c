//! The serialized name of each dialect is the one the docs and logs use (`as_str`), and
//! the names older history lines carry still read back.

use glider_ngl::Dialect;

#[test]
fn serialized_names_are_the_documented_ones() {
    for dialect in Dialect::ALL {
        let json = serde_json::to_string(&dialect).expect("serialize");
        assert_eq!(json, format!("\"{}\"", dialect.as_str()));
        let back: Dialect = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, dialect);
    }
}

#[test]
fn history_lines_written_with_the_old_names_still_load() {
    for (old, dialect) in [
        ("\"open_ai_chat\"", Dialect::OpenAiChat),
        ("\"open_ai_responses\"", Dialect::OpenAiResponses),
    ] {
        let read: Dialect = serde_json::from_str(old).expect("old name");
        assert_eq!(read, dialect);
    }
}
